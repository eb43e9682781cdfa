"""Stopping jobs: what a stopping instance removes and records in the registry, for one
job or for every job of a worker at once.

A job that stops here, once no item of it runs here any more, removes its
``instances/{id}`` node (unless an operator's shutdown did), its lease, and the
leadership and ``processing`` node if this session holds them, and adds its id to the
job's ``stopped`` list (:mod:`shardcron.coordination.stopmark`). For many jobs at once:

1. every node that decides an op is read in one pass
   (:meth:`shardcron.registry.Registry.get_with_stats`: on ZooKeeper a multiRead per
   2,000 nodes, all sent together): whether the node is there, which session owns it,
   the ``stopped`` list and its version;
2. each job plans its ops from what was read, and the plans go out in transactions of up
   to :data:`shardcron.registry.MAX_TRANSACTION_BYTES` (a job's ops are never split);
3. a transaction the registry refuses applied nothing: something changed since the read
   (most often another instance stopping the same jobs rewrote a ``stopped`` list). Its
   jobs are read and planned again after a moment's jitter, the one whose op was refused
   in a transaction of its own, until no job has left for :data:`DEADLINE_SECONDS`. A
   transaction whose outcome is unknown (a lost connection) is not retried: what did not
   go through goes with the session anyway, except the stop mark, and those jobs show
   CRASHED, as after a crash.

One request at a time, as it was before, a stop cost up to nine round trips per job: a
worker of 5,000 jobs took 35 s to stop on ZooKeeper, and one of 10,000 longer than the
grace an orchestrator gives a process.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from shardcron.coordination import stopmark
from shardcron.coordination.paths import JobPaths
from shardcron.errors import RegistryError, TransactionError
from shardcron.model import some
from shardcron.registry import (
    Delete,
    Node,
    Op,
    Registry,
    TreeCache,
    fitting,
    group_of,
    prefix_bytes,
)

if TYPE_CHECKING:
    from shardcron.coordination.host import Host

log = logging.getLogger(__name__)


class Departing(Protocol):
    """A job this module stops (:class:`~shardcron.coordination.runtime.JobRuntime`)."""

    def stop_firing(self, operator: bool = False) -> bool:
        """No new fires; True if no item of it runs here (it may deregister now)."""
        ...

    def leave(self) -> Leaving | None:
        """What to remove, or None if its deregistration has begun already."""
        ...

    def left(self) -> None:
        """Deregistration is over (done, or given up on)."""
        ...


# Concurrent stops rewrite a list at the version read, one winner per round: a fleet of
# 50 instances stopping together takes up to 50 rounds, so retrying is bounded by time
# without progress, with a little jitter to spread the rounds, not by a count of rounds.
DEADLINE_SECONDS = 5.0
JITTER_SECONDS = 0.005
# Its own generator: the module's shared one is seeded and checked by test frameworks
# (Hypothesis warns when a background thread draws from it mid-test).
_jitter = random.Random()


@dataclass(frozen=True)
class Leaving:
    """One job's registration to remove (:meth:`JobRuntime.leave`)."""

    paths: JobPaths
    instance: str
    cache: TreeCache | None  # None: it never loaded, and leaves no stop mark
    operator: bool  # an operator's shutdown: its tool removed the instance node

    def reads(self) -> list[str]:
        paths = self.paths
        return [
            paths.instance(self.instance),
            paths.lease(self.instance),
            paths.election_instance,
            paths.sharding_processing,
            paths.config,
            paths.stopped,
        ]

    def plan(self, nodes: Sequence[Node | None], session: int) -> list[Op]:
        """The ops, from the nodes :meth:`reads` names, as read."""
        instance, lease, election, processing, config, stopped = nodes
        paths, ops = self.paths, list[Op]()
        if instance is not None and not self.operator:
            ops.append(Delete(paths.instance(self.instance)))
        if lease is not None:  # every completion is applied (nothing runs): no claim needs it
            ops.append(Delete(paths.lease(self.instance)))
        if election is not None and election[1].ephemeral_owner == session:
            ops.append(Delete(paths.election_instance))
        if processing is not None and processing[1].ephemeral_owner == session:
            ops.append(Delete(paths.sharding_processing))  # a resharding a fault cut short
        # A removed job has no config: writing would bring its node back.
        if config is not None and self.cache is not None:
            ops.append(stopmark.mark_op(paths, self.cache, self.instance, stopped))
        return ops


class Departures:
    """The jobs of one process that leave, deregistered together on the coordinator: at a
    worker's stop, every job with no item running; after it, the ones whose last items
    return, in batches (in a herd, thousands of them return a moment apart). Shared by
    the process's jobs, as their group commit is; coordinator thread only."""

    def __init__(self, registry: Registry, host: Host) -> None:
        self.registry = registry
        self.host = host
        self._waiting: list[Departing] = []

    def stop(self, runtimes: Sequence[Departing]) -> None:
        """A worker's stop: no job fires any more; the ones with no item running leave."""
        for runtime in runtimes:
            if runtime.stop_firing():
                self.add(runtime)

    def add(self, runtime: Departing) -> None:
        """``runtime`` (stopped, no item running) leaves with the others added before the
        coordinator's next turn."""
        self._waiting.append(runtime)
        if len(self._waiting) == 1:
            self.host.coordinate(self._flush)

    def _flush(self) -> None:
        waiting, self._waiting = self._waiting, []
        deregister(self.registry, waiting)


def deregister(registry: Registry, runtimes: Sequence[Departing]) -> None:
    """Remove the registration of ``runtimes`` (stopped, with no item running), then let
    them go; one that has left already is skipped."""
    leaving = [(runtime, left) for runtime in runtimes if (left := runtime.leave())]
    # Unreachable, each request would fail only after its retries: the session's end
    # removes this instance's nodes (the scheduler says so, once).
    if leaving and registry.connected:
        remove(registry, [left for _, left in leaving])
    for runtime, _ in leaving:
        runtime.left()


def remove(registry: Registry, leaving: Sequence[Leaving]) -> None:
    """Steps 1 to 3 of the module docstring; a failure is logged, never raised."""
    pending, alone, progress = list(leaving), set[Leaving](), time.monotonic()
    prefix = prefix_bytes(registry)
    while pending:
        pending.sort(key=lambda job: job not in alone)
        try:
            nodes = registry.get_with_stats([path for job in pending for path in job.reads()])
        except RegistryError as exc:
            _gave_up(pending, exc)
            return
        width, session = len(nodes) // len(pending), registry.session_id  # reads per job
        plans = [
            (job, ops)
            for k, job in enumerate(pending)
            if (ops := job.plan(nodes[k * width : (k + 1) * width], session))
        ]
        pending = []
        while plans:
            count = 1 if plans[0][0] in alone else fitting((ops for _, ops in plans), prefix)
            try:
                registry.transaction([op for _, ops in plans[:count] for op in ops])
            except TransactionError as exc:  # applied nothing: read again
                alone.add(plans[group_of((ops for _, ops in plans), exc.index)][0])
                pending += [job for job, _ in plans[:count]]
            except RegistryError as exc:
                _gave_up([job for job, _ in plans[:count]], exc)
            else:
                progress = time.monotonic()
            plans = plans[count:]
        if pending and time.monotonic() - progress > DEADLINE_SECONDS:
            log.warning(
                "could not record the clean stop of %s: the registry kept refusing it",
                some([job.paths.job for job in pending]),
            )
            return
        if pending:
            time.sleep(_jitter.uniform(0, JITTER_SECONDS))


def _gave_up(leaving: Sequence[Leaving], exc: RegistryError) -> None:
    names = [job.paths.job for job in leaving]
    log.warning("could not deregister %s cleanly: %s", some(names), exc)
