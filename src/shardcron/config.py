"""Job and registry settings: the user's config file, validation, and the registry's YAML.

The registry side (``JobConfig.to_yaml`` / ``from_yaml``) writes exactly what ElasticJob 3.0.x
writes into ``/{job}/config`` (SnakeYAML ``dumpAsMap`` of ``JobConfigurationPOJO``), so the Java
console, lifecycle API and Java instances can read a Python job and vice versa. Settings Java has
no key for live in ``props`` under the ``shardcron.`` prefix, because the Java reader rejects
unknown top-level keys.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import functools
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload
from urllib.parse import parse_qsl, unquote

from shardcron import plugins, secrecy
from shardcron.errors import ConfigError
from shardcron.plugins import Kind
from shardcron.snakeyaml import FileLoader, Props, RegistryLoader, dump_bean, java_props, load

PROP_PREFIX = "shardcron."
TYPE_PROP = PROP_PREFIX + "type"
CALLABLE_PROP = PROP_PREFIX + "callable"

DEFAULT_SHARDING_STRATEGY = "AVG_ALLOCATION"
DEFAULT_EXECUTOR_SERVICE_HANDLER = "CPU"
DEFAULT_ERROR_HANDLER = "LOG"
# RENDEZVOUS is shardcron's own: a Java worker cannot lead a job that uses it.
SHARDING_STRATEGIES = (
    "AVG_ALLOCATION",
    "ODEVITY",
    "ROUND_ROBIN",
    "SINGLE_SHARDING_BALANCE",
    "RENDEZVOUS",
)
EXECUTOR_SERVICE_HANDLERS = ("CPU", "SINGLE_THREAD")
ERROR_HANDLERS = ("LOG", "THROW", "IGNORE", "WEBHOOK", "EMAIL", "WECHAT", "DINGTALK")
HTTP_METHODS = ("GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "TRACE")

# Java <= 3.0.4 reads the first name, 3.0.5+ only the second; each rejects the other.
EXECUTOR_KEY = "jobExecutorServiceHandlerType"
EXECUTOR_KEY_305 = "jobExecutorThreadPoolSizeProviderType"

MEMORY_SERVERS = "memory"
DEFAULT_MEMORY_NAMESPACE = "shardcron"


class JobType(enum.StrEnum):
    SIMPLE = "SIMPLE"
    DATAFLOW = "DATAFLOW"
    SCRIPT = "SCRIPT"
    HTTP = "HTTP"


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
        (props in the order Java's map gives after the same insertions: :mod:`shardcron.snakeyaml`
        says where that order cannot be known)."""
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


def parse_sharding_item_parameters(text: str) -> dict[int, str]:
    """Split on ``,`` then on the first ``=``, both sides trimmed; blank means none."""
    result: dict[int, str] = {}
    if not text.strip():
        return result
    for pair in text.split(","):
        item, sep, value = pair.partition("=")
        item = item.strip()
        if not sep:
            raise ConfigError(
                "shardingItemParameters", f"{pair.strip()!r} is not ITEM=VALUE; write e.g. 0=a,1=b"
            )
        if not re.fullmatch(r"[+-]?[0-9]+", item):
            raise ConfigError(
                "shardingItemParameters",
                f"{item!r} is not an item number; write e.g. 0=a,1=b",
            )
        number = int(item)
        if number in result:
            raise ConfigError("shardingItemParameters", f"item {number} is given twice")
        result[number] = value.strip()
    return result


def resolve_callable(ref: str, *, field: str = "callable") -> object:
    """Import ``"module:qualname"`` and return the object it names (local declarations only)."""
    return plugins.import_ref(ref, field=field)


# --- validation --------------------------------------------------------------------------


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
    from shardcron.trigger import CronTrigger

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


def _choices(values: Iterable[str]) -> str:
    return ", ".join(values)


def _one_line(text: str) -> str:
    return " ".join(text.split())


# --- conversion of loosely typed values (YAML, CLI strings) ------------------------------


class _Kind(enum.Enum):
    TEXT = "text"
    OPTIONAL_TEXT = "optional text"
    INT = "integer"
    BOOL = "boolean"
    LIST = "list"
    PROPS = "mapping"
    JOB_TYPE = "job type"


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


def _convert(key: str, kind: _Kind, raw: object) -> Any:
    """``raw`` as the Python type of ``kind``; ConfigError naming ``key`` otherwise."""
    match kind:
        case _Kind.TEXT | _Kind.OPTIONAL_TEXT:
            return _text(key, raw)
        case _Kind.INT:
            if isinstance(raw, int) and not isinstance(raw, bool):
                return raw
            if isinstance(raw, str) and re.fullmatch(r"\s*[+-]?[0-9]+\s*", raw):
                return int(raw)
        case _Kind.BOOL:
            if isinstance(raw, bool):
                return raw
            if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
                return raw.strip().lower() == "true"
        case _Kind.LIST:
            if isinstance(raw, str):
                return tuple(part.strip() for part in raw.split(",") if part.strip())
            if isinstance(raw, list | tuple):
                return tuple(_text(key, each) for each in raw)
        case _Kind.PROPS:
            if isinstance(raw, Mapping):
                return Props({str(k): _text(f"{key}.{k}", v) for k, v in raw.items()})
        case _Kind.JOB_TYPE:
            return _job_type(_text(key, raw), key)
    raise ConfigError(key, f"expected {_article(kind.value)}, got {_shown(raw)}")


def _text(key: str, raw: object) -> str:
    if isinstance(raw, str):
        return raw
    if isinstance(raw, bool):  # as Java prints it, so `streaming.process: true` works
        return "true" if raw else "false"
    if isinstance(raw, int | float):
        return str(raw)
    raise ConfigError(key, f"expected text, got {_shown(raw)}")


def _job_type(raw: str, key: str) -> JobType:
    try:
        return JobType(raw.strip().upper())
    except ValueError:
        raise ConfigError(key, f"unknown job type {raw!r}; use {_choices(JobType)}") from None


def _article(noun: str) -> str:
    return f"an {noun}" if noun[0] in "aeiou" else f"a {noun}"


def _kind_name(raw: object) -> str:
    if raw is None:
        return "nothing"
    if isinstance(raw, dict):
        return "a mapping"
    return "a list" if isinstance(raw, list) else _article(type(raw).__name__)


def _shown(raw: object) -> str:
    if isinstance(raw, bool):
        return "true" if raw else "false"
    return repr(raw) if isinstance(raw, str | int | float) else _kind_name(raw)


def _unknown_key(key: str, known: Iterable[str], job: str | None) -> ConfigError:
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return ConfigError(key, f"unknown key{hint}", job=job)


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


# Not compared by ``drift``: ``overwrite`` is the file's own switch, and a worker always
# runs its own ``type`` and ``callable`` (a different callable is a name conflict instead).
_NOT_DRIFT = frozenset({"job_name", "overwrite", "type", "callable", "props"})
_YAML_KEY_OF = {attr: key for key, (attr, _) in _JAVA_KEYS.items() if key != EXECUTOR_KEY_305}


def drift(stored: JobConfig, local: JobConfig) -> list[str]:
    """The YAML keys whose registry value differs from the file's, sorted; ``props.NAME``
    for a property. With ``overwrite: false`` a worker runs the stored values of these."""
    keys = [
        _YAML_KEY_OF[f.name]
        for f in dataclasses.fields(JobConfig)
        if f.compare
        and f.name not in _NOT_DRIFT
        and getattr(stored, f.name) != getattr(local, f.name)
    ]
    keys += [
        f"props.{name}"
        for name in set(stored.props) | set(local.props)
        if stored.props.get(name) != local.props.get(name)
    ]
    return sorted(keys)


def drift_notice(job_name: str, keys: Iterable[str]) -> str:
    """One line for a worker's log: the registry's config wins over the local one, and how
    to apply the local one."""
    return (
        f"job {job_name!r}: the registry keeps its stored config (overwrite: false), which "
        f"differs from the local one in {', '.join(keys)}; to apply the local config, start "
        f"once with overwrite: true or run 'shardcron config {job_name} --set KEY=VALUE'"
    )


def apply_settings(cfg: JobConfig, settings: Mapping[str, str]) -> JobConfig:
    """``cfg`` with camelCase keys set from strings (``config JOB --set key=value``).

    ``props.NAME`` sets one property (an empty value removes it); an empty value clears an
    optional key. Types are converted and checked; call ``validate()`` for the rest.
    """
    changes: dict[str, Any] = {}
    props = dict(cfg.props)
    for key, raw in settings.items():
        try:
            if key.startswith("props."):
                name = key.removeprefix("props.")
                if name in (TYPE_PROP, CALLABLE_PROP):
                    raise ConfigError(key, f"reserved; set {name.removeprefix(PROP_PREFIX)!r}")
                if raw:
                    props[name] = raw
                else:
                    props.pop(name, None)
                continue
            if key == "jobName":
                raise ConfigError(key, "cannot be changed; a renamed job is a new job")
            if key == "props":
                raise ConfigError(key, "set one property at a time: props.NAME=VALUE")
            if key not in _FILE_KEYS:
                raise _unknown_key(key, [*_FILE_KEYS, "props.NAME"], None)
            attr, kind = _FILE_KEYS[key]
            changes[attr] = (
                None if kind is _Kind.OPTIONAL_TEXT and not raw else _convert(key, kind, raw)
            )
        except ConfigError as err:
            raise ConfigError(err.field, err.problem, job=cfg.job_name) from None
    return cfg.with_changes(props=Props(props), **changes)


# --- instance node -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceRecord:
    """The value of ``/{job}/instances/{id}``."""

    instance_id: str
    server_ip: str
    labels: str | None = None


@functools.lru_cache(maxsize=64)  # the same for every job of a process
def instance_yaml(instance_id: str, server_ip: str, labels: str | None = None) -> str:
    """``"jobInstanceId: ...\\nserverIp: ...\\n"`` (with ``labels`` between, if set)."""
    doc = {"jobInstanceId": instance_id, "labels": labels, "serverIp": server_ip}
    return dump_bean({k: v for k, v in doc.items() if v is not None})


def parse_instance_yaml(text: str) -> InstanceRecord:
    data = load(text, RegistryLoader)
    if not isinstance(data, dict):
        raise ConfigError("instance", f"expected a YAML mapping, got {_kind_name(data)}")
    instance_id, server_ip, labels = (data.get(k) for k in ("jobInstanceId", "serverIp", "labels"))
    if not isinstance(instance_id, str) or not instance_id:
        raise ConfigError("jobInstanceId", "missing from the instance node")
    if not isinstance(server_ip, str) or not server_ip:
        raise ConfigError("serverIp", "missing from the instance node")
    label_text = None if labels is None else _text("labels", labels)
    return InstanceRecord(instance_id=instance_id, server_ip=server_ip, labels=label_text)


# --- registry settings -------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RegistryConfig:
    """How to reach ZooKeeper. ``servers == "memory"`` means the embedded in-process registry.

    ``session_timeout_ms`` defaults to 10 s (kazoo's default), not Curator's 60 s: the session
    timeout is how long a crashed instance's items wait before failover.
    """

    servers: str
    namespace: str
    session_timeout_ms: int = 10_000
    connection_timeout_ms: int = 15_000
    base_sleep_ms: int = 1_000
    max_sleep_ms: int = 3_000
    max_retries: int = 3
    digest: str | None = field(default=None, repr=False)  # USER:PASSWORD: never printed

    @property
    def is_memory(self) -> bool:
        return self.servers == MEMORY_SERVERS

    def validate_all(self) -> list[ConfigError]:
        problems: list[ConfigError] = []
        if not self.servers.strip():
            problems.append(ConfigError("registry.servers", "must name HOST:PORT[,HOST:PORT]"))
        if not self.namespace.strip("/"):
            problems.append(ConfigError("registry.namespace", "must not be empty"))
        for key, value in (
            ("sessionTimeoutMilliseconds", self.session_timeout_ms),
            ("connectionTimeoutMilliseconds", self.connection_timeout_ms),
            ("baseSleepTimeMilliseconds", self.base_sleep_ms),
            ("maxSleepTimeMilliseconds", self.max_sleep_ms),
        ):
            if value <= 0:
                problems.append(ConfigError(f"registry.{key}", f"must be positive; got {value}"))
        if self.max_retries < 0:
            problems.append(
                ConfigError("registry.maxRetries", f"must be 0 or more; got {self.max_retries}")
            )
        if self.digest is not None and ":" not in self.digest:
            problems.append(ConfigError("registry.digest", "must be USER:PASSWORD"))
        return problems


_REGISTRY_KEYS: dict[str, tuple[str, _Kind]] = {
    "servers": ("servers", _Kind.TEXT),
    "namespace": ("namespace", _Kind.TEXT),
    "sessionTimeoutMilliseconds": ("session_timeout_ms", _Kind.INT),
    "connectionTimeoutMilliseconds": ("connection_timeout_ms", _Kind.INT),
    "baseSleepTimeMilliseconds": ("base_sleep_ms", _Kind.INT),
    "maxSleepTimeMilliseconds": ("max_sleep_ms", _Kind.INT),
    "maxRetries": ("max_retries", _Kind.INT),
    "digest": ("digest", _Kind.OPTIONAL_TEXT),
}


def parse_registry_url(url: str) -> RegistryConfig:
    """``zk://[USER:PASSWORD@]HOST:PORT[,HOST:PORT]/NAMESPACE[?key=value&...]`` or
    ``memory://[NAMESPACE]`` (the embedded registry; namespace defaults to ``shardcron``).

    Query keys are the registry keys of the config file, e.g. ``sessionTimeoutMilliseconds``.
    """
    scheme, sep, rest = url.strip().partition("://")
    if scheme.lower() == "memory" and sep:
        namespace = rest.strip("/") or DEFAULT_MEMORY_NAMESPACE
        return RegistryConfig(servers=MEMORY_SERVERS, namespace=namespace)
    if scheme.lower() not in ("zk", "zookeeper") or not sep:
        raise ConfigError(
            "registry",
            f"{secrecy.redact_url(url)!r} is not zk://HOST:PORT[,HOST:PORT]/NAMESPACE or memory://",
        )
    rest, _, query = rest.partition("?")
    netloc, _, path = rest.partition("/")
    userinfo, at, servers = netloc.rpartition("@")
    namespace = unquote(path.strip("/"))
    if not namespace:
        raise ConfigError(
            "registry", f"{secrecy.redact_url(url)!r} names no namespace; add /NAMESPACE"
        )
    data: dict[str, object] = dict(parse_qsl(query, keep_blank_values=True))
    data.update(servers=servers, namespace=namespace)
    if at:
        data["digest"] = unquote(userinfo)
    cfg, errors = _parse_registry(data)
    if cfg is None or errors:
        raise errors[0]
    return cfg


def _parse_registry(data: Mapping[Any, object]) -> tuple[RegistryConfig | None, list[ConfigError]]:
    kwargs: dict[str, Any] = {}
    errors: list[ConfigError] = []
    for raw_key, raw in data.items():
        key = str(raw_key)
        if key not in _REGISTRY_KEYS:
            errors.append(_unknown_key(key, _REGISTRY_KEYS, None))
            continue
        if raw is None:
            continue
        attr, kind = _REGISTRY_KEYS[key]
        try:
            kwargs[attr] = _convert(key, kind, raw)
        except ConfigError as err:
            errors.append(ConfigError(f"registry.{err.field}", err.problem))
    missing = [key for key in ("servers", "namespace") if key not in kwargs]
    errors += [ConfigError(f"registry.{key}", "required") for key in missing]
    if missing:
        return None, errors
    cfg = RegistryConfig(**kwargs)
    return cfg, errors + cfg.validate_all()


# --- the user's config file --------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerConfig:
    """Settings of the worker process itself (the ``worker`` block); never stored in the
    registry, so database credentials stay on the host that uses them."""

    tracing: str | None = None  # SQLAlchemy URL of the execution trace database
    metrics_port: int | None = None  # Prometheus endpoint, on 127.0.0.1 unless metrics_host says
    metrics_host: str = "127.0.0.1"
    dump_port: int | None = None  # the dump@{job} TCP service, on 127.0.0.1
    grace_seconds: float = 30.0
    # name -> module:qualname, imported from this file only (see shardcron.plugins)
    strategies: Mapping[str, str] = field(default_factory=dict)
    listener_types: Mapping[str, str] = field(default_factory=dict)
    error_handlers: Mapping[str, str] = field(default_factory=dict)
    # NAME -> value for ${NAME} references in props (see shardcron.secrecy)
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)


_WORKER_KEYS = {
    "tracing": "tracing",
    "metricsPort": "metrics_port",
    "metricsHost": "metrics_host",
    "dumpPort": "dump_port",
    "graceSeconds": "grace_seconds",
    "strategies": "strategies",
    "listenerTypes": "listener_types",
    "errorHandlers": "error_handlers",
    "secrets": "secrets",
}
_WORKER_TABLES = {
    "strategies": Kind.STRATEGY,
    "listener_types": Kind.LISTENER,
    "error_handlers": Kind.ERROR_HANDLER,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class AppConfig:
    """A loaded config file; ``registry`` is None when the file has no ``registry`` block."""

    registry: RegistryConfig | None
    jobs: tuple[JobConfig, ...]
    worker: WorkerConfig = field(default_factory=WorkerConfig)


def load_config_file(path: str | Path, *, validate: bool = True) -> AppConfig:
    """Load and check a config file; raises the first problem as a one-line ConfigError.

    ``validate=False`` skips the semantic job checks (e.g. when callables are registered
    from code rather than named in the file); types and keys are still checked.
    """
    app, errors = _read_config_file(Path(path), validate=validate)
    if app is None or errors:
        raise errors[0]
    return app


def read_config_file(path: str | Path) -> tuple[AppConfig | None, list[ConfigError]]:
    """The file's content and every problem in it; None when it cannot be read at all.

    A worker uses this to run the jobs that are fine and report the others.
    """
    return _read_config_file(Path(path), validate=True)


def check_file(path: str | Path) -> list[str]:
    """Every problem of a config file, one line each (``FILE: job 'x': field: problem``)."""
    _, errors = _read_config_file(Path(path), validate=True)
    return [f"{path}: {err}" for err in errors]


def _read_config_file(path: Path, *, validate: bool) -> tuple[AppConfig | None, list[ConfigError]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, [ConfigError("file", _one_line(f"cannot read: {exc}"))]
    try:
        data = load(text, FileLoader)
    except ConfigError as err:
        return None, [err]
    if data is None:
        data = {}
    if not isinstance(data, dict):
        problem = f"expected a mapping with 'registry' and 'jobs', got {_kind_name(data)}"
        return None, [ConfigError("file", problem)]
    top = ("registry", "jobs", "worker")
    errors = [_unknown_key(str(k), top, None) for k in data if k not in top]
    registry, registry_errors = _registry_from_file(data.get("registry"))
    # The worker block first: the jobs may name the strategies and listeners it registers.
    worker, worker_errors = _worker_from_file(data.get("worker"))
    worker_errors += _register_worker_names(worker)
    jobs, job_errors = _jobs_from_file(data.get("jobs"), validate=validate)
    errors += registry_errors + job_errors + worker_errors
    return AppConfig(registry=registry, jobs=jobs, worker=worker), errors


def _worker_from_file(raw: object) -> tuple[WorkerConfig, list[ConfigError]]:
    if raw is None:
        return WorkerConfig(), []
    if not isinstance(raw, dict):
        return WorkerConfig(), [ConfigError("worker", f"expected a mapping, got {_kind_name(raw)}")]
    values: dict[str, Any] = {}
    errors: list[ConfigError] = []
    for key, value in raw.items():
        name = _WORKER_KEYS.get(str(key))
        if name is None:
            errors.append(
                ConfigError(f"worker.{key}", f"unknown key; use {_choices(_WORKER_KEYS)}")
            )
        elif name in ("metrics_port", "dump_port") and not (
            isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 65536
        ):
            errors.append(ConfigError(f"worker.{key}", f"must be a port number; got {value!r}"))
        elif name == "grace_seconds" and not (isinstance(value, int | float) and value >= 0):
            errors.append(ConfigError(f"worker.{key}", f"must be seconds >= 0; got {value!r}"))
        elif name in ("tracing", "metrics_host") and not isinstance(value, str):
            errors.append(ConfigError(f"worker.{key}", f"must be text; got {value!r}"))
        elif name in ("secrets", *_WORKER_TABLES) and not (
            isinstance(value, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
        ):
            errors.append(ConfigError(f"worker.{key}", "must map names to text, e.g. A: b"))
        else:
            values[name] = value
    return WorkerConfig(**values), errors


def _register_worker_names(worker: WorkerConfig) -> list[ConfigError]:
    """Import the worker block's named code (a local file: trusted) and keep its secrets."""
    errors: list[ConfigError] = []
    secrecy.set_local_secrets(worker.secrets)
    for attr, kind in _WORKER_TABLES.items():
        key = next(k for k, v in _WORKER_KEYS.items() if v == attr)
        try:
            plugins.register_refs(kind, getattr(worker, attr), source=f"worker.{key}")
        except ConfigError as err:
            errors.append(err)
    return errors


def _registry_from_file(raw: object) -> tuple[RegistryConfig | None, list[ConfigError]]:
    if raw is None:
        return None, []
    if isinstance(raw, str):
        try:
            return parse_registry_url(raw), []
        except ConfigError as err:
            return None, [err]
    if not isinstance(raw, dict):
        return None, [
            ConfigError("registry", f"expected a mapping or a URL, got {_kind_name(raw)}")
        ]
    return _parse_registry(raw)


def _jobs_from_file(
    raw: object, *, validate: bool
) -> tuple[tuple[JobConfig, ...], list[ConfigError]]:
    if raw is None:
        return (), []
    if not isinstance(raw, dict):
        return (), [
            ConfigError(
                "jobs", f"expected a mapping of job names to settings, got {_kind_name(raw)}"
            )
        ]
    jobs: list[JobConfig] = []
    errors: list[ConfigError] = []
    for raw_name, settings in raw.items():
        name = str(raw_name)
        if not isinstance(settings, dict):
            errors.append(
                ConfigError("settings", f"expected a mapping, got {_kind_name(settings)}", job=name)
            )
            continue
        cfg, job_errors = _parse_job(settings, name, from_registry=False)
        errors += job_errors
        if cfg is None:
            continue
        jobs.append(cfg)
        if validate:
            # A field that failed to convert holds a stand-in; do not report it twice.
            failed = {err.field for err in job_errors}
            try:
                plugins.declare(cfg, with_callable=cfg.type in (JobType.SIMPLE, JobType.DATAFLOW))
            except ConfigError as err:
                failed.add(err.field)
                errors.append(err)
            errors += [err for err in cfg.validate_all() if err.field not in failed]
    return tuple(jobs), errors
