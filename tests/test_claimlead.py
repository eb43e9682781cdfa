"""The claim lead: how long before its second a fire claims its items (claimlead.py),
and fires armed already claiming earlier once it grows (FireTimer.relead)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import Any

import pytest

from shardcron.config.job import JobConfig
from shardcron.coordination.claimlead import ClaimLead
from shardcron.coordination.claims import stamped
from shardcron.coordination.misfires import COMPLETION_BEHIND, NOT_STARTED, STILL_RUNNING
from shardcron.coordination.paths import JobPaths
from shardcron.registry import Answer, Create, Op, SessionState, SetData
from shardcron.registry.memory import MemoryRegistry
from shardcron.scheduler.process import Scheduler
from shardcron.simulation.cluster import Cluster, JobSpec
from shardcron.simulation.world import EPOCH
from tests.helpers import wait_until


class Clocks:
    """A host's wall and monotonic clocks: they agree until the test steps the wall clock."""

    def __init__(self) -> None:
        self.wall = self.steady = 1_000_000.0

    def now(self) -> float:
        return self.wall

    def monotonic(self) -> float:
        return self.steady

    def passes(self, seconds: float) -> None:
        self.wall += seconds
        self.steady += seconds

    def ago(self, seconds: float) -> float:
        """When a claim answered now was asked, as the fire side reads it of the host."""
        return self.steady - seconds


def test_the_lead_starts_from_an_estimate_per_job_capped_at_four_seconds() -> None:
    assert ClaimLead(lambda: 0, Clocks())() == 0.04
    assert ClaimLead(lambda: 1000, Clocks())() == pytest.approx(0.44)
    assert ClaimLead(lambda: 10_000, Clocks())() == 4.0
    assert ClaimLead(lambda: 100_000, Clocks())() == 4.0


def test_a_slow_claim_lengthens_the_lead_with_room_rounded_to_half_seconds() -> None:
    clocks = Clocks()
    lead = ClaimLead(lambda: 5000, clocks)  # an estimate of 2.04 s
    assert lead.took(clocks.ago(3.0))  # grew: 3.0 s and a quarter of room, 3.75 s, rounded up
    assert lead() == 4.0
    assert not lead.took(clocks.ago(3.0))  # as long again: no change
    assert not lead.took(clocks.ago(1.0))
    assert lead() == 4.0


def test_a_claim_asked_before_the_registry_came_back_teaches_nothing() -> None:
    clocks = Clocks()
    lead = ClaimLead(lambda: 1, clocks)
    lead.session(SessionState.SUSPENDED)
    clocks.passes(1.2)
    # Answered before the coordinator heard of the reconnection.
    assert not lead.took(clocks.ago(1.1))
    clocks.passes(3.8)
    lead.session(SessionState.RECONNECTED)
    clocks.passes(0.1)
    assert not lead.took(clocks.ago(1.5))  # asked 1.4 s before it: the outage was timed
    assert lead() == pytest.approx(0.0404)
    clocks.passes(1)
    assert lead.took(clocks.ago(0.2))  # asked after it: learned, with a quarter to spare
    assert lead() == pytest.approx(0.25)


def test_fast_claims_leave_the_estimate() -> None:
    clocks = Clocks()
    lead = ClaimLead(lambda: 1000, clocks)
    assert not lead.took(clocks.ago(0.1))  # 0.125 s of room is under the 0.44 s estimate
    assert lead() == pytest.approx(0.44)


def test_a_small_learned_lead_is_not_rounded_to_half_seconds() -> None:
    """Every-second jobs whose items run 0.6 s must not be claimed 0.5 s ahead because
    one claim took 0.1 s."""
    clocks = Clocks()
    lead = ClaimLead(lambda: 1, clocks)
    # It grew by less than 0.1 s: not worth a pass over the jobs.
    assert not lead.took(clocks.ago(0.1))
    assert lead() == pytest.approx(0.125)
    assert lead.took(clocks.ago(0.2))
    assert lead() == pytest.approx(0.25)


def test_a_learned_lead_halves_every_ten_minutes_and_is_capped() -> None:
    clocks = Clocks()
    lead = ClaimLead(lambda: 1000, clocks)
    lead.took(clocks.ago(3.0))  # 3.75 s wanted: 4.0 s, rounded up
    assert lead() == 4.0
    clocks.passes(600)
    assert lead() == 1.875
    clocks.passes(6000)
    assert lead() == pytest.approx(0.44)  # decayed under the estimate: the estimate again
    lead.took(clocks.ago(60.0))
    assert lead() == 10.0


def leads_around_claims(back: float, forward: float) -> list[float]:
    """The lead of a process of 1,000 jobs (an estimate of 0.44 s): after a claim of
    2.5 s; five minutes after the wall clock stepped ``back``; after a claim of 0.25 s in
    flight as the wall clock stepped ``forward``; after a claim of 2.5 s in flight as it
    stepped ``back`` again; ten minutes later."""
    clocks, leads = Clocks(), []
    lead = ClaimLead(lambda: 1000, clocks)

    def claim(before: float, after: float, step: float) -> None:
        asked = clocks.monotonic()  # as the fire side reads it of the host
        clocks.passes(before)
        clocks.wall += step
        clocks.passes(after)
        lead.took(asked)
        leads.append(lead())

    claim(1.0, 1.5, 0.0)
    clocks.wall -= back
    clocks.passes(300)
    leads.append(lead())
    claim(0.125, 0.125, forward)
    claim(1.0, 1.5, -back)
    clocks.passes(600)
    leads.append(lead())
    return leads


def test_a_step_of_the_wall_clock_neither_lengthens_nor_shortens_the_lead() -> None:
    """Timed on the wall clock, a lead grew 64 times as the clock stepped back an hour
    (its decay ran backwards), a claim in flight as it stepped forward a minute taught a
    lead of a minute, and one in flight as it stepped back taught nothing. The lead is
    what it is with no step."""
    # 2.5 s and a quarter of room, 3.125 s, rounded up; halved in ten minutes, 2.21 s five
    # minutes on, rounded up; a claim of 0.25 s teaches nothing; one of 2.5 s, 3.125 s
    # again; ten minutes on, half that, under 2 s: kept as it is.
    unstepped = [3.5, 2.5, 2.5, 3.5, 1.5625]
    assert leads_around_claims(0.0, 0.0) == unstepped
    for back, forward in [(3600.0, 0.0), (0.0, 60.0), (3600.0, 60.0)]:
        assert leads_around_claims(back, forward) == unstepped


class SlowClaims(MemoryRegistry):
    """An embedded registry that answers each claim 0.3 s after applying it, as a loaded
    one would, and notes how long before its fire's second each claim was sent."""

    def __init__(self) -> None:
        super().__init__()
        self.ahead: list[float] = []

    def send_transaction(self, ops: Sequence[Op], answer: Callable[[Answer], None]) -> None:
        if not any(isinstance(op, Create) and op.path.endswith("/running") for op in ops):
            super().send_transaction(ops, answer)
            return
        second = next(stamped(op.data) for op in ops if isinstance(op, SetData))
        assert second is not None
        self.ahead.append(second - time.time())
        super().send_transaction(ops, lambda got: threading.Timer(0.3, answer, [got]).start())


def test_a_worker_whose_claims_are_answered_slowly_claims_that_much_earlier() -> None:
    """The lead a worker learns is timed on its monotonic clock, from the tick that asked
    for the claim to the fire staged: the claims of 0.3 s teach it to claim 0.375 s and
    more ahead (an every-second job's lead stays under half a second)."""
    registry = SlowClaims()
    scheduler = Scheduler(registry, instance_id="127.0.0.1@-@4001")
    config = JobConfig(job_name="slow", cron="* * * * * ?", sharding_total_count=1)
    scheduler.add_job(config, lambda _ctx: None)
    scheduler.start()
    try:
        wait_until(lambda: len(registry.ahead) >= 6, 20, "six claims")
    finally:
        scheduler.stop()
    assert registry.ahead[0] < 0.2  # the first claim, before any answer: the estimate
    assert max(registry.ahead[2:]) >= 0.3  # learned (a loaded machine may send some late)
    assert max(registry.ahead) < 0.5


def test_a_fire_armed_before_the_lead_grew_claims_that_much_earlier() -> None:
    paths = JobPaths("job0")
    jobs = [JobSpec("job0", items=2, period=1, failover=False, misfire=True)]
    cluster = Cluster(jobs, instances=1, session_timeout=2.0, rng=random.Random(1))
    cluster.calm = True  # items of 20-150 ms
    member = cluster.members[0]
    cluster.world.at(EPOCH + 0.3, lambda: cluster.start(member))
    second = EPOCH + 5
    cluster.world.run_until(second - 0.7)  # the fire of `second` is armed, 20 ms of lead
    runtime = member.runtimes["job0"]
    runtime.lead = lambda: 0.4
    cluster.world.at(second - 0.6, runtime.firing.timer.relead)
    cluster.world.run_until(second - 0.3)
    assert all(cluster.peek(paths.running(i)) is not None for i in (0, 1))  # claimed
    cluster.world.run_until(second + 0.5)
    starts = sorted(r.start for r in cluster.ledger.runs if second - 0.5 <= r.start)
    assert starts == [second, second]  # and started on the second all the same


def one_item_runs(
    monkeypatch: pytest.MonkeyPatch,
    period: int,
    duration: float,
    lead: float,
    until: float,
    misfire: bool = True,
    behind: float = 0.0,
    items: int = 1,
) -> tuple[list[float], Cluster]:
    """A simulated worker with one job of ``period`` seconds (one item, or ``items``, two
    running at a time) whose items run ``duration`` seconds, claiming ``lead`` seconds
    ahead from its fourth second on: the starts from its sixth second to ``until``, and
    the cluster. With ``behind``, the worker's coordinator hears of each returned work
    that much later (an overloaded worker)."""
    jobs = [JobSpec("job0", items=items, period=period, failover=False, misfire=misfire)]
    cluster = Cluster(jobs, instances=1, session_timeout=2.0, rng=random.Random(1))
    monkeypatch.setattr(cluster, "duration", lambda _member: duration)
    member = cluster.members[0]
    if behind:
        execute, world = member.host.execute, cluster.world

        def late(work: Any, then: Any, returned: Any = None) -> None:
            def heard(result: object) -> None:
                world.at(world.now + behind, lambda: then(result), member.node)

            execute(work, heard, returned)

        monkeypatch.setattr(member.host, "execute", late)
    cluster.world.at(EPOCH + 0.3, lambda: cluster.start(member))
    cluster.world.run_until(EPOCH + 3.5)  # started, first layout written
    runtime = member.runtimes["job0"]
    runtime.lead = lambda: lead
    runtime.firing.timer.relead()
    cluster.world.run_until(EPOCH + until)
    return [run.start for run in cluster.ledger.runs if run.start >= EPOCH + 6], cluster


def skips_from_the_sixth_second(cluster: Cluster) -> list[float]:
    return [skip.at - EPOCH for skip in cluster.ledger.skips if skip.at >= EPOCH + 6]


@pytest.mark.parametrize("misfire", [True, False])
def test_an_item_that_ends_before_the_next_second_is_no_misfire(
    monkeypatch: pytest.MonkeyPatch, misfire: bool
) -> None:
    """Every second, items of 0.6 s, a learned lead of 0.5 s: each claim finds the last
    run still going. It used to skip it as a misfire: with misfire off, every other fire
    was lost; with it on, flagged, and re-run. The run ends before the second, so the
    fire runs on it, as a fire claimed on its second does (and ElasticJob's)."""
    later, cluster = one_item_runs(monkeypatch, 1, 0.6, 0.5, until=15.5, misfire=misfire)
    assert later == [EPOCH + second for second in range(6, 16)]  # each second, on it
    assert skips_from_the_sixth_second(cluster) == []


def test_a_long_lead_waits_for_an_item_still_running_instead_of_skipping_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Items of 1.3 s every 2 s, a lead of 1 s: claimed 1 s ahead, each fire finds the
    last one's item running. It runs on its second all the same."""
    later, cluster = one_item_runs(monkeypatch, period=2, duration=1.3, lead=1.0, until=15)
    assert later == [EPOCH + second for second in range(6, 15, 2)]
    assert skips_from_the_sixth_second(cluster) == []


@pytest.mark.parametrize("misfire", [True, False])
def test_an_item_still_running_on_the_next_second_is_skipped_on_it(
    monkeypatch: pytest.MonkeyPatch, misfire: bool
) -> None:
    """Every second, items of 1.3 s: each run is still going on the next second. That
    fire is skipped on its second (not when claimed ahead); with misfire on, it runs
    once the run ends, and never before its second (a re-run used to start as soon as
    the run ended, ahead of the second it stood for: the fault-injection suite's calm
    fires, in CI, ran items twice every other second)."""
    later, cluster = one_item_runs(monkeypatch, 1, 1.3, 0.5, until=14.5, misfire=misfire)
    skips = skips_from_the_sixth_second(cluster)
    starts = [start - EPOCH for start in later]
    on_seconds = [start for start in starts if start == int(start)]
    if misfire:
        # A start is on its second, or a re-run as the run before it ends.
        assert all(b in on_seconds or b - a == pytest.approx(1.3) for a, b in pairwise(starts))
    else:
        assert starts == on_seconds
    assert all(skip == int(skip) for skip in skips)  # on its second, not ahead of it
    assert sorted(on_seconds + skips) == list(range(6, 15))  # each second runs or is skipped
    assert {skip.reason for skip in cluster.ledger.skips if skip.at >= EPOCH + 6} == {STILL_RUNNING}


def test_a_skip_says_when_the_worker_is_behind_not_the_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Items of 0.1 s every second, on a worker whose coordinator hears of their ends
    1.2 s late: each next fire finds the item held and skips it on its second. The job
    is not slow, the worker is: the reason says so, not "still running"."""
    later, cluster = one_item_runs(monkeypatch, 1, 0.1, 0.5, until=14.5, behind=1.2)
    on_seconds = [start - EPOCH for start in later if start == int(start)]
    skips = skips_from_the_sixth_second(cluster)
    assert skips
    assert sorted(on_seconds + skips) == list(range(6, 15))  # each second runs or is skipped
    assert {skip.reason for skip in cluster.ledger.skips if skip.at >= EPOCH + 6} == {
        COMPLETION_BEHIND
    }


def test_a_skip_tells_an_item_that_never_started_from_a_fire_still_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three items of 1.3 s every second, two at a time: the third waits for a lane, and
    the next fire finds it not started. Once it runs, the two that returned are held by a
    fire still running, not by a worker behind."""
    _, cluster = one_item_runs(monkeypatch, 1, 1.3, 0.5, until=14.5, items=3)
    skips = [skip for skip in cluster.ledger.skips if skip.at >= EPOCH + 6]
    assert {skip.reason for skip in skips} == {STILL_RUNNING, NOT_STARTED}
    runs = cluster.ledger.runs
    for skip in skips:
        running = [r for r in runs if r.start <= skip.at and (r.end is None or r.end > skip.at)]
        assert running  # the earlier fire runs an item when it is skipped
        if skip.reason == NOT_STARTED:
            assert not {r.item for r in running} & set(skip.items)
