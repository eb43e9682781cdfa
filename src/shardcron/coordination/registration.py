"""Starting jobs: the config a job runs (:func:`config_to_run`, the registry's or its own),
and many jobs of a process together: one pipelined cache load, one transaction.

Alone, a job's start is a chain of round trips: its tree cache arms a watch and reads its
subtree level by level, then one transaction writes config, server, instance and, for a
new job, the election (:meth:`shardcron.coordination.runtime.JobRuntime.start`). A worker with
thousands of jobs does that for a group of jobs at once:

1. the caches of the group load together (:meth:`shardcron.registry.Registry.tree_caches`:
   the watches and each level's reads of every job in one request each);
2. each job plans its registration from its cache, and the plans go out in transactions
   of up to :data:`shardcron.registry.MAX_TRANSACTION_BYTES`;
3. a transaction the registry refuses names the op it refused: that job (another worker
   registered it since its cache loaded) registers alone, the way a single job does,
   and the others are planned again and retried, a few times, then alone too. One whose
   outcome is unknown (a lost connection) is not retried as a whole: each of its jobs
   registers alone, which copes with a write that went through. Nothing here decides
   anything the single-job path would not.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from shardcron.config.drift import drift, drift_notice
from shardcron.config.job import JobConfig
from shardcron.coordination.paths import JobPaths
from shardcron.errors import JobConflictError, RegistryError, ShardcronError, TransactionError
from shardcron.registry import (
    CacheSpec,
    Create,
    Op,
    Registry,
    SetData,
    TreeCache,
    fitting,
    group_of,
    prefix_bytes,
)

log = logging.getLogger(__name__)

# Jobs per group: a group's cache loads and transactions stay far below ZooKeeper's
# request size limit, and a group's jobs start running as soon as it is registered.
GROUP_SIZE = 250
# Refused transactions of one group before its jobs register one by one.
RETRIES = 4


class Registering(Protocol):
    """A job this module starts (:class:`~shardcron.coordination.runtime.JobRuntime`)."""

    @property
    def name(self) -> str: ...

    @property
    def cache(self) -> TreeCache: ...

    def cache_spec(self) -> CacheSpec:
        """The arguments of the job's tree cache."""
        ...

    def load(self, cache: TreeCache) -> None:
        """Take ``cache`` (loaded)."""
        ...

    def start(self) -> None:
        """Load, register and run, alone."""
        ...

    def register_alone(self) -> None:
        """After :meth:`load`: the first registration in its own transaction; run."""
        ...

    def first_registration(self) -> tuple[list[Op], bool]:
        """The ops of the first registration, and whether they elect this instance."""
        ...

    def registered(self, session: int, elect: bool) -> None:
        """The registration sent in ``session`` went through."""
        ...

    def begin(self) -> None:
        """Registered: run."""
        ...


Failed = Callable[[Registering, ShardcronError], None]


def config_to_run(
    cache: TreeCache, paths: JobPaths, local: JobConfig
) -> tuple[list[Op], JobConfig]:
    """The config a starting job runs, and the ops of its registration that write it: the
    local one, written, for a new job or with ``overwrite``; else the registry's, adopted
    (a local one whose registry copy is invalid runs as it is, and is not written)."""
    # The cache was loaded a moment ago: reading from it saves two round trips per job.
    stored_ref = cache.get(paths.root)
    if stored_ref and stored_ref.decode() != local.node_value:
        raise JobConflictError(
            f"job {local.job_name!r}: the registry already holds a different job under this "
            f"name ({stored_ref.decode()!r}, not {local.node_value!r}); rename the job or "
            "remove it with 'shardcron remove'"
        )
    stored = cache.get(paths.config)
    yaml = local.to_yaml().encode()
    if stored == yaml and not local.overwrite:
        # The registry holds this very config (to_yaml round-trips exactly): adopting it
        # changes nothing, and skips the parse, the costliest step of a big start.
        return [], local
    if stored is None or local.overwrite:
        ops: list[Op] = []
        ref = local.node_value.encode()
        if stored_ref is None:
            ops.append(Create(paths.root, ref))
        elif stored_ref != ref:
            ops.append(SetData(paths.root, ref))
        if stored is None:
            ops.append(Create(paths.config, yaml))
        elif stored != yaml:  # rewriting the same bytes would only wake every instance
            ops.append(SetData(paths.config, yaml))
        return ops, local
    effective = JobConfig.from_yaml(stored.decode(), local.job_name).with_changes(
        type=local.type, callable=local.callable
    )
    problems = [p for p in effective.validate_all() if p.field != "callable"]
    if problems:
        log.error(
            "job %s: the registry's config is invalid (%s); running the local one",
            local.job_name,
            problems[0],
        )
        return [], local
    if differing := drift(effective, local):
        log.warning("%s", drift_notice(local.job_name, differing))
    return [], effective


def start_together(registry: Registry, runtimes: Sequence[Registering], failed: Failed) -> None:
    """Start ``runtimes`` (not started yet) as described above; ``failed`` hears of each
    job that could not start (the others run)."""
    try:
        caches = registry.tree_caches([runtime.cache_spec() for runtime in runtimes])
    except RegistryError as exc:
        log.debug("loading %d caches together failed (%s); one job at a time", len(runtimes), exc)
        _alone(runtimes, failed, loaded=False)
        return
    for runtime, cache in zip(runtimes, caches, strict=True):
        runtime.load(cache)
    prefix = prefix_bytes(registry)
    pending: Sequence[Registering] = runtimes
    while plans := _plans(pending, failed):
        count = fitting((ops for _, ops, _ in plans), prefix)
        _register(registry, plans[:count], failed)
        pending = [runtime for runtime, _, _ in plans[count:]]


Plan = tuple[Registering, list[Op], bool]


def _plans(runtimes: Sequence[Registering], failed: Failed) -> list[Plan]:
    plans = []
    for runtime in runtimes:
        try:
            plans.append((runtime, *runtime.first_registration()))
        except ShardcronError as exc:  # another job under this name, a bad stored config
            runtime.cache.close()
            failed(runtime, exc)
    return plans


def _register(registry: Registry, plans: list[Plan], failed: Failed) -> None:
    """One transaction for ``plans``. Refused at one job's op (another worker registered
    it since its cache loaded), that job registers alone and the rest, planned again from
    caches that have meanwhile seen the other worker's writes, retry together."""
    for _ in range(RETRIES):
        session = registry.session_id
        try:
            registry.transaction([op for _, ops, _ in plans for op in ops])
        except TransactionError as exc:
            culprit = plans[group_of((ops for _, ops, _ in plans), exc.index)][0]
            log.debug("registering %d jobs together raced at %s", len(plans), culprit.name)
            _alone([culprit], failed, loaded=True)
            plans = _plans([runtime for runtime, _, _ in plans if runtime is not culprit], failed)
            if not plans:
                return
            continue
        except RegistryError as exc:  # unknown outcome: each job finds out on its own
            log.debug("registering %d jobs together failed (%s)", len(plans), exc)
            break
        for runtime, _, elect in plans:
            runtime.registered(session, elect)
            runtime.begin()
        return
    _alone([runtime for runtime, _, _ in plans], failed, loaded=True)


def _alone(runtimes: Sequence[Registering], failed: Failed, *, loaded: bool) -> None:
    for runtime in runtimes:
        try:
            if loaded:
                runtime.register_alone()
            else:
                runtime.start()
        except ShardcronError as exc:
            failed(runtime, exc)
