"""Starting a worker from a config file: which registry it joins, and how that is said.

``shardcron run``, the web-framework integrations and the Django command all start workers
this way, so they agree on where the registry comes from: an explicit URL, else
``$SHARDCRON_REGISTRY``, else the file's ``registry`` block, else the embedded registry (which
only this process sees, so a second process would run every item again).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from shardcron.config.file import AppConfig, WorkerConfig, load_config_file
from shardcron.config.registry import RegistryConfig, parse_registry_url
from shardcron.errors import ConfigError
from shardcron.scheduler.process import Scheduler

log = logging.getLogger(__name__)

REGISTRY_ENV = "SHARDCRON_REGISTRY"
EMBEDDED = "embedded: this process only"


def choose_registry(
    given: str | None,
    from_file: RegistryConfig | None,
    environ: Mapping[str, str] = os.environ,
) -> RegistryConfig:
    """The registry a worker joins: ``given``, ``$SHARDCRON_REGISTRY``, the file's, embedded."""
    url = given or environ.get(REGISTRY_ENV)
    if url:
        return parse_registry_url(url)
    return from_file or parse_registry_url("memory://")


def describe_registry(config: RegistryConfig) -> str:
    """``zk://HOST:PORT/NAMESPACE`` without credentials, or ``embedded: this process only``."""
    if config.is_memory:
        return EMBEDDED
    return f"zk://{config.servers}/{config.namespace}"


def scheduler_from_file(
    path: str | Path,
    *,
    registry: str | None = None,
    instance_id: str | None = None,
    shared: bool = False,
) -> Scheduler:
    """A scheduler (not started) with every job of the config file at ``path``.

    Any problem in the file raises a one-line ConfigError: a web app should not come up with
    half its jobs. ``shared=True`` refuses the embedded registry, for callers that run in
    several processes (gunicorn workers), where each would run every item.
    """
    app: AppConfig = load_config_file(path)
    target = choose_registry(registry, app.registry)
    if shared and target.is_memory:
        raise ConfigError(
            "registry",
            "the embedded registry is private to one process, so every worker would run every "
            f"item; pass zk://HOST:PORT/NAMESPACE or set {REGISTRY_ENV}",
        )
    scheduler = build_scheduler(target, app.worker, instance_id)
    for job in app.jobs:
        scheduler.add_job(job)
    names = ", ".join(job.job_name for job in app.jobs) or "no job"
    log.info("%s: %s on %s", path, names, describe_registry(target))
    return scheduler


def build_scheduler(
    target: RegistryConfig, worker: WorkerConfig, instance_id: str | None = None
) -> Scheduler:
    """A scheduler on ``target`` with the process settings of a file's ``worker`` block."""
    return Scheduler(
        target,
        instance_id=instance_id,
        tracing=worker.tracing,
        metrics_port=worker.metrics_port,
        metrics_host=worker.metrics_host,
        dump_port=worker.dump_port,
    )
