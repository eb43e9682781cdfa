"""Issue 12's reproduced failures, one named test each (cases 4-6 are fault points: see
``tests/test_fault_points.py``, which aims a lost request at exactly that step).

In-process instances share one embedded server, each with its own session; case 3 uses
real worker processes on the suite's ZooKeeper, because it needs a process to die.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from shardcron.config.job import JobConfig
from shardcron.coordination.paths import JobPaths
from shardcron.model import ShardingContext
from shardcron.registry import SessionState
from shardcron.registry.memory import MemoryRegistry
from shardcron.registry.memoryserver import MemoryServer
from shardcron.registry.zookeeper import ZooKeeperRegistry
from shardcron.scheduler.process import Scheduler
from shardcron.testing.zookeeper import ZooKeeperServer, unique_namespace
from tests.cluster import Run, overlaps
from tests.conftest import zk_config
from tests.helpers import wait_until
from tests.invariants import find_stale
from tests.workers import workers

A, B, C = (f"127.0.0.{n}@-@{100 + n}" for n in range(1, 4))


@dataclass
class Ledger:
    """Every item run with its end and whether its claim still held when it ended."""

    hold: float = 0.0
    runs: list[Run] = field(default_factory=list)
    current: list[bool] = field(default_factory=list)
    started: dict[str, set[int]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def job_for(self, instance: str) -> Callable[[ShardingContext], None]:
        def job(ctx: ShardingContext) -> None:
            start = time.time()
            with self.lock:
                self.started.setdefault(instance, set()).add(ctx.sharding_item)
            if self.hold:
                time.sleep(self.hold)  # the work itself, not synchronisation
            still = ctx.claim_is_current()
            run = Run(
                instance, ctx.sharding_item, start, time.time(), ctx.fencing_token, ctx.source
            )
            with self.lock:
                self.runs.append(run)
                self.current.append(still)
                self.started[instance].discard(ctx.sharding_item)

        return job

    def running_on(self, instance: str) -> set[int]:
        with self.lock:
            return set(self.started.get(instance, ()))

    def ended(self) -> list[Run]:
        with self.lock:
            return list(self.runs)


class Embedded:
    """Schedulers of one job on one embedded server, each with its own session."""

    def __init__(self, config: JobConfig, ledger: Ledger) -> None:
        self.server = MemoryServer()
        self.config = config
        self.ledger = ledger
        self.schedulers: dict[str, Scheduler] = {}
        self.admin = MemoryRegistry(self.server, "reg")
        self.admin.start()

    def start(self, instance: str) -> Scheduler:
        scheduler = Scheduler(MemoryRegistry(self.server, "reg"), instance_id=instance)
        scheduler.add_job(self.config, self.ledger.job_for(instance))
        scheduler.start()
        self.schedulers[instance] = scheduler
        return scheduler

    def close(self) -> None:
        for scheduler in self.schedulers.values():
            scheduler.stop(grace=5)


@contextmanager
def embedded(config: JobConfig, ledger: Ledger) -> Iterator[Embedded]:
    made = Embedded(config, ledger)
    try:
        yield made
    finally:
        made.close()


def test_case1_graceful_stop_past_the_grace_keeps_the_claims_until_the_items_return() -> None:
    ledger = Ledger(hold=1.5)
    config = JobConfig(job_name="slow", cron="* * * * * ?", sharding_total_count=2, failover=True)
    with embedded(config, ledger) as e:
        a, _ = e.start(A), e.start(B)
        wait_until(lambda: ledger.running_on(A), what="an item running on A")
        still = a.stop(grace=0.2)
        assert still and still["slow"], still  # told which items outlived the grace
        wait_until(lambda: not ledger.running_on(A), timeout=5, what="A's items to return")
        moment = time.time()
        wait_until(
            lambda: {r.item for r in ledger.ended() if r.start > moment} == {0, 1},
            timeout=10,
            what="B running every item after A left",
        )
        del e.schedulers[A]
    assert overlaps(ledger.ended()) == []
    assert all(ledger.current)  # no run ever lost its claim to another


def test_case2_operator_shutdown_with_failover_on_never_fails_over_a_live_run() -> None:
    ledger = Ledger(hold=1.2)
    config = JobConfig(job_name="shut", cron="* * * * * ?", sharding_total_count=4, failover=True)
    paths = JobPaths("shut")
    with embedded(config, ledger) as e:
        e.start(A), e.start(B)
        wait_until(lambda: len(ledger.running_on(A)) >= 1, what="A running items")
        e.admin.delete(paths.instance(A))  # what the console's and Java API's shutdown write
        wait_until(lambda: "shut" not in e.schedulers[A].runtimes, timeout=5, what="A detached")
        moment = time.time()
        wait_until(
            lambda: {r.item for r in ledger.ended() if r.start > moment} == {0, 1, 2, 3},
            timeout=10,
            what="B running every item",
        )
        assert not e.admin.children(paths.failover_items)
    assert overlaps(ledger.ended()) == []
    assert all(ledger.current)  # the stale run's completion deleted no newer claim


def test_case2b_a_shut_down_instance_keeps_its_run_until_its_session_ends_then_it_fails_over() -> (
    None
):
    """Whether a claim's holder lives is its lease's to say, not its instance node's: an
    operator's shutdown removes only the instance node, and the run keeps its claim, even
    when another instance's death has the leader check every claim. Once the holder's
    session ends too, the leader fails the item over at once, while the old run still goes
    (the frozen-process case: its claim is no longer current)."""
    ledger = Ledger(hold=4.0)
    config = JobConfig(job_name="shut", cron="* * * * * ?", sharding_total_count=3, failover=True)
    paths = JobPaths("shut")
    with embedded(config, ledger) as e:
        e.start(B)  # the leader throughout
        wait_until(lambda: e.admin.get(paths.election_instance) == B.encode(), what="B leads")
        e.start(A), e.start(C)
        item = wait_until(lambda: sorted(ledger.running_on(A)), what="A running")[0]
        other = wait_until(lambda: sorted(ledger.running_on(C)), what="C running")[0]
        e.admin.delete(paths.instance(A))  # the operator's shutdown
        e.schedulers[C].registry.close()  # C dies (its session ends): B checks every claim
        wait_until(lambda: other in ledger.running_on(B), what="B taking C's item over")
        assert e.admin.get(paths.running(item)) == A.encode()  # A's run keeps its claim
        assert str(item) not in e.admin.children(paths.failover_items)
        e.server.expire(e.schedulers[A].registry.session_id)
        wait_until(lambda: item in ledger.running_on(B), what="B taking A's item over")
        assert item in ledger.running_on(A)  # taken over while the old run still goes

        def old_and_new() -> tuple[Run, Run] | None:
            runs = [r for r in ledger.ended() if r.item == item]
            old = next((r for r in runs if r.instance == A), None)
            new = [r for r in runs if old and r.instance == B and r.start > old.start]
            return (old, min(new, key=lambda r: r.start)) if old and new else None

        old, new = wait_until(old_and_new, timeout=10, what="both runs to end")
    assert old.token < new.token and not ledger.current[ledger.ended().index(old)]


def test_case3_failover_switched_off_then_the_owner_dies_leaves_nothing_stuck(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    paths = JobPaths("ledger")
    admin = ZooKeeperRegistry(zk_config(zookeeper, unique_namespace()))
    admin.start()
    jobs = {
        "ledger": {
            "callable": "tests.jobs:ledger",
            "cron": "* * * * * ?",
            "shardingTotalCount": 2,
            "failover": True,
            "misfire": True,
        }
    }
    try:
        with workers(tmp_path, zookeeper.connect_string, admin.namespace, jobs, 2000, 2.5) as w:
            w.start(A), w.start(B)
            victim = wait_until(
                lambda: next((r["instance"] for r in w.records() if r["phase"] == "start"), None),
                timeout=20,
                what="a first item start",
            )
            raw = admin.get(paths.config)
            assert raw is not None
            stored = JobConfig.from_yaml(raw.decode(), "ledger")
            admin.put(paths.config, stored.with_changes(failover=False).to_yaml().encode())
            w.workers[victim].kill(signal.SIGKILL)
            killed = time.time()
            wait_until(
                lambda: {r.item for r in w.runs() if r.start > killed + 0.5} == {0, 1},
                timeout=20,
                what="both items running again after the death",
            )
            for worker in w.workers.values():
                if worker.alive():
                    worker.kill(signal.SIGTERM)
            wait_until(lambda: not any(x.alive() for x in w.workers.values()), timeout=15)
        assert find_stale(admin, paths, 2) == []
    finally:
        admin.close()


def test_case7_system_exit_and_keyboard_interrupt_fail_their_item_only() -> None:
    calls: list[int] = []

    def job(ctx: ShardingContext) -> None:
        calls.append(ctx.sharding_item)
        raise (SystemExit(3) if ctx.sharding_item == 0 else KeyboardInterrupt())

    server = MemoryServer()
    scheduler = Scheduler(MemoryRegistry(server, "exit"), instance_id=A)
    scheduler.add_job(JobConfig(job_name="exits", cron="* * * * * ?", sharding_total_count=2), job)
    scheduler.start()
    try:
        wait_until(
            lambda: calls.count(0) >= 3 and calls.count(1) >= 3,
            timeout=10,
            what="three fires of both items",
        )
        admin = MemoryRegistry(server, "exit")
        admin.start()
        wait_until(
            lambda: not [i for i in (0, 1) if admin.stat(JobPaths("exits").running(i))],
            what="no claim left between fires",
        )
    finally:
        scheduler.stop(grace=2)


def test_case8_shrinking_the_count_keeps_in_flight_claims_and_drops_dead_queue_entries() -> None:
    ledger = Ledger(hold=1.5)
    config = JobConfig(job_name="count", cron="* * * * * ?", sharding_total_count=4, failover=True)
    paths = JobPaths("count")
    with embedded(config, ledger) as e:
        e.start(A)
        wait_until(lambda: ledger.running_on(A) == {0, 1, 2, 3}, what="all items running")
        e.admin.put(paths.failover_item(3), b"")  # a queue entry left for an item that will go
        e.admin.put(paths.config, config.with_changes(sharding_total_count=2).to_yaml().encode())
        wait_until(lambda: e.admin.stat(paths.failover_item(3)) is None, what="queue entry dropped")
        assert e.admin.stat(paths.running(3)) is not None  # the run in flight keeps its claim
        wait_until(lambda: not ledger.running_on(A) & {2, 3}, timeout=5, what="the old runs to end")
        wait_until(
            lambda: paths.item(3).rsplit("/", 1)[1] not in e.admin.children(paths.sharding),
            timeout=5,
            what="item 3 gone once its run ended",
        )
        moment = time.time()
        wait_until(
            lambda: {r.item for r in ledger.ended() if r.start > moment} == {0, 1},
            timeout=10,
            what="fires of the two remaining items",
        )
    assert all(ledger.current)


def test_case9_a_removed_job_can_be_added_again_and_suspension_stops_streaming() -> None:
    server = MemoryServer()
    runs: list[int] = []
    scheduler = Scheduler(MemoryRegistry(server, "again"), instance_id=A)
    config = JobConfig(job_name="again", cron="* * * * * ?", sharding_total_count=1)
    scheduler.add_job(config, lambda ctx: runs.append(ctx.sharding_item))
    scheduler.start()
    admin = MemoryRegistry(server, "again")
    admin.start()
    try:
        wait_until(lambda: runs, what="a first run")
        admin.delete("/again", recursive=True)  # `shardcron remove`
        wait_until(lambda: "again" not in scheduler.runtimes, what="the job detached")
        scheduler.add_job(config, lambda ctx: runs.append(10 + ctx.sharding_item))
        wait_until(lambda: 10 in runs, timeout=10, what="the job running again")
        runtime = scheduler.runtimes["again"]
        assert runtime.firing.keep_going()
        done = threading.Event()

        def suspend() -> None:
            runtime.on_session(SessionState.SUSPENDED)
            done.set()

        scheduler.coordinate(suspend)
        assert done.wait(5)
        assert (
            not runtime.firing.keep_going()
        )  # streaming DATAFLOW stops while the registry is away
    finally:
        scheduler.stop(grace=2)
