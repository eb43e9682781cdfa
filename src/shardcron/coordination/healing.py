"""The sweep: what in a job's registry state needs repair, read from the local cache.

Coordination is level-triggered: instead of trusting that the right event was seen at
the right moment, :func:`sweep` compares what the cache shows with what should hold and
lists the differences. The runtime repairs them, and runs the sweep on election, after
every reconnect, on membership changes and every few seconds; a sweep that finds nothing
costs no request. What it looks for:

* ``running`` whose holder is gone: the cache does not hold ``running``'s value (the
  holder), so claims are checked only when one may have gone stale: on this instance's
  start or new session (its own claims left by an earlier session or process with the
  same id), and, as leader, on election and whenever a holder may have died (an
  instance left both the instance nodes and the leases since the last check). The
  runtime reads the holder and, if it has neither lease nor instance node (or is this
  instance, not running the item here), queues the item for failover or, with failover
  off, removes the claim and flags the item misfired.
* ``failover``/``failovering`` without ``running``: left-overs that would make everybody
  skip the item; deleted.
* failover queue entries for items that no longer exist, or with failover off: deleted.
* item nodes beyond ``shardingTotalCount`` with no run in flight: deleted (a run still in
  flight keeps its nodes until it completes).
* items assigned to instances that are gone: resharding is flagged.
* a ``processing`` node: the runtime deletes it if its own session left it behind.

:class:`Healer` runs the sweep for one job on one instance and makes the repairs, on the
coordinator thread: every ``HEAL_SECONDS`` (longer in a worker of over 2,000 jobs, see
:func:`heal_seconds`), soon after an event that calls for it, and whenever the runtime
asks (a start, a new session, a membership or config change).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from shardcron.coordination import claims, failover, inherited, membership, sharding
from shardcron.coordination.job import JobState
from shardcron.coordination.localitems import LocalItems
from shardcron.coordination.misfires import Misfires
from shardcron.coordination.paths import JobPaths
from shardcron.errors import NodeExistsError, RegistryError, TransactionError
from shardcron.registry import Check, Create, Delete, Op, SetData, TreeCache

if TYPE_CHECKING:
    from shardcron.schedule.trigger import CronTrigger

log = logging.getLogger(__name__)

HEAL_SECONDS = 2.0
HEAL_SOON_SECONDS = 0.05
# A worker of many jobs heals each less often than every HEAL_SECONDS, so that it heals
# no more jobs a second than this: at every 2 s, the quiet heals of 10,000 jobs took an
# eighth of a core and doubled the lateness of a herd of all of them.
MAX_HEALS_PER_SECOND = 1000


def heal_seconds(jobs: int) -> float:
    """How often each job of a worker of ``jobs`` jobs heals."""
    return max(HEAL_SECONDS, jobs / MAX_HEALS_PER_SECOND)


@dataclass(slots=True)
class Findings:
    suspect_claims: list[int] = field(default_factory=list)
    failover_leftovers: list[int] = field(default_factory=list)
    dead_queue_entries: list[int] = field(default_factory=list)
    items_beyond_count: list[int] = field(default_factory=list)
    owners_gone: list[str] = field(default_factory=list)
    processing: bool = False

    def __bool__(self) -> bool:
        return bool(
            self.suspect_claims
            or self.failover_leftovers
            or self.dead_queue_entries
            or self.items_beyond_count
            or self.owners_gone
            or self.processing
        )


def sweep(
    cache: TreeCache,
    paths: JobPaths,
    total: int,
    live: set[str],
    failover_on: bool,
    check_claims: bool = False,
) -> Findings:
    found = Findings(processing=sharding.is_processing(cache, paths))
    owners: set[str | None] = set()
    for name in cache.children(paths.sharding):
        if not name.isdigit():
            continue
        item = int(name)
        if item < total:
            owners.add(sharding.owner(cache, paths, item))
        running = cache.exists(paths.running(item))
        if running and check_claims:
            found.suspect_claims.append(item)
        if not running and (
            cache.exists(paths.failover(item)) or cache.exists(paths.failovering(item))
        ):
            found.failover_leftovers.append(item)
        if item >= total and not running:
            found.items_beyond_count.append(item)
    found.dead_queue_entries = [
        i for i in failover.queued(cache, paths) if i >= total or not failover_on
    ]
    found.owners_gone = sorted(o for o in owners if o is not None and o not in live)
    return found


class HealedFiring(Protocol):
    """What the sweep asks of its job's fire side
    (:class:`~shardcron.coordination.firing.Firing`)."""

    @property
    def busy(self) -> bool:
        """Some fire of the job is in flight here."""
        ...

    @property
    def items(self) -> LocalItems: ...

    @property
    def misfires(self) -> Misfires: ...

    @property
    def failovers(self) -> failover.Claims: ...

    def reserved(self, item: int) -> bool: ...

    def resolve(self) -> None:
        """Settle the requests whose answers were lost."""
        ...

    def run_pending(self) -> None: ...


class HealedJob(JobState, Protocol):
    """What :class:`Healer` needs of its job: the sweep may re-register, elect, reshard or
    stop it."""

    registered_session: int  # the session its registration was last sent in

    @property
    def trigger(self) -> CronTrigger | None: ...

    @property
    def firing(self) -> HealedFiring: ...

    @property
    def resharder(self) -> sharding.Resharder: ...

    @property
    def heal_every(self) -> Callable[[], float]:
        """Seconds between two heal ticks."""
        ...

    def register(self, first: bool, config_ops: list[Op] | None = None) -> None: ...

    def begin_stop(self, operator: bool = False) -> None: ...

    def elect(self) -> None: ...

    def flag_resharding(self, force: bool = False) -> None: ...


class Healer:
    """The sweep and its repairs, for one job on one instance (coordinator thread)."""

    def __init__(self, rt: HealedJob) -> None:
        self.rt = rt
        self._timer = 0  # bumped to cancel the armed tick
        self._soon_armed = False
        self._quiet: tuple[int, int, bool] | None = None  # see heal
        # As leader: the instances with a lease or an instance node when the claims were
        # last checked (None: not checked since this instance became the leader).
        self._alive: frozenset[str] | None = None

    def arm(self) -> None:
        self._timer += 1
        token = self._timer

        def tick() -> None:
            if token != self._timer or (self.rt.stopped and not self.rt.firing.busy):
                return
            try:
                self.rt.guarded(self.heal, "heal tick")
            finally:  # whatever failed, the job keeps healing
                self.arm()

        self.rt.host.call_later(self.rt.heal_every(), tick)

    def soon(self) -> None:
        """Heal once the burst of events of one transaction has reached the cache."""
        if self._soon_armed:
            return
        self._soon_armed = True

        def run() -> None:
            self._soon_armed = False
            self.rt.guarded(self.heal, "heal")

        self.rt.host.call_later(HEAL_SOON_SECONDS, run)

    def heal(self, full: bool = False) -> bool:
        """Repair this instance's own state, then, as leader, the job's. ``full`` also
        looks for this instance's own stale claims (after a start or a new session)."""
        rt = self.rt
        if rt.suspended or not rt.registry.connected:
            return False
        rt.firing.resolve()
        if rt.stopped:
            return False
        if rt.registry.session_id != rt.registered_session:
            full = True
            log.info("job %s: new registry session; registering again", rt.name)
            rt.register(first=False)
        elif self._removed_by_operator():
            log.warning("job %s: instance removed by an operator; stopping here", rt.name)
            rt.begin_stop(operator=True)
            return True
        else:
            self._keep_lease()
        rt.elect()
        live = set(membership.live_instances(rt.cache, rt.paths)) | {rt.instance}
        cfg = rt.config
        leader = rt.is_leader()
        if leader and rt.resharder.outdated():
            rt.flag_resharding()
        # A holder may have died since the claims were last checked: some instance left
        # both the instance nodes and the leases. Claims are checked then, not on every
        # heal: that takes a read of each claim's holder.
        alive = frozenset(live.union(rt.cache.children(rt.paths.leases)) if leader else ())
        died = leader and (self._alive is None or not self._alive <= alive)
        # The sweep reads every item: on a big job, the most costly part of a heal. A
        # follower acts only on its own stale claims, after a start or a new session, so
        # it sweeps only then (50 instances of a 10,000-item job swept every 2 s while a
        # layout was written, for nothing). What the sweep finds follows from the cache
        # (leadership and live instances included) and the config, so an unchanged cache
        # after a sweep that found nothing finds nothing.
        quiet = (rt.cache.version, cfg.sharding_total_count, cfg.failover)
        if not (full or died) and (not leader or quiet == self._quiet):
            found = Findings()
        else:
            total = cfg.sharding_total_count
            found = sweep(rt.cache, rt.paths, total, live, cfg.failover, full or died)
            self._quiet = None if found else quiet
        leases: dict[str, bool] = {}
        claims = found.suspect_claims
        unsettled = [i for i in claims if not self._repair_claim(i, live, leader, leases)]
        if not leader:
            self._alive = None  # every claim is checked once this instance leads
        else:
            if not unsettled:  # every claim checked (a failure raises)
                self._alive = alive
            self._repair_job(found)
        rt.firing.misfires.rerun(rt.firing.items.mine())
        rt.firing.failovers.claim(phase=0)
        rt.firing.run_pending()
        return bool(found)

    def _removed_by_operator(self) -> bool:
        """Our instance node is gone although our session lives: only a delete does that."""
        rt = self.rt
        path = rt.paths.instance(rt.instance)
        return not rt.cache.exists(path) and rt.registry.get(path) is None

    def _keep_lease(self) -> None:
        """Someone other than this session removed its lease: put it back, so that its
        claims do not look dead to a leader once its instance node is gone too."""
        rt = self.rt
        path = rt.paths.lease(rt.instance)
        if rt.cache.exists(path) or rt.registry.stat(path) is not None:
            return
        log.warning("job %s: the lease of %s was removed; writing it again", rt.name, rt.instance)
        with contextlib.suppress(NodeExistsError):
            rt.registry.create(path, ephemeral=True)

    def _repair_claim(
        self, item: int, live: set[str], leader: bool, leases: dict[str, bool]
    ) -> bool:
        """A ``running`` is stale if its holder has neither instance node nor lease, or is
        this instance but not running it here (left by an earlier session, or process,
        with the same id). ``leases`` remembers the holders' leases read in this heal.
        False if that is not settled yet: a claim of the item by this instance is in
        flight (it fails if the node is another's), or the repair raced a change."""
        rt = self.rt
        paths = rt.paths
        if rt.firing.reserved(item):
            return False
        # The item node first: a claim bumps its version before its ``running`` can be
        # read, so a claim made after these reads fails the repair's Check, and one made
        # between them shows a new holder. The repair then never deletes a newer claim
        # when it is applied late (the transaction slow, the item failed over meanwhile).
        item_node, running = rt.registry.get_with_stats([paths.item(item), paths.running(item)])
        if item_node is None or running is None:
            return True
        holder = running[0].decode()
        if holder != rt.instance:
            if not leader or holder in live:
                return True
            if holder not in leases:
                leases[holder] = rt.registry.stat(paths.lease(holder)) is not None
            if leases[holder]:
                return True
        now = rt.host.now()
        # The fires since the dead claim are recorded below: the next owner's from now (a
        # fire due this very moment included), or from the dead claim's fire if this clock
        # is behind it (stepped back, say): the next owner would record the fires up to it
        # as fires nobody ran.
        since = max(now - claims.UNRUN_SECONDS, claims.stamped(item_node[0]) or 0.0)
        claim: list[Op] = [
            Check(paths.item(item), item_node[1].version),
            Delete(paths.running(item)),
            SetData(paths.item(item), claims.stamp(since)),
        ]
        if rt.config.failover:
            log.warning("job %s: item %d lost its holder %s; failing over", rt.name, item, holder)
            self._ensure(paths.failover_items)
            ops = claim + failover.queue_ops(rt.cache, paths, item)
        else:
            log.warning("job %s: item %d lost its holder %s; misfired", rt.name, item, holder)
            rt.firing.misfires.note(item)
            ops = claim + failover.stale_ops(rt.cache, paths, item)
            if rt.config.misfire and not rt.cache.exists(paths.misfire(item)):
                ops.append(Create(paths.misfire(item)))
        try:
            if not self._try(ops, f"repair of item {item}"):
                return False  # raced: the next heal looks again
        except RegistryError:
            # A lost answer may hide an applied repair, which no heal would repeat.
            self._record_dead_claim(item, item_node[0], now)
            raise
        self._record_dead_claim(item, item_node[0], now)
        return True

    def _record_dead_claim(self, item: int, value: bytes, now: float) -> None:
        rt = self.rt
        inherited.record_held(rt, rt.trigger, rt.firing.misfires, item, value)
        inherited.record_missed(rt, rt.trigger, rt.firing.misfires, {item: value}, now)

    def _drop_item(self, item: int) -> None:
        """Delete an item beyond the count, unless a run of it is in flight: the cache may
        not show a claim the registry already holds. Its children and the node go in one
        transaction, so a claim made meanwhile leaves the node not empty and the whole
        delete fails; the heal after that run's completion drops it."""
        rt, path = self.rt, self.rt.paths.item(item)
        children = rt.registry.children(path)
        if "running" in children:
            return
        ops: list[Op] = [Delete(f"{path}/{child}") for child in children]
        stamps = inherited.stamps_of(rt, [item])  # gone with the node: read first
        if self._try([*ops, Delete(path)], f"removal of item {item} beyond the count"):
            inherited.record_dropped(rt, rt.trigger, rt.firing.misfires, stamps)

    def _repair_job(self, found: Findings) -> None:
        rt = self.rt
        paths = rt.paths
        for item in found.failover_leftovers:
            if rt.registry.stat(paths.running(item)) is None:
                ops: list[Op] = [Delete(p) for p in (paths.failover(item), paths.failovering(item))]
                for op in ops:
                    self._try([op], f"clean-up of {op.path}")
        for item in found.dead_queue_entries:
            self._try([Delete(paths.failover_item(item))], f"queue entry {item}")
        for item in found.items_beyond_count:
            self._drop_item(item)
        if found.owners_gone and (rt.reshard_due or sharding.is_necessary(rt.cache, paths)):
            found.owners_gone = []  # flagged already: the next fire reshards
        if found.owners_gone:
            # Confirm with the registry: a cache a few events behind must not reshard.
            live = set(rt.registry.children(paths.instances))
            found.owners_gone = [o for o in found.owners_gone if o not in live]
        if found.owners_gone:
            log.warning(
                "job %s: items of gone instances %s; resharding", rt.name, found.owners_gone
            )
            rt.flag_resharding(force=True)
        if found.processing and rt.registry.stat(paths.sharding_processing) is not None:
            # Only the leader reshards, and it does so within one step of this thread: a
            # `processing` node seen here was left by a fault (ours or a former leader's).
            log.warning("job %s: clearing a resharding left half-done", rt.name)
            rt.registry.delete(paths.sharding_processing)

    def _try(self, ops: list[Op], what: str) -> bool:
        try:
            self.rt.registry.transaction(ops)
        except TransactionError as exc:
            log.info("job %s: %s raced a concurrent change (%s)", self.rt.name, what, exc)
            return False
        return True

    def _ensure(self, path: str) -> None:
        if not self.rt.cache.exists(path):
            with contextlib.suppress(NodeExistsError):
                self.rt.registry.create(path)
