"""shardcron: distributed, sharded, fault-tolerant scheduled jobs on ZooKeeper.

The names most programs need are importable from here. The subpackages are the layers,
each importing only those below it: :mod:`~shardcron.schedule`, :mod:`~shardcron.config`,
:mod:`~shardcron.registry`, :mod:`~shardcron.coordination`, :mod:`~shardcron.execution`,
:mod:`~shardcron.tracing`, :mod:`~shardcron.observability`, :mod:`~shardcron.scheduler`,
then :mod:`~shardcron.operations`, :mod:`~shardcron.testing`, :mod:`~shardcron.console`,
:mod:`~shardcron.integrations`, :mod:`~shardcron.simulation` and :mod:`~shardcron.cli`.
"""

from __future__ import annotations

from shardcron import _moved
from shardcron._version import __version__
from shardcron.config.job import JobConfig
from shardcron.config.jobtypes import JobType
from shardcron.config.registry import RegistryConfig
from shardcron.errors import ConfigError, RegistryError, ShardcronError
from shardcron.execution.listeners import DistributeOnceListener, JobListener
from shardcron.model import ExecutionSource, FireContext, ShardingContext
from shardcron.scheduler.process import Scheduler

_moved.install()

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
