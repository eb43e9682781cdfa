"""What a user writes: job settings, the config file, registry URLs, and their wire forms.

Owns :class:`~shardcron.config.job.JobConfig` with its checks and its two YAML forms
(the registry's ``/{job}/config`` as ElasticJob's SnakeYAML writes it, and a job's block
of the config file), the config file itself (:mod:`.file`), how to reach the registry
(:mod:`.registry`), the names a worker registers (:mod:`.plugins`), secret references
(:mod:`.secrecy`), and what ``shardcron check`` explains (:mod:`.explain`).

May import: :mod:`shardcron.errors`, :mod:`shardcron.model`, :mod:`shardcron.schedule`.
"""

from __future__ import annotations

from shardcron.config.conversion import parse_sharding_item_parameters
from shardcron.config.drift import apply_settings, drift, drift_notice
from shardcron.config.file import (
    AppConfig,
    WorkerConfig,
    check_file,
    load_config_file,
    read_config_file,
)
from shardcron.config.instancerecord import InstanceRecord, instance_yaml, parse_instance_yaml
from shardcron.config.job import JobConfig, resolve_callable
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
from shardcron.config.registry import (
    DEFAULT_MEMORY_NAMESPACE,
    MEMORY_SERVERS,
    RegistryConfig,
    parse_registry_url,
)

__all__ = [
    "CALLABLE_PROP",
    "DEFAULT_ERROR_HANDLER",
    "DEFAULT_EXECUTOR_SERVICE_HANDLER",
    "DEFAULT_MEMORY_NAMESPACE",
    "DEFAULT_SHARDING_STRATEGY",
    "ERROR_HANDLERS",
    "EXECUTOR_KEY",
    "EXECUTOR_KEY_305",
    "EXECUTOR_SERVICE_HANDLERS",
    "HTTP_METHODS",
    "MEMORY_SERVERS",
    "PROP_PREFIX",
    "SHARDING_STRATEGIES",
    "TYPE_PROP",
    "AppConfig",
    "InstanceRecord",
    "JobConfig",
    "JobType",
    "RegistryConfig",
    "WorkerConfig",
    "apply_settings",
    "check_file",
    "drift",
    "drift_notice",
    "instance_yaml",
    "load_config_file",
    "parse_instance_yaml",
    "parse_registry_url",
    "parse_sharding_item_parameters",
    "read_config_file",
    "resolve_callable",
]
