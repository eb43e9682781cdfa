"""Starting many jobs of a process together: one pipelined cache load, one transaction.

Alone, a job's start is a chain of round trips: its tree cache arms a watch and reads its
subtree level by level, then one transaction writes config, server, instance and, for a
new job, the election (:meth:`shardcron.runtime.JobRuntime.start`). A worker with
thousands of jobs does that for a group of jobs at once:

1. the caches of the group load together (:meth:`shardcron.registry.Registry.tree_caches`:
   the watches and each level's reads of every job in one request each);
2. each job plans its registration from its cache, and the plans go out in transactions
   of up to :data:`MAX_TRANSACTION_BYTES`;
3. a transaction the registry refuses (another worker registered some of these jobs since
   their caches loaded) or whose outcome is unknown (a lost connection) is not retried
   as a whole: each of its jobs registers alone, the way a single job does, which copes
   with both. Nothing here decides anything the single-job path would not.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from shardcron.errors import RegistryError, ShardcronError
from shardcron.registry import Op, Registry
from shardcron.sharding import op_bytes

if TYPE_CHECKING:
    from shardcron.runtime import JobRuntime

log = logging.getLogger(__name__)

# Jobs per group: a group's cache loads and transactions stay far below ZooKeeper's
# request size limit, and a group's jobs start running as soon as it is registered.
GROUP_SIZE = 250
MAX_TRANSACTION_BYTES = 512 * 1024

Failed = Callable[["JobRuntime", ShardcronError], None]


def start_together(registry: Registry, runtimes: Sequence[JobRuntime], failed: Failed) -> None:
    """Start ``runtimes`` (not started yet) as described above; ``failed`` hears of each
    job that could not start (the others run)."""
    try:
        caches = registry.tree_caches([runtime.cache_spec() for runtime in runtimes])
    except RegistryError as exc:
        log.debug("loading %d caches together failed (%s); one job at a time", len(runtimes), exc)
        _alone(runtimes, failed)
        return
    loaded: list[JobRuntime] = []
    for runtime, cache in zip(runtimes, caches, strict=True):
        try:
            runtime.load(cache)
            loaded.append(runtime)
        except ShardcronError as exc:
            cache.close()
            failed(runtime, exc)
    session = registry.session_id
    plans = [(runtime, *runtime.first_registration()) for runtime in loaded]
    prefix = len(registry.namespace.encode()) + 1
    while plans:
        count = _fitting(plans, prefix)
        group, plans = plans[:count], plans[count:]
        try:
            registry.transaction([op for _, ops, _ in group for op in ops])
        except RegistryError as exc:
            log.debug("registering %d jobs together failed (%s); one at a time", len(group), exc)
            _alone([runtime for runtime, _, _ in group], failed, loaded=True)
            continue
        for runtime, _, elect in group:
            runtime.registered(session, elect)
            runtime.begin()


def _fitting(plans: Sequence[tuple[JobRuntime, list[Op], bool]], prefix: int) -> int:
    """How many of ``plans`` (at least one) fit in one transaction."""
    size = 0
    for count, (_, ops, _) in enumerate(plans):
        size += sum(op_bytes(op, prefix) for op in ops)
        if size > MAX_TRANSACTION_BYTES:
            return max(count, 1)
    return len(plans)


def _alone(runtimes: Sequence[JobRuntime], failed: Failed, *, loaded: bool = False) -> None:
    for runtime in runtimes:
        try:
            if loaded:
                runtime.register_alone()
            else:
                runtime.start()
        except ShardcronError as exc:
            failed(runtime, exc)
