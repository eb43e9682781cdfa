"""Failover: items whose holder died mid-run are run again, at once, by live instances.

Protocol (ElasticJob 3.x nodes, plus the ``leases/{id}`` of :mod:`shardcron.coordination.claims`):

* A ``running`` node whose holder has neither a lease nor an instance node belongs to a
  dead session. The leader's sweep (:mod:`shardcron.coordination.healing`) finds such items and, in
  one transaction per item, deletes the stale nodes and queues
  ``leader/failover/items/{i}``. An operator removing an instance node does not make its
  claims stale: its lease lives on with the session, so a live run is never failed over.
* Every available instance sees the queue in its cache and claims items with one
  transaction per item: delete the queue entry, create ``failover`` (ephemeral),
  ``failovering`` and the usual claim nodes. The registry lets exactly one claimant win.
  Items are spread deterministically over the available instances (:func:`to_claim`); an
  idle instance also takes the others' share at once, a busy one only after a short
  grace, and then runs them beside its own items.
* Completion deletes the claim and ``failover``/``failovering`` together, conditional on
  the claim (see :class:`shardcron.coordination.claims.Completing`).

Unlike ElasticJob, claiming does not wait for the claimant's own run to end, and every
queued item is taken, not one per idle instance per fire.
"""

from __future__ import annotations

import logging
from typing import Protocol

from shardcron.coordination import claims, groupcommit, membership, sharding
from shardcron.coordination.events import FailoverClaimed
from shardcron.coordination.inflight import Fire
from shardcron.coordination.job import JobState
from shardcron.coordination.paths import JobPaths
from shardcron.coordination.strategies import order_instances
from shardcron.errors import RegistryError, TransactionError
from shardcron.model import ExecutionSource
from shardcron.registry import Create, Delete, Op, TreeCache

log = logging.getLogger(__name__)

# How long a busy instance leaves queued failover items to idle ones before it takes them.
GRACE_SECONDS = 0.1


def queued(cache: TreeCache, paths: JobPaths) -> list[int]:
    return sorted(int(n) for n in cache.children(paths.failover_items) if n.isdigit())


def items_failed_over_elsewhere(cache: TreeCache, paths: JobPaths, items: list[int]) -> set[int]:
    return {i for i in items if cache.exists(paths.failover(i))}


def share(items: list[int], available: list[str], instance: str) -> list[int]:
    """This instance's part of ``items`` when spread evenly over ``available``."""
    ordered = order_instances(available)
    if instance not in ordered:
        return []
    slot = ordered.index(instance)
    return [item for n, item in enumerate(items) if n % len(ordered) == slot]


def to_claim(
    queue: list[int],
    available: list[str],
    me: str,
    *,
    idle: bool,
    anyone_else_idle: bool,
    phase: int,
) -> list[int]:
    """Which queued items this instance claims in this pass (phase 0, 1 after a grace, 2).

    Phase 0: its own share, unless it is busy and an idle instance could take it sooner.
    Phase 1: everything if idle, else its share. Phase 2: everything left.
    """
    mine = share(queue, available, me)
    if phase == 0:
        return mine if idle or not anyone_else_idle else []
    if phase == 1:
        return queue if idle else mine
    return queue


def claim_ops(paths: JobPaths, item: int, instance: str) -> list[Op]:
    """Ops that, with the claim of the item, take it over from the queue."""
    return [
        Delete(paths.failover_item(item)),
        Create(paths.failover(item), instance.encode(), ephemeral=True),
        Create(paths.failovering(item), instance.encode()),
    ]


def complete_ops(paths: JobPaths, item: int) -> list[Op]:
    return [Delete(paths.failover(item)), Delete(paths.failovering(item))]


def queue_ops(cache: TreeCache, paths: JobPaths, item: int) -> list[Op]:
    """Ops that queue a stale item for failover, after its failover marks (the stale
    nodes go first, so a claimant that sees the queue entry sees them gone)."""
    ops = stale_ops(cache, paths, item)
    if not cache.exists(paths.failover_item(item)):
        ops.append(Create(paths.failover_item(item)))
    return ops


def stale_ops(cache: TreeCache, paths: JobPaths, item: int) -> list[Op]:
    """Deletions of the failover marks the cache shows for ``item``. Its ``running`` is the
    caller's to delete, on the condition of the claim it read."""
    return [
        Delete(path)
        for path in (paths.failovering(item), paths.failover(item))
        if cache.exists(path)
    ]


class ClaimsFiring(Protocol):
    """What :class:`Claims` asks of its job's fire side
    (:class:`~shardcron.coordination.firing.Firing`)."""

    @property
    def reserving(self) -> bool:
        """Some item is claimed, or being claimed, here."""
        ...

    def reserved(self, item: int) -> bool: ...

    def hold(self, fire: Fire) -> None:
        """Reserve ``fire``'s items while its claim is on its way."""
        ...

    def drop(self, fire: Fire) -> None:
        """Let go of ``fire``: its claim did not go through."""
        ...

    def claim_unsure(self, fire: Fire) -> None:
        """``fire``'s claim lost its answer: settle it after the reconnect."""
        ...

    def dispatch(self, fire: Fire, at: float | None = None) -> None:
        """Run ``fire``'s claimed items (at ``at``, or at once)."""
        ...


class Claims:
    """The claiming of one job's queued items by this instance, on the coordinator thread;
    a claimed item runs as a fire of its own (see :class:`shardcron.coordination.firing.Firing`)."""

    def __init__(self, rt: JobState, firing: ClaimsFiring) -> None:
        self.rt, self.firing = rt, firing
        # When the cache first showed each queued item: about when the repair that queued
        # it recorded the fires before it (see _claim).
        self._seen: dict[int, float] = {}

    def claim(self, phase: int) -> None:
        """Claim queued items: own share first, then, after a grace, the rest."""
        cache, paths, cfg = self.rt.cache, self.rt.paths, self.rt.config
        if not cfg.failover:
            self._seen = {}
            return
        now = self.rt.host.now()  # every heal asks: an item queued again is seen anew
        self._seen = {i: self._seen.get(i, now) for i in queued(cache, paths)}
        if self.rt.stopped or self.rt.suspended:
            return
        if not membership.server_enabled(cache, paths, self.rt.ip):
            return
        queue = [i for i in queued(cache, paths) if i < cfg.sharding_total_count]
        if not queue:
            return
        available = membership.available_instances(cache, paths)
        todo = to_claim(
            queue,
            available,
            self.rt.instance,
            idle=not self.firing.reserving,
            anyone_else_idle=self._anyone_idle(available),
            phase=phase,
        )
        for item in todo:
            if item in queued(cache, paths) and not self.firing.reserved(item):
                self._claim(item)
        if phase < 2 and queued(cache, paths):
            self.rt.host.call_later(
                GRACE_SECONDS,
                lambda: self.rt.guarded(lambda: self.claim(phase + 1), "failover"),
            )

    def _anyone_idle(self, instances: list[str]) -> bool:
        """Whether some instance runs none of its items (as far as the cache shows)."""
        cache, paths, total = self.rt.cache, self.rt.paths, self.rt.config.sharding_total_count
        busy = {
            sharding.owner(cache, paths, i) for i in range(total) if cache.exists(paths.running(i))
        }
        return any(instance not in busy for instance in instances if instance != self.rt.instance)

    def _claim(self, item: int) -> None:
        paths, instance = self.rt.paths, self.rt.instance
        # The repair that queued it recorded the fires up to its stamp (see healing): the
        # fires since are the next owner's to account for (nobody ran them meanwhile), so
        # the claim keeps that stamp. One from this clock would move it: back if the clock
        # is behind (stepped back, say), and the next owner would record fires that ran as
        # fires nobody ran; on if the cache showed the queue late (lagging), and fires
        # due meanwhile would go unrecorded. The cache holds no stamps; only an item node
        # without one falls back to when the queue entry was first seen.
        stamp = claims.stamped(self.rt.registry.get(paths.item(item)))
        queued_at = self._seen.get(item, self.rt.host.now()) - claims.UNRUN_SECONDS
        since = queued_at if stamp is None else stamp
        claim = claims.Claim(items=[item])
        fire = Fire([item], claim, ExecutionSource.FAILOVER, self.rt.registry.session_id)
        self.firing.hold(fire)
        # On its own, at once: contended by every idle instance, it would cost a batch a retry.
        request = claims.Claiming(
            self.rt.cache,
            paths,
            [item],
            instance,
            when=claims.stamp(since),
            extra=claim_ops(paths, item, instance),
            trust_cache=False,
        )
        try:
            groupcommit.run_now(self.rt.registry, request)
            fire.claim = request.result
        except TransactionError:
            self.firing.drop(fire)
            return  # another instance took it first
        except RegistryError:
            self.firing.claim_unsure(fire)
            raise
        if not fire.claim.items:
            self.firing.drop(fire)
            return  # running again already: the sweep settles the queue entry
        self.rt.commits.claimed()
        log.warning("job %s: took over item %d from a lost instance", self.rt.name, item)
        self.rt.emit(FailoverClaimed(job_name=self.rt.name, instance=self.rt.instance, item=item))
        self.firing.dispatch(fire)
