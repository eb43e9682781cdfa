"""Misfire, reconcile and the time-diff check, with several instances on a real ZooKeeper."""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence

import pytest

from shardcron.config import plugins
from shardcron.config.job import JobConfig
from shardcron.coordination.events import Event, ItemsSkipped
from shardcron.coordination.misfires import MissedFires, RepeatedLines
from shardcron.coordination.paths import JobPaths
from shardcron.coordination.strategies import register_strategy
from shardcron.errors import ClockSkewError, TransactionError
from shardcron.model import ShardingContext
from shardcron.registry import Answer, Create, Delete, Op, OpResult
from shardcron.registry.memory import MemoryRegistry
from shardcron.scheduler.process import Scheduler
from shardcron.testing.zookeeper import ZooKeeperServer
from tests.cluster import Recorder, Run, cluster, overlaps
from tests.helpers import wait_until

A, B = "127.0.0.1@-@4001", "127.0.0.2@-@4002"


def job(name: str, items: int, cron: str = "* * * * * ?", **settings: object) -> JobConfig:
    return JobConfig(job_name=name, cron=cron, sharding_total_count=items, **settings)  # type: ignore[arg-type]


def test_a_run_that_outlasts_the_interval_misfires_then_reruns_once(
    zookeeper: ZooKeeperServer,
) -> None:
    recorder = Recorder(hold=2.5)
    with cluster(zookeeper, job("overrun", 1), recorder) as c:
        c.start(A)
        wait_until(lambda: len(recorder.runs) >= 4, timeout=20, what="4 runs")
        runs = sorted(recorder.runs, key=lambda r: r.start)
    sources = [r.source for r in runs]
    assert sources[0] == "NORMAL_TRIGGER"
    assert "MISFIRE" in sources[1:]
    for before, after in itertools.pairwise(runs):
        assert after.start >= before.end  # never two at once
        # Two or three fires were missed while it ran, yet it runs again only once.
        assert after.start - before.end < 1.1


def test_without_misfire_skipped_fires_are_just_skipped(zookeeper: ZooKeeperServer) -> None:
    recorder = Recorder(hold=1.5)
    with cluster(zookeeper, job("nomisfire", 1, misfire=False), recorder) as c:
        c.start(A)
        wait_until(lambda: len(recorder.runs) >= 3, timeout=20, what="3 runs")
    assert {r.source for r in recorder.runs} == {"NORMAL_TRIGGER"}
    assert all(abs(r.start - round(r.start)) < 0.3 for r in recorder.runs)  # only on fire times


def test_item_still_running_on_its_old_owner_misfires_on_the_new_one(
    zookeeper: ZooKeeperServer,
) -> None:
    recorder = Recorder(hold=6)
    paths = JobPaths("moved")
    with cluster(zookeeper, job("moved", 2, cron="0/4 * * * * ?"), recorder) as c:
        c.start(A)
        wait_until(lambda: c.admin.stat(paths.running(0)) is not None, timeout=10, what="A runs")
        c.start(B)
        first_b: Run = wait_until(
            lambda: next((r for r in recorder.runs if r.instance == B), None),
            timeout=25,
            what="B to run its new item",
        )
        a_runs = [r for r in recorder.runs if r.instance == A and r.item == first_b.item]
    assert first_b.source == "MISFIRE"
    assert a_runs and first_b.start >= max(r.end for r in a_runs)
    assert overlaps(recorder.runs) == []


def test_reconcile_reshards_items_held_by_a_gone_instance(zookeeper: ZooKeeperServer) -> None:
    recorder = Recorder()
    paths = JobPaths("reconcile")
    with cluster(zookeeper, job("reconcile", 2), recorder) as c:
        leader = c.start(A)
        c.start(B)
        recorder.owners_in_fire(time.time(), 2)
        runtime = leader.runtimes["reconcile"]
        assert runtime.reconcile() is False  # nothing to heal
        c.admin.put(paths.item_instance(1), b"10.9.9.9@-@1")  # an owner that is gone
        wait_until(lambda: runtime.cache.get(paths.item_instance(1)) == b"10.9.9.9@-@1")
        assert runtime.reconcile() is True
        healed = time.time()
        recorder.owners_in_fire(healed + 1, 2)
        assert c.admin.get(paths.item_instance(1)) in (A.encode(), B.encode())


class SkewedRegistry(MemoryRegistry):
    """An embedded registry whose clock runs two minutes ahead of this host's."""

    reads = 0

    def server_time(self, path: str) -> float:
        self.reads += 1
        return super().server_time(path) + 120


def test_clock_skew_beyond_tolerance_is_reported_and_checked_rarely() -> None:
    errors: list[BaseException] = []
    runs: list[int] = []

    def handler(job_name: str, ctx: ShardingContext | None, error: BaseException) -> None:
        errors.append(error)

    registry = SkewedRegistry()
    scheduler = Scheduler(registry, instance_id=A, error_handler=handler)
    scheduler.add_job(job("skew", 1, max_time_diff_seconds=60), lambda ctx: runs.append(1))
    scheduler.start()
    try:
        wait_until(lambda: len(runs) >= 3, timeout=10, what="3 fires")
    finally:
        scheduler.stop()
    assert errors and isinstance(errors[0], ClockSkewError)
    assert "maxTimeDiffSeconds=60" in str(errors[0])
    assert registry.reads == 1  # measured once, not on every fire


def test_clock_skew_with_a_throwing_handler_aborts_fires() -> None:
    runs: list[int] = []
    errors: list[BaseException] = []

    def throw(job_name: str, ctx: ShardingContext | None, error: BaseException) -> None:
        errors.append(error)
        raise error

    scheduler = Scheduler(SkewedRegistry(), instance_id=A, error_handler=throw)
    scheduler.add_job(job("skewthrow", 1, max_time_diff_seconds=60), lambda ctx: runs.append(1))
    scheduler.start()
    try:
        wait_until(lambda: len(errors) >= 2, timeout=10, what="2 aborted fires")
    finally:
        scheduler.stop()
    assert runs == []


class RecordingRegistry(MemoryRegistry):
    """An embedded registry that keeps every transaction it was sent and the refusals."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[list[Op]] = []
        self.refused: list[TransactionError] = []

    def transaction(self, ops: Sequence[Op]) -> list[OpResult]:
        self.sent.append(list(ops))
        try:
            return super().transaction(ops)
        except TransactionError as exc:
            self.refused.append(exc)
            raise


def test_fires_skipped_before_the_flag_is_written_write_it_once_and_rerun_once() -> None:
    """Two fires come while the item runs, in one coordinator turn (as on a worker that
    lags): its misfire flag is written once, never refused as already there (each refusal
    costs the whole group commit of the process another round trip), and it re-runs once.
    (Taking a flag the cache still shows after it was taken is refused as gone, and
    dropped: that one can happen, and never re-runs the item.)"""
    registry = RecordingRegistry()
    paths = JobPaths("lagging")
    release = threading.Event()
    runs: list[str] = []

    def work(ctx: ShardingContext) -> None:
        runs.append(ctx.source.name)
        release.wait(10)

    scheduler = Scheduler(registry, instance_id=A)
    scheduler.add_job(job("lagging", 1, cron="0 0 0 1 1 ? 2099"), work)
    scheduler.start()
    try:
        scheduler.trigger("lagging")
        wait_until(lambda: registry.stat(paths.running(0)) is not None, 10, "the first run")
        gate = threading.Event()

        def busy() -> None:  # the coordinator is busy while both fires come
            gate.wait(10)

        scheduler.coordinate(busy)
        scheduler.trigger("lagging")
        scheduler.trigger("lagging")
        gate.set()
        wait_until(lambda: registry.stat(paths.misfire(0)) is not None, 10, "the flag")
        release.set()
        wait_until(lambda: len(runs) == 2, 10, "the re-run")
        wait_until(lambda: registry.stat(paths.running(0)) is None, 10, "the re-run's end")
    finally:
        release.set()
        scheduler.stop()
    flags = [op for ops in registry.sent for op in ops if op == Create(paths.misfire(0))]
    assert len(flags) == 1
    assert [e for e in registry.refused if isinstance(e.op, Create)] == []
    assert runs == ["NORMAL_TRIGGER", "MISFIRE"]


class HeldCompletions(RecordingRegistry):
    """Keeps the answers of completions (transactions deleting a ``running`` node) until
    :meth:`release`: a worker whose registry lags behind its runs."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[tuple[list[Op], Callable[[Answer], None]]] = []

    def send_transaction(self, ops: Sequence[Op], answer: Callable[[Answer], None]) -> None:
        if any(isinstance(op, Delete) and op.path.endswith("/running") for op in ops):
            self.held.append((list(ops), answer))
        else:
            super().send_transaction(ops, answer)

    def release(self) -> None:
        held, self.held = self.held, []
        for ops, answer in held:
            super().send_transaction(ops, answer)


@pytest.mark.parametrize("by", ["scheduler", "operator"])
def test_a_fire_due_while_the_last_runs_completion_is_on_its_way_runs_after_it(by: str) -> None:
    """The run of the last fire has returned, but its completion is not applied yet (an
    overloaded worker, or a run that ends just before the second). The next fire is not
    a misfire: no flag is written, nothing is skipped, and it runs as soon as the
    completion is applied, as its own fire. Skipped and re-run instead, an overloaded
    worker of 5,000 jobs spent a third of its runs and two writes a fire on misfires.
    An operator's trigger (``shardcron trigger``, a console) in that window is not
    dropped as "still running" either: the operator saw the run end."""
    registry = HeldCompletions()
    paths = JobPaths("relayed")
    runs: list[str] = []
    events: list[Event] = []
    scheduler = Scheduler(registry, instance_id=A, observers=[events.append])
    scheduler.add_job(
        job("relayed", 1, cron="0 0 0 1 1 ? 2099"), lambda ctx: runs.append(ctx.source.name)
    )
    scheduler.start()
    try:
        scheduler.trigger("relayed")
        wait_until(lambda: registry.held, 10, "the first run's completion")
        if by == "scheduler":
            scheduler.trigger("relayed")
        else:
            registry.create(paths.trigger(A))
            wait_until(lambda: registry.stat(paths.trigger(A)) is None, 10, "the trigger taken")
        turn = threading.Event()
        scheduler.coordinate(turn.set)  # after the second fire
        assert turn.wait(10)
        assert runs == ["NORMAL_TRIGGER"]  # the second waits for the completion
        registry.release()
        wait_until(lambda: registry.held, 10, "the second run's completion")
        registry.release()
        wait_until(lambda: registry.stat(paths.running(0)) is None, 10, "the second's end")
    finally:
        registry.release()
        scheduler.stop()
    assert runs == ["NORMAL_TRIGGER", "NORMAL_TRIGGER"]
    assert [op for ops in registry.sent for op in ops if op == Create(paths.misfire(0))] == []
    assert registry.refused == []
    assert [e for e in events if isinstance(e, ItemsSkipped)] == []


@pytest.mark.parametrize("stalled", ["coordinator", "timer"])
def test_a_stalled_worker_logs_its_missed_fires_in_one_line(
    stalled: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker stalled for seconds misses the fires of every job at once; a warning per
    job (thousands a minute on a big worker) would add to the load that stalled it: one
    line for the process, and every job fires again after the stall. A stalled
    coordinator (an overload) runs each job's first fire late and misses the ones after
    it; a stalled timer (a long garbage collection, a suspended machine) misses them all."""
    jobs = [f"stalled{n}" for n in range(20)]
    runs: dict[str, list[float]] = {name: [] for name in jobs}
    scheduler = Scheduler(MemoryRegistry(), instance_id=A)
    for name in jobs:
        scheduler.add_job(job(name, 1), lambda ctx: runs[ctx.job_name].append(time.time()))
    scheduler.start()
    try:
        wait_until(lambda: all(runs.values()), 10, "a first fire of every job")
        stall_ends = time.time() + 3.5
        caplog.set_level(logging.WARNING, logger="shardcron.coordination.misfires")
        if stalled == "coordinator":
            scheduler.coordinate(lambda: time.sleep(3.5))
        else:
            with scheduler._timers.lock:  # the timer thread waits for its lock
                time.sleep(3.5)
        wait_until(
            lambda: all(any(t > stall_ends for t in r) for r in runs.values()),
            10,
            "a fire of every job after the stall",
        )
    finally:
        scheduler.stop()
    missed = [r.getMessage() for r in caplog.records if "missed by" in r.getMessage()]
    assert len(missed) == 1, missed
    assert missed[0].startswith("job stalled")


def test_a_fire_due_while_the_coordinator_is_busy_runs_late_not_never(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The timer releases a fire on time but the coordinator is still busy (a herd: the
    other jobs of the same second). That fire runs late; only a stall of the timer
    itself (the test above) makes it missed. A job that fires once a minute would
    otherwise lose a whole minute to one busy second."""
    runs: list[float] = []
    due = float(math.ceil(time.time()) + 3)
    scheduler = Scheduler(MemoryRegistry(), instance_id=A)
    scheduler.add_job(
        job("minutely", 1, f"{int(due) % 60} * * * * ?"), lambda ctx: runs.append(time.time())
    )
    scheduler.start()
    caplog.set_level(logging.WARNING, logger="shardcron.coordination.misfires")
    try:
        wait_until(lambda: time.time() >= due - 1.0, 5, "a second before the fire")
        busy_until = due + 1.8  # past the fire's second by more than MAX_LATENESS_SECONDS
        scheduler.coordinate(lambda: time.sleep(busy_until - time.time()))
        wait_until(lambda: runs, 5, "the fire, late")
    finally:
        scheduler.stop()
    assert len(runs) == 1 and runs[0] >= busy_until
    assert not [r for r in caplog.records if "missed by" in r.getMessage()]


def test_a_fire_that_holds_the_coordinator_does_not_drop_the_fires_after_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A leader writing a big first layout holds its coordinator for seconds, inside the
    fire that asked for the layout. The next fire was released on time meanwhile: it runs
    late, as any fire of a busy second, instead of being dropped as missed (10,000 items
    over 50 instances lost the leader's share of a whole fire that way)."""
    held: list[float] = []

    def slow_first(instances: Sequence[str], job_name: str, total: int) -> dict[str, list[int]]:
        if not held:
            held.append(time.time())
            time.sleep(2.5)  # past the next fire's second by more than MAX_LATENESS_SECONDS
        return {instances[0]: list(range(total)), **{i: [] for i in instances[1:]}}

    register_strategy("SLOW_FIRST_LAYOUT", slow_first)
    runs: list[float] = []
    scheduler = Scheduler(MemoryRegistry(), instance_id=A)
    scheduler.add_job(
        job("held", 1, job_sharding_strategy_type="SLOW_FIRST_LAYOUT"),
        lambda ctx: runs.append(time.time()),
    )
    caplog.set_level(logging.WARNING, logger="shardcron.coordination.misfires")
    scheduler.start()
    try:
        wait_until(lambda: held and len(runs) >= 3, 10, "three runs after the held fire")
    finally:
        scheduler.stop()
        plugins.unregister(plugins.Kind.STRATEGY, "SLOW_FIRST_LAYOUT")
    assert not [r for r in caplog.records if "missed by" in r.getMessage()]
    # The fire after the held one ran as soon as the coordinator was free, not a second on.
    assert runs[1] - runs[0] < 0.9, runs


def test_missed_fires_are_counted_across_jobs_until_the_next_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    missed = MissedFires()
    with caplog.at_level(logging.WARNING, logger="shardcron.coordination.misfires"):
        missed.note("a", 100.0, 1.5, now=101.5)  # the first: said at once
        missed.note("b", 100.0, 1.6, now=101.6)
        missed.note("a", 101.0, 1.1, now=102.1)
        missed.note("c", 130.0, 1.2, now=161.6)  # a minute after the line: said again
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "job a: fire of 100.0 missed by 1.5s",
        (
            "job c: fire of 130.0 missed by 1.2s (3 fires of 3 job(s) missed since the last "
            "line: a stalled or overloaded process; if it recurs, spread the jobs over more "
            "workers)"
        ),
    ]


def test_jobs_skipping_at_every_fire_log_a_line_a_minute_per_reason() -> None:
    """For the whole process: 5,000 overloaded jobs logged 10,000 lines a minute when
    each job had its own minute."""
    lines = RepeatedLines()
    assert lines.also("still running", "a", 100.0) == ""  # the first: said at once
    assert lines.also("still running", "a", 101.0) is None
    assert lines.also("misfired", "a", 101.0) == ""  # another kind of line: its own minute
    assert lines.also("still running", "b", 102.0) is None  # another job: the same minute
    assert lines.also("still running", "b", 103.0) is None
    assert lines.also("still running", "c", 160.5) == (
        " (3 more of 2 job(s) since the last such line)"
    )
    assert lines.also("still running", "a", 161.0) is None
    assert lines.also("misfired", "c", 161.0) == ""


def test_a_fire_of_an_item_held_by_a_failover_run_is_skipped_then_rerun_once_it_ends() -> None:
    """Issue 55 case 3: A owns item 0 while B still runs it as a failover run. A's fires
    of item 0 are skipped, with a record and a misfire flag, and the item runs once more
    as a misfire when B's failover run ends: not dropped silently."""
    paths = JobPaths("held")
    config = JobConfig(job_name="held", sharding_total_count=1, failover=True)  # no cron
    other = MemoryRegistry()
    other.start()
    registry = MemoryRegistry(other.server)
    other.put(paths.config, config.to_yaml().encode())
    other.put(paths.item_instance(0), A.encode())
    other.create(paths.lease(B), ephemeral=True)  # B lives, and runs item 0 as failover
    failover_marks = (paths.failover(0), paths.failovering(0))
    other.transaction(
        [
            Create(paths.running(0), B.encode()),
            Create(paths.failover(0), B.encode(), ephemeral=True),
            Create(paths.failovering(0), B.encode()),
        ]
    )
    runs: list[str] = []
    events: list[Event] = []
    scheduler = Scheduler(registry, instance_id=A, observers=[events.append])
    scheduler.add_job(config, lambda ctx: runs.append(ctx.source.name))
    scheduler.start()
    try:
        scheduler.trigger("held")
        skipped = wait_until(
            lambda: [e for e in events if isinstance(e, ItemsSkipped) and e.items == (0,)],
            10,
            "a fire of item 0 skipped",
        )
        assert skipped[0].reason == "held by a failover run" and skipped[0].misfire
        wait_until(lambda: other.stat(paths.misfire(0)), 10, "the misfire flag")
        assert runs == []
        # B's failover run ends: one transaction, as its completion.
        other.transaction([Delete(p) for p in (paths.running(0), *failover_marks)])
        wait_until(lambda: runs, 10, "item 0 run on A")
        wait_until(lambda: other.stat(paths.misfire(0)) is None, 10, "the flag taken")
    finally:
        scheduler.stop()
        other.close()
    assert runs == ["MISFIRE"]


def test_a_fire_due_during_a_short_pause_is_recorded_skipped_and_runs_once_after() -> None:
    """Issue 55 case 4: a pause shorter than the session timeout (a GC pause, SIGSTOP for
    two seconds) holds the timer past a fire's second. That fire is not run late, and not
    lost either: it is recorded as skipped, and with misfire on its item runs once, as a
    misfire, right after the pause."""
    runs: list[tuple[str, float]] = []
    events: list[Event] = []
    scheduler = Scheduler(MemoryRegistry(), instance_id=A, observers=[events.append])
    scheduler.add_job(job("paused", 1), lambda ctx: runs.append((ctx.source.name, time.time())))
    scheduler.start()
    try:
        wait_until(lambda: runs, 10, "a first fire")
        with scheduler._timers.lock:  # the timer thread is paused: it waits for its lock
            time.sleep(2.5)  # the pause itself, shorter than the session timeout
        resumed = time.time()
        skipped = wait_until(
            lambda: [e for e in events if isinstance(e, ItemsSkipped) and "late" in e.reason],
            10,
            "the fires of the pause recorded",
        )
        wait_until(lambda: [s for s, t in runs if t >= resumed and s == "MISFIRE"], 10, "a re-run")
    finally:
        scheduler.stop()
    assert all(e.items == (0,) and e.misfire for e in skipped)
    assert skipped[0].reason.startswith("released late")
    assert len([s for s, t in runs if t >= resumed and s == "MISFIRE"]) == 1
