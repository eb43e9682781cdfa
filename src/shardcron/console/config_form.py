"""The job config edit form: which keys it shows, and what a submitted form changes.

The form shows the current value of every key an operator may change. On submit only the
keys whose text differs are sent to :meth:`shardcron.operations.admin.Admin.update_config`, which
converts and validates them and names the key of a bad value. So a key the operator did
not touch is never rewritten, and two operators editing different keys do not undo each
other's change. Properties are edited as ``NAME=VALUE`` lines; a line removed from the
text removes the property.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from shardcron.config.job import JobConfig
from shardcron.config.jobtypes import (
    DEFAULT_ERROR_HANDLER,
    DEFAULT_EXECUTOR_SERVICE_HANDLER,
    DEFAULT_SHARDING_STRATEGY,
    ERROR_HANDLERS,
    EXECUTOR_SERVICE_HANDLERS,
    SHARDING_STRATEGIES,
)
from shardcron.config.secrecy import redact_props
from shardcron.errors import ConfigError

PROPS = "props"


class Kind(StrEnum):
    TEXT = "text"
    NUMBER = "number"
    FLAG = "flag"  # a checkbox: absent from a submitted form means false
    LIST = "list"  # comma-separated
    CHOICE = "choice"  # a select of the built-in names; empty means Java's default


@dataclass(frozen=True, slots=True)
class Field:
    key: str  # camelCase, as in a config file and update_config
    attr: str  # the JobConfig attribute
    label: str
    kind: Kind = Kind.TEXT
    hint: str = ""
    choices: tuple[str, ...] = ()  # for CHOICE; a stored custom value is offered too
    default: str = ""  # what an empty CHOICE means


FIELDS: tuple[Field, ...] = (
    Field("cron", "cron", "Cron", hint="Quartz syntax, e.g. 0/5 * * * * ?; empty: run on trigger"),
    Field("timeZone", "time_zone", "Time zone", hint="e.g. Europe/Paris; empty: the worker's"),
    Field("shardingTotalCount", "sharding_total_count", "Items", Kind.NUMBER),
    Field(
        "shardingItemParameters",
        "sharding_item_parameters",
        "Item parameters",
        hint="e.g. 0=Beijing,1=Shanghai",
    ),
    Field("jobParameter", "job_parameter", "Job parameter"),
    Field("description", "description", "Description"),
    Field("failover", "failover", "Failover", Kind.FLAG, "needs monitor execution"),
    Field("misfire", "misfire", "Misfire", Kind.FLAG, "run missed fires as soon as possible"),
    Field("monitorExecution", "monitor_execution", "Monitor execution", Kind.FLAG),
    Field("staticSharding", "static_sharding", "Static sharding", Kind.FLAG),
    Field("disabled", "disabled", "Disabled at start-up", Kind.FLAG),
    Field(
        "maxTimeDiffSeconds",
        "max_time_diff_seconds",
        "Max clock difference (s)",
        Kind.NUMBER,
        "-1: no check",
    ),
    Field(
        "reconcileIntervalMinutes",
        "reconcile_interval_minutes",
        "Reconcile interval (min)",
        Kind.NUMBER,
        "0: off",
    ),
    Field(
        "jobShardingStrategyType",
        "job_sharding_strategy_type",
        "Sharding strategy",
        Kind.CHOICE,
        choices=SHARDING_STRATEGIES,
        default=DEFAULT_SHARDING_STRATEGY,
    ),
    Field(
        "jobExecutorServiceHandlerType",
        "job_executor_service_handler_type",
        "Executor",
        Kind.CHOICE,
        choices=EXECUTOR_SERVICE_HANDLERS,
        default=DEFAULT_EXECUTOR_SERVICE_HANDLER,
    ),
    Field(
        "jobErrorHandlerType",
        "job_error_handler_type",
        "Error handler",
        Kind.CHOICE,
        choices=ERROR_HANDLERS,
        default=DEFAULT_ERROR_HANDLER,
    ),
    Field("jobListenerTypes", "job_listener_types", "Listeners", Kind.LIST),
    Field("label", "label", "Label", hint="only instances with this label run the job"),
)


def current_values(config: JobConfig) -> dict[str, str]:
    """The form's text for every field (and ``props``), from a config."""
    values = {f.key: _shown(getattr(config, f.attr)) for f in FIELDS}
    # Secrets show as *** (a guest sees this form too); *** sent back means "unchanged".
    shown = redact_props(config.props)
    values[PROPS] = "\n".join(f"{name}={value}" for name, value in shown.items())
    return values


def submitted_values(form: Mapping[str, str]) -> dict[str, str]:
    """What a submitted form says for every field; an unchecked box reads as false."""
    values = {}
    for f in FIELDS:
        if f.kind is Kind.FLAG:
            values[f.key] = "true" if form.get(f.key) else "false"
        else:
            values[f.key] = form.get(f.key, "").strip()
    values[PROPS] = form.get(PROPS, "")
    return values


def changed_settings(config: JobConfig, values: Mapping[str, str]) -> dict[str, str]:
    """The ``update_config`` settings that turn ``config`` into what the form says.

    Raises ConfigError for a property line that is not ``NAME=VALUE``.
    """
    before = current_values(config)
    settings = {
        f.key: values[f.key] for f in FIELDS if f.key in values and values[f.key] != before[f.key]
    }
    if PROPS in values:
        old = dict(config.props)
        shown = redact_props(old)
        new = _props(values[PROPS])
        for name in old.keys() - new.keys():
            settings[f"props.{name}"] = ""
        for name, value in new.items():
            if value not in (old.get(name), shown.get(name)):
                settings[f"props.{name}"] = value
    return settings


def field_of(error: ConfigError) -> str:
    """The form field an error from update_config is about (``props`` for any property)."""
    return PROPS if error.field.startswith("props") else error.field


def _props(text: str) -> dict[str, str]:
    props = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            raise ConfigError(PROPS, f"line {number} ({line.strip()!r}) is not NAME=VALUE")
        props[name.strip()] = value.strip()
    return props


def _shown(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ", ".join(str(v) for v in value)
    return str(value)
