"""One job on one instance, as the parts of coordination see it.

:class:`~shardcron.coordination.runtime.JobRuntime` owns the job's state and implements
these protocols; each part (firing, healing, resharding, failover, misfires) is handed
the runtime typed as the protocol of what that part reads and calls, declared next to
the part, so no part depends on the runtime that composes them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from shardcron.config.job import JobConfig
from shardcron.coordination.events import Event
from shardcron.coordination.groupcommit import GroupCommit
from shardcron.coordination.host import Host
from shardcron.coordination.paths import JobPaths
from shardcron.registry import Registry, TreeCache


class JobState(Protocol):
    """What every part reads of its job, and the two calls every part makes."""

    config: JobConfig
    paths: JobPaths
    registry: Registry
    instance: str
    ip: str
    host: Host
    commits: GroupCommit  # shared by the process's jobs: one multi-op a tick
    stopped: bool  # no new fires, no new claims
    suspended: bool  # the registry connection is lost (for now)
    reshard_due: bool  # this instance must reshard before its next fire

    @property
    def name(self) -> str: ...

    @property
    def cache(self) -> TreeCache: ...

    def emit(self, event: Event) -> None:
        """Hand ``event`` to the scheduler's observers."""
        ...

    def guarded(self, fn: Callable[[], object], what: str) -> None:
        """Run a reaction; a registry failure is logged, and the heal tick retries."""
        ...

    def is_leader(self) -> bool: ...
