"""The semantic checks of a JobConfig: what must hold before a job can run.

Each check yields ``(field, problem)`` pairs and never imports code (callables are imported
where a job is declared); ``JobConfig.validate_all`` turns them into ConfigErrors.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from shardcron import plugins, secrecy
from shardcron.conversion import _choices, parse_sharding_item_parameters
from shardcron.errors import ConfigError
from shardcron.jobtypes import (
    CALLABLE_PROP,
    ERROR_HANDLERS,
    EXECUTOR_KEY,
    EXECUTOR_SERVICE_HANDLERS,
    HTTP_METHODS,
    SHARDING_STRATEGIES,
    TYPE_PROP,
    JobType,
)
from shardcron.plugins import Kind

if TYPE_CHECKING:
    from shardcron.jobconfig import JobConfig


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
