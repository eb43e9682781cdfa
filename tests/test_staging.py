"""Fires claimed ahead of their second are staged: the timer starts their items.

The simulated cluster runs on virtual time, so "between the claim and the second" is a
moment a test can stop at; the last test runs the real scheduler.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence

from shardcron.coordination.firing import STOPPED
from shardcron.coordination.paths import JobPaths
from shardcron.registry import Answer, Create, Op
from shardcron.registry.memory import MemoryRegistry
from shardcron.scheduler.process import Scheduler
from shardcron.simulation import checks
from shardcron.simulation.cluster import Cluster, JobSpec, Member
from shardcron.simulation.world import EPOCH
from tests.helpers import wait_until

PATHS = JobPaths("job0")
SECOND = EPOCH + 4  # the fire the tests catch between its claim and its second


def _staged() -> tuple[Cluster, Member]:
    """One instance of an every-second job of two items, stopped at the moment its fire
    of SECOND is claimed (50 ms ahead) and not started."""
    jobs = [JobSpec("job0", items=2, period=1, failover=False, misfire=True)]
    cluster = Cluster(jobs, instances=1, session_timeout=2.0, rng=random.Random(1))
    cluster.calm = True  # items of 20-150 ms: the fire before has ended
    member = cluster.members[0]
    cluster.world.at(EPOCH + 0.3, lambda: cluster.start(member))
    cluster.world.run_until(SECOND - 0.01)
    assert all(cluster.peek(PATHS.running(i)) is not None for i in (0, 1))
    assert not [run for run in cluster.ledger.runs if run.start >= SECOND - 0.5]
    return cluster, member


def _runs_at(cluster: Cluster, second: float) -> list[int]:
    return sorted(r.item for r in cluster.ledger.runs if second <= r.start < second + 0.5)


def test_a_staged_fire_starts_on_its_second() -> None:
    cluster, _ = _staged()
    cluster.world.run_until(SECOND + 0.5)
    assert _runs_at(cluster, SECOND) == [0, 1]
    assert all(run.start == SECOND for run in cluster.ledger.runs if run.start >= SECOND)


def test_a_stop_before_the_second_hands_a_staged_claim_back_and_runs_nothing() -> None:
    cluster, member = _staged()
    cluster.graceful_stop(member)
    cluster.world.run_until(SECOND + 0.5)
    assert _runs_at(cluster, SECOND) == []
    assert [cluster.peek(PATHS.running(i)) for i in (0, 1)] == [None, None]
    # Handed back, as a claim made ahead: recorded for its fire, with no misfire re-run
    # (the instance that gets the items runs the fires after it).
    assert [(s.items, s.reason, s.misfire, s.fire) for s in cluster.ledger.skips] == [
        ((0, 1), STOPPED, False, SECOND)
    ]
    assert member.runtimes["job0"].idle.is_set()


def test_a_session_lost_before_the_second_starts_nothing_and_flags_the_misfire() -> None:
    cluster, member = _staged()
    cluster.expire(member)
    cluster.world.run_until(SECOND + 0.5)
    assert _runs_at(cluster, SECOND) == []
    assert [(s.items, s.misfire) for s in cluster.ledger.skips if s.at >= SECOND] == [
        ((0, 1), True)
    ]
    assert checks.check_overlaps(cluster.ledger) == []


def test_a_connection_lost_before_the_second_starts_nothing_before_the_news_is_read() -> None:
    """The worker that would start a staged fire asks the connection itself: here the
    SUSPENDED reaches the coordinator half a second late."""
    cluster, member = _staged()
    member.events.lag = 0.5
    cluster.partition(member, 2.0)
    cluster.world.run_until(SECOND + 0.4)
    assert _runs_at(cluster, SECOND) == []
    cluster.world.run_until(SECOND + 0.6)
    assert [(s.items, s.misfire) for s in cluster.ledger.skips if s.at >= SECOND] == [
        ((0, 1), True)
    ]


def test_items_claimed_ahead_start_on_their_second_while_the_coordinator_is_busy() -> None:
    """The timer hands a staged fire's items to the workers itself: a coordinator busy at
    the second (a herd's thousands of other fires) does not hold them back."""
    registry = MemoryRegistry()
    scheduler = Scheduler(registry, instance_id="127.0.0.1@-@1")
    started = threading.Event()
    waited: list[bool] = []
    send = registry.send_transaction

    def busy() -> None:  # queued on the coordinator right behind the claim's answer
        waited.append(started.wait(timeout=10))

    def claim_then_busy(ops: Sequence[Op], answer: Callable[[Answer], None]) -> None:
        ahead = time.time() % 1 > 0.5  # this claim is for the coming second
        claims = any(isinstance(op, Create) and op.path.endswith("/running") for op in ops)
        if ahead and claims and not waited:
            started.clear()
        send(ops, answer)
        if ahead and claims and not waited:
            scheduler.coordinate(busy)

    registry.send_transaction = claim_then_busy  # type: ignore[method-assign]
    scheduler.job("* * * * * ?", name="tick", sharding_total_count=1)(lambda _: started.set())
    scheduler.start()
    try:
        wait_until(lambda: waited, timeout=15, what="the coordinator's busy spell")
    finally:
        scheduler.stop(grace=5)
    assert waited == [True]


def test_a_herd_whose_first_items_end_while_others_wait_completes_every_fire() -> None:
    """300 staged fires due in the same second on 2 threads: their ends are held until
    the last item has started (startsfirst), then complete their fires, second after
    second."""
    scheduler = Scheduler(MemoryRegistry(), instance_id="127.0.0.1@-@1", max_workers=2)
    runs: dict[str, int] = {}

    def job(name: str) -> Callable[[object], None]:
        def run(_ctx: object) -> None:
            runs[name] = runs.get(name, 0) + 1

        return run

    names = [f"herd{n}" for n in range(300)]
    for name in names:
        scheduler.job("* * * * * ?", name=name, sharding_total_count=1)(job(name))
    scheduler.start()
    try:
        wait_until(
            lambda: all(runs.get(name, 0) >= 3 for name in names),
            timeout=20,
            what="three fires of every job",
        )
    finally:
        scheduler.stop(grace=5)
