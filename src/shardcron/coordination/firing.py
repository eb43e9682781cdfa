"""The fire side of one job on one instance: its timer, claims, runs and completions.

:class:`Firing` belongs to a :class:`shardcron.coordination.runtime.JobRuntime` and, like it, runs
on the coordinator thread only. Its timer (:mod:`shardcron.coordination.firetimer`) arms the next
fire from the job's trigger; it claims the instance's items ahead of the second (one
multi-op, or one per part of a fire too big for one), hands them to the fire path
(:mod:`shardcron.execution.lanes`) on the second, completes the claim when the last item returns
(one multi-op), has skipped items re-run once (:mod:`shardcron.coordination.misfires`) and queued
failover items claimed (:mod:`shardcron.coordination.failover`). A fire found while resharding is
pending waits for the new layout (:mod:`shardcron.coordination.layoutwait`); the first fire
of items gained from another owner records the fires nobody ran
(:mod:`shardcron.coordination.inherited`). A claim or completion whose answer was lost stays listed until :meth:`Firing.resolve`
settles it from the registry after the reconnect.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from shardcron.coordination import (
    claims,
    deregistration,
    failover,
    healing,
    inherited,
    sharding,
)
from shardcron.coordination.clockskew import ClockCheck
from shardcron.coordination.firetimer import FireTimer, TimedJob
from shardcron.coordination.idleflag import IdleFlag
from shardcron.coordination.inflight import Fire, Lanes
from shardcron.coordination.layoutwait import LayoutWait
from shardcron.coordination.localitems import DISABLED, LocalItems
from shardcron.coordination.misfires import FAILED_OVER, MISSED, MisfiredJob, Misfires
from shardcron.errors import RegistryError, ShardcronError, TransactionError
from shardcron.model import (
    INSTANCE_DELIMITER,
    ExecutionSource,
    ShardingContext,
    item_ranges,
    task_id,
)
from shardcron.registry import Op, SetData

log = logging.getLogger(__name__)

# Why a late fire (one that followed a run here) skips an item claimed elsewhere since.
MOVED = "claimed by another instance since: the layout had moved it"
# Why a stop hands a fire's items back unrun.
STOPPED = "this instance stopped before the items started"
# Why a fire's items are skipped when the read of the items it gained failed.
READ_LOST = "registry connection lost while reading the items this instance took over"


class FiringJob(MisfiredJob, TimedJob, deregistration.Departing, Protocol):
    """What :class:`Firing` and its parts (timer, misfires, failover claims) need of the job."""

    @property
    def resharder(self) -> sharding.Resharder: ...

    @property
    def healer(self) -> healing.Healer: ...

    @property
    def departures(self) -> deregistration.Departures: ...

    @property
    def workers(self) -> int:
        """How many of its items run at once here (the job's lanes)."""
        ...

    @property
    def claim_took(self) -> Callable[[float], None]:
        """Told, once a fire is ready, when its claim was asked (on the host's monotonic
        clock)."""
        ...


class Firing:
    def __init__(self, rt: FiringJob, path: Lanes) -> None:
        self.rt = rt
        self.path = path
        self.idle = IdleFlag()
        self.items = LocalItems(rt)
        self.timer = FireTimer(rt, self)
        self._reserved: set[int] = set()  # items claimed or being claimed here
        self._fires: list[Fire] = []  # fires in flight (running, or completion pending)
        self._unsure: list[Fire] = []  # claims whose answer was lost
        self._unfinished: list[Fire] = []  # completions whose answer was lost
        self._claiming: list[Fire] = []  # claims sent with the tick's group commit
        self._latest = 0.0  # the second of the latest fire here (see fire)
        self._prior = 0.0  # and of the one before it
        self._completing: list[Fire] = []  # completions sent likewise
        self._stamped = 0.0  # the latest fire second a claim here stamped (see _stamp)
        self.layout = LayoutWait(rt, self)
        self.clock = ClockCheck(rt.name, rt.registry, rt.paths.system_time, rt.host.now)
        self.misfires = Misfires(rt, self)
        self.failovers = failover.Claims(rt, self)
        self._keep_going = self.keep_going  # one bound method for the contexts of every fire

    @property
    def running_items(self) -> list[int]:
        return sorted(i for fire in self._fires for i in fire.items)

    @property
    def waiting(self) -> bool:
        """A fire waits for a resharding."""
        return self.layout.waiting

    def count_changed(self) -> float | None:
        """When the config last changed (one read)."""
        return inherited.count_changed(self.rt)

    def record_dropped(self, items: list[int]) -> None:
        """Record the fires nobody ran of ``items``, which a lowered count drops, up to
        the change (their stamps go with them; two reads)."""
        stamps = inherited.stamps_of(self.rt, items)
        inherited.record_dropped(self.rt, self.rt.trigger, self.misfires, stamps)

    def written(self, share: list[int]) -> None:
        """A layout written here gives this instance ``share`` (see :class:`LocalItems`)."""
        self.items.written(share)

    @property
    def latest(self) -> float:
        """The second of the latest fire of the timer here (0: none yet)."""
        return self._latest

    def fired_before(self, second: float) -> float:
        """The second of the latest fire here before ``second`` (0: none)."""
        return self._latest if self._latest < second else self._prior

    @property
    def first_fire(self) -> float:
        """The second of the first fire a layout written now is for: the one waiting for
        it, else the next one armed (now, if none is)."""
        return self.layout.when or self.timer.armed or self.rt.host.now()

    def run_pending(self) -> None:
        """Run the fire that waits for a resharding, if its layout is in (see
        :mod:`.layoutwait`)."""
        self.layout.run()

    def ask_layout_ahead(self) -> None:
        """The timer: the first fire's claim is near enough to have its layout written."""
        self.layout.ask_ahead()

    @property
    def busy(self) -> bool:
        return bool(self._fires)

    @property
    def running(self) -> bool:
        """Some fire here is not over: claimed, or its items not all returned. A fire whose
        completion alone is on its way is over."""
        return any(not fire.ended for fire in self._fires)

    def reserved(self, item: int) -> bool:
        return item in self._reserved

    @property
    def reserving(self) -> bool:
        """Some item is claimed, or being claimed, here."""
        return bool(self._reserved)

    def stop(self) -> None:
        """No new fire; hand back claims made ahead of a second that has not come."""
        self.timer.cancel()
        self.layout.clear()
        for fire in self._fires[:]:
            if fire in self._unsure or fire in self._claiming:
                continue  # a claim still in flight is completed when it returns
            if fire.context is None or (fire.gate is not None and fire.gate.cancel()):
                self.hand_back(fire)
        self._let_go_of_unsure()

    def _let_go_of_unsure(self) -> None:
        """Stopping while the registry is unreachable: claims whose answer was lost are
        dropped, not kept until the registry can say whether they went through. Their items
        never started; if a claim did go through, this instance's lease ends with this
        session and the leader's sweep clears it as after a crash. Keeping them held the stop
        for its whole grace, and then reported items "still running" that never ran."""
        if not self.rt.stopped or self.rt.registry.connected:
            return  # connected: the next heal settles them (and hands them back)
        for fire in self._unsure[:]:
            self._unsure.remove(fire)
            self.drop(fire)

    def claim_holds(self, fire: Fire) -> bool:
        """Items start only while the session that claimed them lives (as far as we know)
        and is connected. The connection is asked, not only the coordinator's view of it:
        a staged fire starts on a worker, which may come before the coordinator has read
        a SUSPENDED queued behind other work."""
        registry = self.rt.registry
        return not self.rt.suspended and registry.connected and fire.session == registry.session_id

    def resolve(self) -> None:
        """Settle the requests whose answers were lost, from what the registry holds. A
        fire leaves its list only once settled: a fault meanwhile leaves it for next time."""
        for fire in self._unsure[:]:
            applied = claims.settle(
                self.rt.registry, self.rt.paths, fire.items, self.rt.instance, fire.session
            )
            self._unsure.remove(fire)
            if applied.items:
                self._release([i for i in fire.items if i not in applied.items])
                fire.claim, fire.items = applied, applied.items
                if self.rt.stopped:
                    self.hand_back(fire)  # stopping: as a claim made ahead
                else:
                    self.dispatch(fire)  # it went through: run it, late, as its fire's run
            else:
                self.drop(fire)
                if fire.source is not ExecutionSource.FAILOVER:
                    self.misfires.skip(
                        fire.items,
                        "registry connection lost while claiming",
                        fire.when,
                        source=fire.source,
                    )
        for fire in self._unfinished[:]:
            self._unfinished.remove(fire)
            self.complete(fire)  # puts it back if the registry fails again

    # -- fires --------------------------------------------------------------------------

    def fire(
        self,
        source: ExecutionSource = ExecutionSource.NORMAL_TRIGGER,
        only: list[int] | None = None,
        start_at: float | None = None,
        trust_cache: bool = True,
        after_layout: bool = False,
        expect: dict[int, int] | None = None,
    ) -> None:
        """Claim this instance's items now and run them at ``start_at`` (or at once).
        Without ``trust_cache``, items the cache shows running are claimed all the same
        (the registry refuses those still running): the cache may still show the claim
        this instance has just completed. ``after_layout``: the fire waited for a new
        layout, so an item's owner before it may have run it (see :mod:`.inherited`).
        ``expect``: see :class:`~shardcron.coordination.claims.Claiming`."""
        when = self.rt.host.now() if start_at is None else start_at
        if self.rt.stopped:
            return
        latest = self._latest
        if source is ExecutionSource.NORMAL_TRIGGER and not after_layout and when > latest:
            self._prior, self._latest = latest, when  # handled here, whatever becomes of it
        if self.rt.suspended and self.layout.waiting:
            self.layout.add(when, source, only)  # it runs, or is recorded, with the layout
            return
        if self.rt.suspended:
            lost = "registry connection lost"
            self.misfires.skip(self.items.mine(only), lost, when, source=source)
            return
        try:
            skew = self.clock.skew(self.rt.config.max_time_diff_seconds)
            if skew is not None and not self.path.report(None, skew):
                return  # a THROW handler aborts the fire, as in Java
            if self.rt.reshard_due or sharding.is_necessary(self.rt.cache, self.rt.paths):
                self.layout.add(when, source, only)
                if self.rt.is_leader():
                    self.rt.resharder.reshard()
                return
            barred = self.items.barred()
            if barred is not None:
                # Not a misfire when an operator disabled the server: not meant to run here.
                again = barred != DISABLED
                self.misfires.skip(self.items.mine(only), barred, when, again, source)
                return
            items, held = self.items.to_fire(only)
            monitored = self.rt.config.monitor_execution
            normal = source is ExecutionSource.NORMAL_TRIGGER and monitored
            # A misfire re-run's claim stamps the moment it runs: the fires before it that
            # nobody ran are read from the stamp it overwrites. A fire older than the
            # latest one here (one that followed a run) leaves the read to the next: the
            # fires between them were handled here with the layout before. A catch-up is
            # judged, and reads, by the moment it stamps: the fires it overwrites are older.
            # Not past the fire armed here, though: released late (the wall clock stepped
            # forward, the process paused), that fire and those after it are this timer's
            # to run or record, not fires nobody ran.
            catch_up = source is not ExecutionSource.NORMAL_TRIGGER
            at = max(when, self.rt.host.now()) if catch_up else when
            armed = self.timer.armed
            if catch_up and armed is not None and armed < at:
                at = max(when, armed)
            own = source is not ExecutionSource.FAILOVER and monitored and at >= latest
            gained = self.items.take_inherited(items + held) if own else []
            if gained or (normal and after_layout and self.items.take_owner_left()):
                others = items if after_layout else None
                try:
                    ran = inherited.record(
                        self.rt, self.rt.trigger, self.misfires, gained, at, others
                    )
                except RegistryError:
                    # Nothing of this fire is claimed yet: say so, and read them next time.
                    self.items.give_back(gained)
                    self.misfires.skip(sorted(items + held), READ_LOST, when, source=source)
                    raise
                items = [i for i in items if i not in ran]
            self.misfires.skip(held, FAILED_OVER, when, source=source)
            busy = [i for i in items if i in self._reserved]
            if busy:
                followed = self._follow(busy, source, when)
                busy = [i for i in busy if i not in followed]
            self.misfires.skip_held(busy, self._fires, when, source)
            free = [i for i in items if i not in self._reserved]
            if self.rt.config.monitor_execution:
                # A claim too big for one transaction is several fires of the same second,
                # each with its own claim (and fencing token), completion and listeners' calls.
                parts = claims.claim_parts(self.rt.registry, self.rt.paths, free, self.rt.instance)
            else:
                parts = [free] if free else []
            for part in parts:
                self._claim_and_run(part, source, when, trust_cache, expect)
        except ShardcronError as exc:  # registry faults, a broken custom strategy
            self._report(exc)

    def _follow(self, items: list[int], source: ExecutionSource, when: float) -> set[int]:
        """Those of ``items`` held by an earlier fire here: this fire claims them once that
        fire's completion is applied, instead of skipping them as still running. Claimed a
        lead ahead of its second, a fire would skip runs that end before it, as no fire
        claimed on the second (nor ElasticJob) does: with misfire off, a job lost every
        other fire. A run still going on the second is skipped then. One fire follows each."""
        followed: set[int] = set()
        wanted = set(items)
        for fire in self._fires:
            if fire.follow is None:
                mine = [i for i in fire.items if i in wanted]
                if mine:
                    fire.follow = (source, when, mine)
                    followed.update(mine)
                    if not fire.ended:
                        self._look_on_the_second(fire, when)
        return followed

    def _look_on_the_second(self, fire: Fire, when: float) -> None:
        """On the second ``when`` of the fire that follows ``fire``: if ``fire``'s items
        still run, that fire misfired, as one claimed on its second would have."""
        # A partial (see _claim_and_run): a busy every-second job's fires all follow.
        self.rt.host.call_at(when, functools.partial(self._on_the_second, fire, when))

    def _on_the_second(self, fire: Fire, when: float) -> None:
        def overran() -> None:
            if fire.ended or fire.follow is None or fire.follow[1] != when:
                return
            (source, _, items), fire.follow = fire.follow, None
            self.misfires.skip_held(items, self._fires, when, source)

        self.rt.guarded(overran, "fire")

    def missed(self, when: float) -> None:
        """The fire of second ``when`` came too late to run (the process was paused, or
        the wall clock stepped forward): its items are recorded as skipped and, with
        misfire, run once more."""
        if self.rt.stopped:
            return
        if self.items.barred() is not None:  # nobody else runs them until the next layout
            self.misfires.skip(self.items.mine(), MISSED, when)
            return
        items, held = self.items.to_fire(None)
        self.misfires.skip(sorted(items + held), MISSED, when)

    def _report(self, error: ShardcronError) -> None:
        self.rt.host.execute(lambda: self.path.report(None, error), lambda _: None)

    def hold(self, fire: Fire) -> None:
        """Track ``fire``, about to be claimed, until it completes or is dropped; its items
        stay reserved here meanwhile."""
        self._reserved.update(fire.items)
        self._fires.append(fire)
        if fire.items:
            self.idle.clear()

    def _release(self, items: Sequence[int]) -> None:
        self._reserved.difference_update(items)

    def _claim_and_run(
        self,
        items: list[int],
        source: ExecutionSource,
        when: float,
        trust_cache: bool = True,
        expect: dict[int, int] | None = None,
    ) -> None:
        session, next_claim = self.rt.registry.session_id, self.timer.next_claim()
        if not self.rt.config.monitor_execution:
            fire = Fire(items, claims.Claim(items), source, session, when, next_claim)
            self.hold(fire)
            self._claimed(fire)
            return
        request = claims.Claiming(
            self.rt.cache,
            self.rt.paths,
            items,
            self.rt.instance,
            when=claims.stamp(self._stamp(source, when)),
            trust_cache=trust_cache,
            expect=expect,
        )
        # The request's result is the fire's claim, and its answer goes to a partial, not a
        # closure: a worker of thousands of jobs has thousands of claims in flight whenever
        # the garbage collector runs, and it scans every object of them.
        fire = Fire(items, request.result, source, session, when, next_claim)
        self.hold(fire)
        self._claiming.append(fire)
        # A herd's claims are asked for in one timer tick. How long they took is measured on
        # the monotonic clock: a wall clock stepped meanwhile would teach a wrong lead.
        asked = self.rt.host.released_monotonic()
        then = functools.partial(self._claim_answered, fire, asked)
        self.rt.commits.submit(request, then)

    def _stamp(self, source: ExecutionSource, when: float) -> float:
        """The second a claim writes on its item nodes (see :mod:`.inherited`): its fire's.
        A catch-up's stands for every fire up to now: the second of the fire it catches up
        may be older than one run since. Never older than a stamp written here before:
        after a step back of the wall clock, now is older than fires run before the step,
        and the owner after this one would record those as fires nobody ran."""
        at = when if source is ExecutionSource.NORMAL_TRIGGER else max(when, self.rt.host.now())
        self._stamped = max(self._stamped, at)
        return self._stamped

    def _claim_answered(self, fire: Fire, asked: float, error: RegistryError | None) -> None:
        self._claiming.remove(fire)
        self.rt.guarded(lambda: self._on_claim(fire, error), "claim")
        # How long it took tells the next lead, claimed ahead or not: a herd's first fire,
        # claimed once its layouts are written, teaches the next one.
        self.rt.claim_took(asked)

    def _on_claim(self, fire: Fire, error: RegistryError | None) -> None:
        """The claim's answer: ``fire.claim`` is the request's result, applied."""
        if isinstance(error, TransactionError):
            self.drop(fire)
            self._report(error)
        elif error is not None:
            self.claim_unsure(fire)
            self._report(error)
            self._let_go_of_unsure()
        else:
            if fire.claim.versions:
                self.rt.commits.claimed()
            if self.rt.stopped:
                self.hand_back(fire)  # stopped while the claim was in flight
            else:
                self._claimed(fire)

    def _claimed(self, fire: Fire) -> None:
        if fire.claim.contended:
            contended = "still running on another instance"
            self.misfires.skip(fire.claim.contended, contended, fire.when, source=fire.source)
            self._release(fire.claim.contended)
        if fire.claim.moved:
            self.misfires.skip(
                fire.claim.moved, MOVED, fire.when, misfire=False, source=fire.source
            )
            self._release(fire.claim.moved)
        if fire.claim.unleased:
            reason = "this instance's lease is missing (a new session): registering again"
            self.misfires.skip(fire.claim.unleased, reason, fire.when, source=fire.source)
            self._release(fire.claim.unleased)
            self.rt.healer.soon()
        fire.items = fire.claim.items
        if not fire.items:
            self.drop(fire)
            return
        when = fire.when
        wait = when - self.rt.host.now()
        if wait > 0 and self.path.stages:
            self.dispatch(fire, at=when)  # claimed ahead of time: the timer starts its items
        elif wait > 0:
            self.rt.host.call_at(
                when, lambda: self.rt.guarded(lambda: self.dispatch(fire), "dispatch")
            )
        else:
            self.dispatch(fire)

    def claim_unsure(self, fire: Fire) -> None:
        """The answer to ``fire``'s claim was lost: :meth:`resolve` settles it once
        reconnected."""
        self._unsure.append(fire)

    def drop(self, fire: Fire) -> None:
        """Stop tracking ``fire`` (completed, or its claim failed): its items are free, and
        a fire that follows it claims them."""
        self._release(fire.items)
        if fire in self._fires:
            self._fires.remove(fire)
        if not self._fires:
            self.idle.set()
            if self.rt.stopped:
                self.rt.departures.add(self.rt)
        follow, fire.follow = fire.follow, None
        if follow is not None and not self.rt.stopped:
            self._run_follow(follow)

    def _run_follow(
        self,
        follow: tuple[ExecutionSource, float, list[int]],
        expect: dict[int, int] | None = None,
    ) -> None:
        source, when, items = follow
        # Runs them (no re-run to look for), unless claimed elsewhere since (``expect``).
        self.fire(source, items, when, trust_cache=False, expect=expect)

    def dispatch(self, fire: Fire, at: float | None = None) -> None:
        """Start ``fire``'s items now, or stage them to start at ``at``."""
        if fire not in self._fires:
            return  # handed back by a stop before its second came
        if not self.claim_holds(fire):
            # The claim may have died with the session meanwhile: never start on it.
            self.misfires.skip(
                fire.items,
                "registry connection or session lost before the items started",
                fire.when,
                source=fire.source,
            )
            self.complete(fire)
            return
        cfg = self.rt.config
        params = cfg.sharding_parameters()
        tid = task_id(
            self.rt.name, fire.items, self.rt.ip, self.rt.instance.split(INSTANCE_DELIMITER)[-1]
        )
        contexts = [
            ShardingContext(
                job_name=self.rt.name,
                task_id=tid,
                sharding_total_count=cfg.sharding_total_count,
                job_parameter=cfg.job_parameter,
                sharding_item=item,
                sharding_parameter=params.get(item),
                fencing_token=fire.claim.token,
                source=fire.source,
                scheduled_fire_time=fire.when or None,
                _claim_check=self._claim_check(item, fire.claim.token),
                _keep_going=self._keep_going,
            )
            for item in fire.items
        ]
        self.path.begin(
            fire, contexts, cfg.sharding_total_count, cfg.job_parameter, self.rt.workers, at
        )

    def keep_going(self) -> bool:
        return (
            not self.rt.stopped
            and not self.rt.suspended
            and self.rt.registry.connected
            and not sharding.is_necessary(self.rt.cache, self.rt.paths)
        )

    def _claim_check(self, item: int, token: int) -> Callable[[], bool]:
        if not self.rt.config.monitor_execution:
            return lambda: not self.rt.stopped
        # A partial (see _claim_and_run): every item of a fire in flight carries one.
        return functools.partial(claims.is_current, self.rt.registry, self.rt.paths, item, token)

    def hand_back(self, fire: Fire) -> None:
        """A stop hands back ``fire`` before its items started: recorded, then completed.
        The instance that gets them runs the fire's next ones."""
        if fire.source is not ExecutionSource.FAILOVER:
            unrun = [i for i in fire.items if i not in fire.started]
            self.misfires.skip(unrun, STOPPED, fire.when, misfire=False, source=fire.source)
        self.complete(fire)

    def complete(self, fire: Fire) -> None:
        """All items returned: the ``after`` listeners and the fire's status, then remove
        the claim (conditional on it, with the tick's group commit). A lost answer leaves
        the claim pending, and its items reserved here: :meth:`resolve` retries it after
        the reconnect."""
        paths = self.rt.paths
        if not fire.ended:
            fire.ended = True
            self.path.end(fire)
        if not fire.claim.versions:
            self._completed(fire)
            return
        if fire in self._completing:
            return
        extra: dict[int, list[Op]] | None = None
        session = self.rt.registry.session_id
        if fire.source is ExecutionSource.FAILOVER:
            extra = {i: failover.complete_ops(paths, i) for i in fire.items}
        elif fire.source is ExecutionSource.NORMAL_TRIGGER and fire.session == session:
            # Items handed back unrun (a stop before the second, a session lost first) say
            # so on their stamp: the owner after this one runs that fire (see .inherited).
            # Not a claim of a session that ended: the registry may have lost its data
            # since, and an item node made anew, claimed by another, can pass the version
            # check: its stamp would go back before the fires run since.
            unrun = claims.stamp(fire.when - claims.UNRUN_SECONDS)
            extra = {
                i: [SetData(paths.item(i), unrun)] for i in fire.items if i not in fire.started
            }
        request = claims.Completing(paths, fire.claim.versions, extra)
        self._completing.append(fire)

        then = functools.partial(self._completion_answered, fire)  # see _claim_and_run
        self.rt.commits.submit_completion(request, then)

    def _completion_answered(self, fire: Fire, error: RegistryError | None) -> None:
        self._completing.remove(fire)
        if error is None:
            self.rt.guarded(lambda: self._completed(fire), "completion")
            return
        log.warning(
            "job %s: completion of items %s pending (%s)",
            self.rt.name,
            item_ranges(fire.items),
            error,
        )
        if fire not in self._unfinished:
            self._unfinished.append(fire)

    def _completed(self, fire: Fire) -> None:
        follow, fire.follow = fire.follow, None  # claimed below, after failover items
        self.drop(fire)
        if self.rt.stopped:
            return
        # Queued failover items first: they go to idle instances, and this one is idle
        # now, between two fires, as in ElasticJob. Claimed first, the fire that follows
        # kept a busy instance busy for good, and the items waited for another.
        self.failovers.claim(phase=1)
        if follow is not None:
            # The item nodes as this fire's completion left them (a stamp of items handed
            # back unrun bumped theirs): claimed elsewhere since, they moved.
            versions, unrun = fire.claim.versions, fire.source is ExecutionSource.NORMAL_TRIGGER
            expect = {
                i: versions[i] + int(unrun and i not in fire.started)
                for i in follow[2]
                if i in versions
            }
            self._run_follow(follow, expect)
        elif fire.source is not ExecutionSource.FAILOVER:
            self.misfires.rerun(fire.items)
