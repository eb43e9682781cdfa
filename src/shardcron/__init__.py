"""shardcron: distributed, sharded, fault-tolerant scheduled jobs on ZooKeeper."""

from __future__ import annotations

from shardcron._version import __version__
from shardcron.errors import ConfigError, RegistryError, ShardcronError
from shardcron.jobconfig import JobConfig
from shardcron.jobtypes import JobType
from shardcron.listeners import DistributeOnceListener, JobListener
from shardcron.model import ExecutionSource, FireContext, ShardingContext
from shardcron.registryconfig import RegistryConfig
from shardcron.scheduler import Scheduler

__all__ = [
    "ConfigError",
    "DistributeOnceListener",
    "ExecutionSource",
    "FireContext",
    "JobConfig",
    "JobListener",
    "JobType",
    "RegistryConfig",
    "RegistryError",
    "Scheduler",
    "ShardcronError",
    "ShardingContext",
    "__version__",
]
