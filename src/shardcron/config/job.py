"""A job's settings (JobConfig) and its two YAML forms: the registry's ``/{job}/config``
value and a job's block in the user's config file.

The registry side (``JobConfig.to_yaml`` / ``from_yaml``) writes exactly what ElasticJob 3.0.x
writes into ``/{job}/config`` (SnakeYAML ``dumpAsMap`` of ``JobConfigurationPOJO``), so the Java
console, lifecycle API and Java instances can read a Python job and vice versa. Settings Java has
no key for live in ``props`` under the ``shardcron.`` prefix, because the Java reader rejects
unknown top-level keys.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, overload

from shardcron.config import plugins, secrecy
from shardcron.config.conversion import (
    _choices,
    _convert,
    _job_type,
    _Kind,
    _kind_name,
    _unknown_key,
    parse_sharding_item_parameters,
)
from shardcron.config.jobtypes import (
    CALLABLE_PROP,
    DEFAULT_ERROR_HANDLER,
    DEFAULT_EXECUTOR_SERVICE_HANDLER,
    DEFAULT_SHARDING_STRATEGY,
    ERROR_HANDLERS,
    EXECUTOR_KEY,
    EXECUTOR_KEY_305,
    EXECUTOR_SERVICE_HANDLERS,
    HTTP_METHODS,
    PROP_PREFIX,
    SHARDING_STRATEGIES,
    TYPE_PROP,
    JobType,
)
from shardcron.config.plugins import Kind
from shardcron.config.snakeyaml import Props, RegistryLoader, dump_bean, java_props, load
from shardcron.errors import ConfigError


@dataclass(frozen=True, slots=True, kw_only=True)
class JobConfig:
    """Every field of Java's ``JobConfiguration`` with the Java builder's defaults, plus
    ``type`` and ``callable``. Construction never validates (a Java-written job from the
    registry must load); call ``validate()`` before running the job."""

    job_name: str
    sharding_total_count: int
    cron: str | None = None
    time_zone: str | None = None
    sharding_item_parameters: str = ""
    job_parameter: str = ""
    monitor_execution: bool = True
    failover: bool = False
    misfire: bool = True
    max_time_diff_seconds: int = -1
    reconcile_interval_minutes: int = 10
    job_sharding_strategy_type: str | None = None
    job_executor_service_handler_type: str | None = None
    job_error_handler_type: str | None = None
    job_listener_types: tuple[str, ...] = ()
    description: str = ""
    props: Mapping[str, str] = field(default_factory=Props)
    disabled: bool = False
    overwrite: bool = False
    label: str | None = None
    static_sharding: bool = False
    type: JobType = JobType.SIMPLE
    callable: str | None = None
    # The registry YAML key the thread-pool type was read under, so a write-back keeps the
    # key the Java version on that registry understands. Not part of the job's identity.
    executor_key: str = field(default=EXECUTOR_KEY, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "props", Props(self.props))
        object.__setattr__(self, "job_listener_types", tuple(self.job_listener_types))
        object.__setattr__(self, "type", _job_type(self.type, "type"))

    @property
    def sharding_strategy(self) -> str:
        return self.job_sharding_strategy_type or DEFAULT_SHARDING_STRATEGY

    @property
    def executor_service_handler(self) -> str:
        return self.job_executor_service_handler_type or DEFAULT_EXECUTOR_SERVICE_HANDLER

    @property
    def error_handler(self) -> str:
        return self.job_error_handler_type or DEFAULT_ERROR_HANDLER

    @property
    def node_value(self) -> str:
        """The value of the ``/{job}`` node: the callable reference, else the type name."""
        return self.callable or str(self.type)

    @overload
    def prop(self, name: str) -> str | None: ...
    @overload
    def prop(self, name: str, default: str) -> str: ...
    def prop(self, name: str, default: str | None = None) -> str | None:
        return self.props.get(name, default)

    def sharding_parameters(self) -> dict[int, str]:
        """``"0=a,1=b"`` as ``{0: "a", 1: "b"}``."""
        try:
            return parse_sharding_item_parameters(self.sharding_item_parameters)
        except ConfigError as err:
            raise ConfigError(err.field, err.problem, job=self.job_name) from None

    def with_changes(self, **changes: Any) -> JobConfig:
        return dataclasses.replace(self, **changes)

    def validate_all(self, *, registered_only: bool = True) -> list[ConfigError]:
        """Every problem, in field order; empty when the job can run. Never imports code.

        ``registered_only=False`` is for operator tools, which cannot see the names the
        workers registered: they accept any plain strategy, listener or handler name.
        """
        found = _problems(self, registered_only=registered_only)
        return [ConfigError(f, p, job=self.job_name or None) for f, p in found]

    def validate(self) -> None:
        """Raise the first problem ``validate_all`` finds."""
        problems = self.validate_all()
        if problems:
            raise problems[0]

    def to_yaml(self) -> str:
        """The ``/{job}/config`` value, byte for byte what Java 3.0.x writes for the same config
        (props in the order Java's map gives after the same insertions:
        :mod:`shardcron.config.snakeyaml` says where that order cannot be known)."""
        props = dict(self.props)
        if self.type is not JobType.SIMPLE:
            props[TYPE_PROP] = str(self.type)
        if self.callable is not None:
            props[CALLABLE_PROP] = self.callable
        doc: dict[str, object] = {
            "cron": self.cron,
            "description": self.description,
            "disabled": self.disabled,
            "failover": self.failover,
            "jobErrorHandlerType": self.job_error_handler_type,
            self.executor_key: self.job_executor_service_handler_type,
            "jobListenerTypes": list(self.job_listener_types),
            "jobName": self.job_name,
            "jobParameter": self.job_parameter,
            "jobShardingStrategyType": self.job_sharding_strategy_type,
            "label": self.label,
            "maxTimeDiffSeconds": self.max_time_diff_seconds,
            "misfire": self.misfire,
            "monitorExecution": self.monitor_execution,
            "overwrite": self.overwrite,
            "props": props,
            "reconcileIntervalMinutes": self.reconcile_interval_minutes,
            "shardingItemParameters": self.sharding_item_parameters,
            "shardingTotalCount": self.sharding_total_count,
            "staticSharding": self.static_sharding,
            "timeZone": self.time_zone,
        }
        kept = {k: v for k, v in doc.items() if v is not None and v != [] and v != {}}
        if "props" in kept:
            kept["props"] = java_props(props)
        return dump_bean(kept)

    @classmethod
    def from_yaml(cls, text: str, job_name: str | None = None) -> JobConfig:
        """Parse a ``/{job}/config`` value written by Java or by ``to_yaml``.

        Absent keys get the Java POJO's defaults (not the builder's), unknown keys and
        ``jobExtraConfigurations`` are ignored; ``job_name`` is used only if the YAML has none.
        """
        data = load(text, RegistryLoader)
        if not isinstance(data, dict):
            raise ConfigError("config", f"expected a YAML mapping, got {_kind_name(data)}")
        cfg, errors = _parse_job(data, job_name, from_registry=True)
        if cfg is None or errors:
            raise errors[0]
        return cfg

    @classmethod
    def from_mapping(cls, data: Mapping[str, object], job_name: str | None = None) -> JobConfig:
        """Build from the camelCase keys of the user's file (plus ``type`` and ``callable``).

        Converts and checks types only; call ``validate()`` for the semantic checks.
        """
        cfg, errors = _parse_job(data, job_name, from_registry=False)
        if cfg is None or errors:
            raise errors[0]
        return cfg


def resolve_callable(ref: str, *, field: str = "callable") -> object:
    """Import ``"module:qualname"`` and return the object it names (local declarations only)."""
    return plugins.import_ref(ref, field=field)


def declare(config: JobConfig, *, with_callable: bool) -> None:
    """Import what a *locally declared* job names by ``module:qualname`` and register it.

    ``with_callable`` also checks that the job's callable imports (when no code was given).
    Raises a ConfigError naming the job and the field.
    """
    try:
        strategy = config.job_sharding_strategy_type
        if strategy and ":" in strategy and plugins.lookup(plugins.Kind.STRATEGY, strategy) is None:
            plugins.register(
                plugins.Kind.STRATEGY,
                strategy,
                plugins.import_ref(strategy, field=str(plugins.Kind.STRATEGY)),
            )
        for ref in config.job_listener_types:
            if ":" in ref and plugins.lookup(plugins.Kind.LISTENER, ref) is None:
                plugins.register(
                    plugins.Kind.LISTENER,
                    ref,
                    plugins.import_ref(ref, field=str(plugins.Kind.LISTENER)),
                )
        if with_callable and config.callable:
            plugins.import_ref(config.callable)
    except ConfigError as err:
        raise ConfigError(err.field, err.problem, job=config.job_name) from None


# --- the YAML keys of a job --------------------------------------------------------------


_JAVA_KEYS: dict[str, tuple[str, _Kind]] = {
    "cron": ("cron", _Kind.OPTIONAL_TEXT),
    "description": ("description", _Kind.TEXT),
    "disabled": ("disabled", _Kind.BOOL),
    "failover": ("failover", _Kind.BOOL),
    "jobErrorHandlerType": ("job_error_handler_type", _Kind.OPTIONAL_TEXT),
    EXECUTOR_KEY: ("job_executor_service_handler_type", _Kind.OPTIONAL_TEXT),
    EXECUTOR_KEY_305: ("job_executor_service_handler_type", _Kind.OPTIONAL_TEXT),
    "jobListenerTypes": ("job_listener_types", _Kind.LIST),
    "jobName": ("job_name", _Kind.TEXT),
    "jobParameter": ("job_parameter", _Kind.TEXT),
    "jobShardingStrategyType": ("job_sharding_strategy_type", _Kind.OPTIONAL_TEXT),
    "label": ("label", _Kind.OPTIONAL_TEXT),
    "maxTimeDiffSeconds": ("max_time_diff_seconds", _Kind.INT),
    "misfire": ("misfire", _Kind.BOOL),
    "monitorExecution": ("monitor_execution", _Kind.BOOL),
    "overwrite": ("overwrite", _Kind.BOOL),
    "props": ("props", _Kind.PROPS),
    "reconcileIntervalMinutes": ("reconcile_interval_minutes", _Kind.INT),
    "shardingItemParameters": ("sharding_item_parameters", _Kind.TEXT),
    "shardingTotalCount": ("sharding_total_count", _Kind.INT),
    "staticSharding": ("static_sharding", _Kind.BOOL),
    "timeZone": ("time_zone", _Kind.OPTIONAL_TEXT),
}
_FILE_KEYS: dict[str, tuple[str, _Kind]] = {
    **_JAVA_KEYS,
    "type": ("type", _Kind.JOB_TYPE),
    "callable": ("callable", _Kind.OPTIONAL_TEXT),
}
# What Java's POJO holds when the registry YAML lacks the key (differs from the builder).
_POJO_ABSENT: dict[str, Any] = {
    "sharding_total_count": 0,
    "monitor_execution": False,
    "misfire": False,
    "reconcile_interval_minutes": 0,
}


def _parse_job(
    data: Mapping[Any, object], job_name: str | None, *, from_registry: bool
) -> tuple[JobConfig | None, list[ConfigError]]:
    """Convert every key, collecting every error; the config is None only without a name."""
    known = _JAVA_KEYS if from_registry else _FILE_KEYS
    kwargs: dict[str, Any] = dict(_POJO_ABSENT) if from_registry else {}
    name_in_data = data.get("jobName")
    # The registry YAML's own name wins over the node path; the file's map key wins over jobName.
    name = (name_in_data or job_name) if from_registry else (job_name or name_in_data)
    label = name if isinstance(name, str) and name else None
    errors: list[ConfigError] = []
    for raw_key, raw in data.items():
        key = str(raw_key)
        if key not in known:
            # The registry may hold keys of a newer Java version, or jobExtraConfigurations.
            if not from_registry:
                errors.append(_unknown_key(key, known, label))
            continue
        if raw is None:
            continue
        attr, kind = known[key]
        try:
            kwargs[attr] = _convert(key, kind, raw)
        except ConfigError as err:
            errors.append(ConfigError(err.field, err.problem, job=label))
        if key in (EXECUTOR_KEY, EXECUTOR_KEY_305):
            kwargs["executor_key"] = key
    errors += _split_python_props(kwargs, label, from_registry=from_registry)
    if not from_registry and job_name and name_in_data not in (None, job_name):
        errors.append(
            ConfigError("jobName", f"{name_in_data!r} differs from {job_name!r}", job=label)
        )
    if label is None:
        errors.append(ConfigError("jobName", "missing; every job needs a name"))
        return None, errors
    kwargs["job_name"] = label
    if data.get("shardingTotalCount") is None and not from_registry:
        errors.append(
            ConfigError("shardingTotalCount", "required: the number of items, e.g. 3", job=label)
        )
    kwargs.setdefault("sharding_total_count", 0)  # a stand-in; its error is reported above
    return JobConfig(**kwargs), errors


def _split_python_props(
    kwargs: dict[str, Any], job: str | None, *, from_registry: bool
) -> list[ConfigError]:
    """Move ``shardcron.*`` props into their fields (registry side) or reject them (file)."""
    props = dict(kwargs.get("props", {}))
    errors: list[ConfigError] = []
    for attr in ("type", "callable"):
        prop_key = PROP_PREFIX + attr
        if prop_key not in props:
            continue
        value = props.pop(prop_key)
        if not from_registry:
            problem = f"reserved; use the key {attr!r}"
            errors.append(ConfigError(f"props.{prop_key}", problem, job=job))
            continue
        try:
            kwargs[attr] = _job_type(value, f"props.{prop_key}") if attr == "type" else value
        except ConfigError as err:
            errors.append(ConfigError(err.field, err.problem, job=job))
    kwargs["props"] = Props(props)
    return errors


# --- the semantic checks: what must hold before a job can run -----------------------------
# Each check yields ``(field, problem)`` pairs and never imports code (callables are imported
# where a job is declared, :func:`declare`).


def _problems(cfg: JobConfig, *, registered_only: bool) -> Iterator[tuple[str, str]]:
    yield from _job_name_problems(cfg.job_name)
    if cfg.sharding_total_count <= 0:
        yield "shardingTotalCount", f"must be at least 1; got {cfg.sharding_total_count}"
    yield from _cron_problems(cfg)
    yield from _sharding_parameter_problems(cfg)
    handler = cfg.job_executor_service_handler_type
    if handler and handler not in EXECUTOR_SERVICE_HANDLERS:
        yield EXECUTOR_KEY, f"unknown type {handler!r}; use {_choices(EXECUTOR_SERVICE_HANDLERS)}"
    names = [
        (Kind.STRATEGY, cfg.job_sharding_strategy_type, SHARDING_STRATEGIES),
        (Kind.ERROR_HANDLER, cfg.job_error_handler_type, ERROR_HANDLERS),
        *((Kind.LISTENER, name, ()) for name in cfg.job_listener_types),
    ]
    for kind, name, builtins in names:
        problem = plugins.name_problem(kind, name or "", builtins, registered_only=registered_only)
        if problem:
            yield str(kind), problem
    yield from _type_problems(cfg)
    yield from secrecy.literal_secret_problems(cfg.props)
    if cfg.failover and not cfg.monitor_execution:
        yield "failover", "needs monitorExecution: true (failover tracks running items)"
    if cfg.max_time_diff_seconds < -1:
        yield (
            "maxTimeDiffSeconds",
            f"must be -1 (no check) or more; got {cfg.max_time_diff_seconds}",
        )
    if cfg.reconcile_interval_minutes < 0:
        yield (
            "reconcileIntervalMinutes",
            f"must be 0 (off) or more; got {cfg.reconcile_interval_minutes}",
        )
    for reserved, instead in ((TYPE_PROP, "type"), (CALLABLE_PROP, "callable")):
        if reserved in cfg.props:
            yield f"props.{reserved}", f"reserved; set {instead!r} instead"


def _job_name_problems(name: str) -> Iterator[tuple[str, str]]:
    if not name:
        yield "jobName", "must not be empty"
    elif "/" in name:
        yield "jobName", f"{name!r} contains '/'; a job name is a single registry node name"
    elif name in (".", ".."):
        yield "jobName", f"{name!r} is not a valid registry node name"
    elif any(_forbidden_in_znode(ch) for ch in name):
        yield "jobName", f"{name!r} contains a control or reserved character"


def _forbidden_in_znode(ch: str) -> bool:
    # The characters ZooKeeper's path validation rejects.
    code = ord(ch)
    return (
        code <= 0x1F or 0x7F <= code <= 0x9F or 0xD800 <= code <= 0xF8FF or 0xFFF0 <= code <= 0xFFFF
    )


def _cron_problems(cfg: JobConfig) -> Iterator[tuple[str, str]]:
    if not cfg.cron:
        return
    # Imported here: trigger is the heavier module and may itself import config.
    from shardcron.schedule.trigger import CronTrigger

    try:
        CronTrigger.parse(cfg.cron, cfg.time_zone)
    except ConfigError as err:
        yield err.field, err.problem


def _sharding_parameter_problems(cfg: JobConfig) -> Iterator[tuple[str, str]]:
    try:
        items = parse_sharding_item_parameters(cfg.sharding_item_parameters)
    except ConfigError as err:
        yield err.field, err.problem
        return
    total = cfg.sharding_total_count
    if total <= 0:
        return
    for item in items:
        if not 0 <= item < total:
            yield (
                "shardingItemParameters",
                f"item {item} is out of range 0..{total - 1} (shardingTotalCount is {total})",
            )


def _type_problems(cfg: JobConfig) -> Iterator[tuple[str, str]]:
    if cfg.type is JobType.SCRIPT and not cfg.prop("script.command.line", "").strip():
        yield "props.script.command.line", "required for SCRIPT jobs: the command line to run"
    if cfg.type is JobType.HTTP:
        if not cfg.prop("http.uri", "").strip():
            yield "props.http.uri", "required for HTTP jobs: the URL to call"
        method = cfg.prop("http.method", "").strip()
        if not method:
            yield "props.http.method", f"required for HTTP jobs: one of {_choices(HTTP_METHODS)}"
        elif method.upper() not in HTTP_METHODS:
            yield "props.http.method", f"unknown method {method!r}; use {_choices(HTTP_METHODS)}"
    if cfg.type in (JobType.SIMPLE, JobType.DATAFLOW):
        # Only the form: the code is imported where the job is declared (plugins.declare),
        # never because a registry value names it.
        module, sep, qualname = (cfg.callable or "").partition(":")
        if not cfg.callable:
            yield "callable", f"required for {cfg.type} jobs: 'module:qualname' of the function"
        elif not sep or not module.strip() or not qualname.strip():
            yield "callable", f"{cfg.callable!r} is not 'module:qualname' (e.g. myapp.jobs:run)"
