"""The user's config file (its ``registry``, ``jobs`` and ``worker`` blocks): loading and
checking it, and the worker process's own settings (WorkerConfig).

``shardcron.config`` stays the documented import path of every config name: the ones defined in
:mod:`shardcron.config.job` (JobConfig), :mod:`shardcron.config.jobtypes` (JobType and the built-in
names), :mod:`shardcron.config.registry` (RegistryConfig), :mod:`shardcron.config.drift` and
:mod:`shardcron.config.instancerecord` are re-exported here under the names they always had.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shardcron.config import plugins, secrecy
from shardcron.config.conversion import (
    _choices,
    _kind_name,
    _unknown_key,
)
from shardcron.config.job import JobConfig, _parse_job, declare
from shardcron.config.jobtypes import (
    JobType,
)
from shardcron.config.plugins import Kind
from shardcron.config.registry import (
    RegistryConfig,
    _parse_registry,
    parse_registry_url,
)
from shardcron.config.snakeyaml import FileLoader, load
from shardcron.errors import ConfigError

__all__ = ["AppConfig", "WorkerConfig", "check_file", "load_config_file", "read_config_file"]


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerConfig:
    """Settings of the worker process itself (the ``worker`` block); never stored in the
    registry, so database credentials stay on the host that uses them."""

    tracing: str | None = None  # SQLAlchemy URL of the execution trace database
    metrics_port: int | None = None  # Prometheus endpoint, on 127.0.0.1 unless metrics_host says
    metrics_host: str = "127.0.0.1"
    dump_port: int | None = None  # the dump@{job} TCP service, on 127.0.0.1
    grace_seconds: float = 30.0
    # name -> module:qualname, imported from this file only (see shardcron.config.plugins)
    strategies: Mapping[str, str] = field(default_factory=dict)
    listener_types: Mapping[str, str] = field(default_factory=dict)
    error_handlers: Mapping[str, str] = field(default_factory=dict)
    # NAME -> value for ${NAME} references in props (see shardcron.config.secrecy)
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
                declare(cfg, with_callable=cfg.type in (JobType.SIMPLE, JobType.DATAFLOW))
            except ConfigError as err:
                failed.add(err.field)
                errors.append(err)
            errors += [err for err in cfg.validate_all() if err.field not in failed]
    return tuple(jobs), errors


def _one_line(text: str) -> str:
    return " ".join(text.split())
