"""The claim lead: how long before its second a fire claims its items (claimlead.py),
and fires armed already claiming earlier once it grows (FireTimer.relead)."""

from __future__ import annotations

import random

import pytest

from shardcron import firetimer
from shardcron.claimlead import ClaimLead
from shardcron.paths import JobPaths
from shardcron.simulation.cluster import Cluster, JobSpec
from shardcron.simulation.world import EPOCH


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_lead_starts_from_an_estimate_per_job_capped_at_four_seconds() -> None:
    assert ClaimLead(lambda: 0, Clock())() == 0.04
    assert ClaimLead(lambda: 1000, Clock())() == pytest.approx(0.44)
    assert ClaimLead(lambda: 10_000, Clock())() == 4.0
    assert ClaimLead(lambda: 100_000, Clock())() == 4.0


def test_a_slow_claim_lengthens_the_lead_with_room_rounded_to_half_seconds() -> None:
    lead = ClaimLead(lambda: 5000, Clock())  # an estimate of 2.04 s
    assert lead.took(3.0)  # grew: 3.0 s and a quarter of room, 3.75 s, rounded up
    assert lead() == 4.0
    assert not lead.took(3.0)  # as long again: no change
    assert not lead.took(1.0)
    assert lead() == 4.0


def test_a_claim_asked_before_the_registry_came_back_teaches_nothing() -> None:
    clock = Clock()
    lead = ClaimLead(lambda: 1, clock)
    lead.disconnected()
    clock.now += 1.2
    assert not lead.took(1.1)  # answered before the coordinator heard of the reconnection
    clock.now += 3.8
    lead.reconnected()
    clock.now += 0.1
    assert not lead.took(1.5)  # asked 1.4 s before the reconnection: the outage's time
    assert lead() == pytest.approx(0.0404)
    clock.now += 1
    assert lead.took(0.2)  # asked after it: learned, with a quarter to spare
    assert lead() == pytest.approx(0.25)


def test_fast_claims_leave_the_estimate() -> None:
    lead = ClaimLead(lambda: 1000, Clock())
    assert not lead.took(0.1)  # 0.125 s of room is under the 0.44 s estimate
    assert lead() == pytest.approx(0.44)


def test_a_small_learned_lead_is_not_rounded_to_half_seconds() -> None:
    """Every-second jobs whose items run 0.6 s must not be claimed 0.5 s ahead because
    one claim took 0.1 s."""
    lead = ClaimLead(lambda: 1, Clock())
    assert not lead.took(0.1)  # it grew by less than 0.1 s: not worth a pass over the jobs
    assert lead() == pytest.approx(0.125)
    assert lead.took(0.2)
    assert lead() == pytest.approx(0.25)


def test_a_learned_lead_halves_every_ten_minutes_and_is_capped() -> None:
    clock = Clock()
    lead = ClaimLead(lambda: 1000, clock)
    lead.took(3.2)  # 4.0 s wanted
    clock.now += 600
    assert lead() == 2.0
    clock.now += 6000
    assert lead() == pytest.approx(0.44)  # decayed under the estimate: the estimate again
    lead.took(60.0)
    assert lead() == 10.0


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
    monkeypatch: pytest.MonkeyPatch, period: int, duration: float, lead: float, until: float
) -> tuple[list[float], Cluster]:
    """A simulated worker with one single-item job of ``period`` seconds whose item runs
    ``duration`` seconds, claiming ``lead`` seconds ahead from its fourth second on: the
    starts from its sixth second to ``until``, and the cluster."""
    jobs = [JobSpec("job0", items=1, period=period, failover=False, misfire=True)]
    cluster = Cluster(jobs, instances=1, session_timeout=2.0, rng=random.Random(1))
    monkeypatch.setattr(cluster, "duration", lambda _member: duration)
    member = cluster.members[0]
    cluster.world.at(EPOCH + 0.3, lambda: cluster.start(member))
    cluster.world.run_until(EPOCH + 3.5)  # started, first layout written
    runtime = member.runtimes["job0"]
    runtime.lead = lambda: lead
    runtime.firing.timer.relead()
    cluster.world.run_until(EPOCH + until)
    return [run.start for run in cluster.ledger.runs if run.start >= EPOCH + 6], cluster


def test_a_learned_lead_waits_for_an_item_still_running_instead_of_skipping_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Items of 1.3 s every 2 s, a lead of 1 s: claimed 1 s ahead, each fire would find
    the last one's item running, and skip it as a misfire. The claim waits for the item
    instead (down to the lead a process has before it learns any, here 0.2 s)."""
    monkeypatch.setattr(firetimer, "BUSY_CLAIM_LEAD_SECONDS", 0.2)
    later, cluster = one_item_runs(monkeypatch, period=2, duration=1.3, lead=1.0, until=15)
    assert len(later) == 5
    assert all(start % 2 == 0 for start in later)  # on their seconds
    assert not [skip for skip in cluster.ledger.skips if skip.at >= EPOCH + 6]


def test_an_item_skipped_ahead_of_its_second_is_re_run_on_that_second_not_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every second, items of 0.6 s, a learned lead of 0.5 s: each claim finds the last
    run still going and skips it as a misfire. Its re-run used to start as soon as that
    run ended, 0.4 s before the second it stood for: every item ran twice every other
    second (the fault-injection suite's calm fires, in CI). It starts on that second."""
    later, _ = one_item_runs(monkeypatch, period=1, duration=0.6, lead=0.5, until=15.5)
    assert later == [EPOCH + second for second in range(6, 16)]  # each second, on it
