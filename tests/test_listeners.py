"""Job listeners: loading by name, order, errors, and the distributed-once listener."""

from __future__ import annotations

import threading
from contextlib import ExitStack

import pytest

from shardcron.config.job import JobConfig, declare
from shardcron.coordination.paths import JobPaths
from shardcron.errors import ConfigError, ShardcronError
from shardcron.execution.lanes import ErrorHandler
from shardcron.execution.listeners import (
    DistributeOnceListener,
    DistributeOnceTimeoutError,
    JobListener,
    load_listeners,
    ordered,
)
from shardcron.model import FireContext, ShardingContext
from shardcron.registry import Registry
from shardcron.registry.memory import MemoryRegistry
from shardcron.scheduler.process import Scheduler
from shardcron.testing.zookeeper import ZooKeeperServer
from tests import job_samples
from tests.helpers import wait_until
from tests.job_samples import FirstListener, Fleet, RecordingListener, fleet

A, B, C = (f"127.0.0.{n}@-@{3200 + n}" for n in range(1, 4))


# -- loading and order ------------------------------------------------------------------------


def declared_and_loaded(*refs: str) -> list[JobListener]:
    """As a worker does: the local declaration imports its refs, then they are loaded."""
    job = JobConfig(job_name="j", sharding_total_count=1, job_listener_types=refs)
    declare(job, with_callable=False)
    return load_listeners(refs)


def test_listener_types_are_instantiated_and_run_in_ascending_order() -> None:
    loaded = declared_and_loaded(
        "tests.job_samples:RecordingListener", "tests.job_samples:FirstListener"
    )
    assert [type(listener) for listener in loaded] == [RecordingListener, FirstListener]
    assert [type(listener) for listener in ordered(loaded)] == [FirstListener, RecordingListener]
    again = load_listeners(("tests.job_samples:RecordingListener",))
    assert again[0] is not loaded[0]  # one object per job


@pytest.mark.parametrize(
    ("ref", "problem"),
    [
        ("RecordingListener", "unknown name 'RecordingListener'"),
        ("tests.no_such_module:Listener", "cannot import module"),
        ("tests.job_samples:Missing", "has no 'Missing'"),
        ("tests.job_samples:RUNS", "is not callable"),
        ("tests.job_samples:NeedsArguments", "cannot create"),
        ("tests.job_samples:NotAListener", "has no before_job_executed or after_job_executed"),
    ],
)
def test_bad_listener_types_are_one_line_config_errors(ref: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        declared_and_loaded("tests.job_samples:RecordingListener", ref)
    assert caught.value.field == "jobListenerTypes"
    assert problem in str(caught.value) and "\n" not in str(caught.value)


# -- plain listeners on two instances ---------------------------------------------------------


class Journal:
    """One ordered log shared by listeners and job bodies."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, ...]] = []
        self.lock = threading.Lock()

    def add(self, *entry: str) -> None:
        with self.lock:
            self.entries.append(entry)

    def snapshot(self) -> list[tuple[str, ...]]:
        with self.lock:
            return list(self.entries)

    def job(self, ctx: ShardingContext) -> None:
        self.add("start", str(ctx.sharding_item))
        self.add("end", str(ctx.sharding_item))


class CodeListener:
    def __init__(self, journal: Journal, instance: str, fail: bool = False) -> None:
        self.journal, self.instance, self.fail = journal, instance, fail

    def before_job_executed(self, fire: FireContext) -> None:
        self.journal.add("before", self.instance, *map(str, fire.items))
        if self.fail:
            raise RuntimeError("listener broke")

    def after_job_executed(self, fire: FireContext) -> None:
        self.journal.add("after", self.instance, *map(str, fire.items))


def start_with(
    f: Fleet,
    instance: str,
    config: JobConfig,
    journal: Journal,
    listeners: list[JobListener],
    error_handler: ErrorHandler | None = None,
) -> Scheduler:
    return f.start(
        instance, lambda s: s.add_job(config, journal.job, listeners), error_handler=error_handler
    )


def test_listeners_from_code_and_config_wrap_each_fire_on_two_instances(
    zookeeper: ZooKeeperServer,
) -> None:
    journal = Journal()
    job_samples.CALLS.clear()
    config = JobConfig(
        job_name="heard",
        sharding_total_count=4,
        job_listener_types=("tests.job_samples:RecordingListener",),
    )
    with fleet(zookeeper) as f:
        for instance in (A, B):
            start_with(f, instance, config, journal, [CodeListener(journal, instance)])
        f.trigger("heard")
        runs = f.wait_finished("heard", 4)
        wait_until(lambda: len(job_samples.CALLS) == 4, what="4 calls by the config listener")
        entries = journal.snapshot()
    befores = {e[1]: e[2:] for e in entries if e[0] == "before"}
    afters = {e[1]: e[2:] for e in entries if e[0] == "after"}
    owned = {
        instance: tuple(
            sorted(str(r.context.sharding_item) for r in runs if r.instance == instance)
        )
        for instance in (A, B)
    }
    assert befores == afters == owned and len(owned[A]) == len(owned[B]) == 2
    for instance, items in befores.items():
        first = entries.index(("before", instance, *items))
        last = entries.index(("after", instance, *items))
        ran = [i for kind, *rest in entries[first:last] if kind == "end" for i in rest]
        assert set(items) <= set(ran)  # this instance's items ran between its hooks
    assert sorted(job_samples.CALLS) == sorted(
        (hook, instance, tuple(map(int, items)))
        for hook in ("before", "after")
        for instance, items in owned.items()
    )


def test_a_failing_listener_goes_to_the_error_handler_and_the_fire_goes_on(
    zookeeper: ZooKeeperServer,
) -> None:
    journal = Journal()
    reported: list[tuple[str, ShardingContext | None, BaseException]] = []

    def handler(job: str, ctx: ShardingContext | None, error: BaseException) -> None:
        reported.append((job, ctx, error))

    config = JobConfig(job_name="loud", sharding_total_count=2)
    with fleet(zookeeper) as f:
        for instance in (A, B):
            listener = CodeListener(journal, instance, fail=True)
            start_with(f, instance, config, journal, [listener], handler)
        f.trigger("loud")
        runs = f.wait_finished("loud", 2)
        wait_until(lambda: len([e for e in journal.snapshot() if e[0] == "after"]) == 2)
    assert all(r.success for r in runs)
    assert [(job, ctx, str(error)) for job, ctx, error in reported] == [
        ("loud", None, "listener broke")
    ] * 2


# -- distributed-once -------------------------------------------------------------------------


class Once(DistributeOnceListener):
    def __init__(self, journal: Journal, timeout: float = 10.0) -> None:
        super().__init__(started_timeout=timeout, completed_timeout=timeout)
        self.journal = journal

    def before_all_started(self, fire: FireContext) -> None:
        self.journal.add("BEFORE")

    def after_all_completed(self, fire: FireContext) -> None:
        self.journal.add("AFTER")


def test_distributed_once_hooks_run_exactly_once_per_fire_across_three_instances(
    zookeeper: ZooKeeperServer,
) -> None:
    fires, items = 30, 6
    journal = Journal()
    config = JobConfig(job_name="once", sharding_total_count=items)
    with fleet(zookeeper) as f:
        for instance in (A, B, C):
            start_with(f, instance, config, journal, [Once(journal)])
        for fire in range(1, fires + 1):
            f.trigger("once")
            wait_until(
                lambda n=fire: journal.snapshot().count(("AFTER",)) >= n,  # type: ignore[misc]
                what=f"the after-hook of fire {fire}",
            )
        runs = f.wait_finished("once", fires * items)
        assert {r.instance for r in runs} == {A, B, C} and all(r.success for r in runs)
        paths = JobPaths("once")
        # The last hook clears its round right after returning.
        wait_until(
            lambda: not f.admin.children(paths.guarantee("completed")),
            what="the last round cleared",
        )
        assert f.admin.children(paths.guarantee("started")) == []
    entries = journal.snapshot()
    assert entries.count(("BEFORE",)) == entries.count(("AFTER",)) == fires
    # Each fire reads: BEFORE, every item's start and end, AFTER; nothing outside that.
    round_size = 2 + 2 * items
    assert len(entries) == fires * round_size
    for n in range(fires):
        one = entries[n * round_size : (n + 1) * round_size]
        assert one[0] == ("BEFORE",) and one[-1] == ("AFTER",), (n, one)
        body = one[1:-1]
        assert sorted(body) == sorted(
            [("start", str(i)) for i in range(items)] + [("end", str(i)) for i in range(items)]
        ), (n, one)


def test_distributed_once_is_exactly_once_under_simultaneous_arrivals(
    zookeeper: ZooKeeperServer,
) -> None:
    """Five sessions arrive at the same instant, round after round, one item each."""
    rounds, parties = 20, 5
    paths = JobPaths("race")
    journal = Journal()
    with fleet(zookeeper) as f, ExitStack() as stack:
        f.admin.put(paths.root, b"race")
        listeners = []
        for _ in range(parties):
            registry: Registry = f.cluster.registry()
            registry.start()
            stack.callback(registry.close)
            listener = Once(journal)
            listener.bind(registry, paths, "x")
            listeners.append(listener)
        barrier = threading.Barrier(parties)
        failures: list[BaseException] = []

        def party(index: int) -> None:
            fire = FireContext(
                job_name="race",
                task_id="t",
                instance=str(index),
                sharding_total_count=parties,
                job_parameter="",
                items={index: None},
            )
            try:
                for _ in range(rounds):
                    barrier.wait()
                    listeners[index].before_job_executed(fire)
                    barrier.wait()
                    listeners[index].after_job_executed(fire)
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                failures.append(exc)
                barrier.abort()

        threads = [threading.Thread(target=party, args=(i,)) for i in range(parties)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert failures == []
    assert journal.snapshot() == [("BEFORE",), ("AFTER",)] * rounds


def test_distributed_once_times_out_when_an_instance_never_arrives(
    zookeeper: ZooKeeperServer,
) -> None:
    journal = Journal()
    reported: list[BaseException] = []
    config = JobConfig(job_name="lonely", sharding_total_count=2)
    paths = JobPaths("lonely")

    def handler(job: str, ctx: ShardingContext | None, error: BaseException) -> None:
        reported.append(error)

    with fleet(zookeeper) as f:
        start_with(f, A, config, journal, [Once(journal, timeout=0.5)], handler)
        start_with(f, B, config, journal, [])  # B's item never takes part in the rounds
        f.trigger("lonely")
        runs = f.wait_finished("lonely", 2)
        wait_until(lambda: len(reported) == 2, what="both phases to time out")
        assert f.admin.children(paths.guarantee("started")) == []
        assert f.admin.children(paths.guarantee("completed")) == []
    assert all(r.success for r in runs)  # the items ran regardless
    assert [type(e) for e in reported] == [DistributeOnceTimeoutError] * 2
    assert "not every item started within 0.5s" in str(reported[0])
    assert "not every item completed within 0.5s" in str(reported[1])
    assert ("BEFORE",) not in journal.snapshot() and ("AFTER",) not in journal.snapshot()


def test_an_unbound_distributed_listener_says_so() -> None:
    fire = FireContext(
        job_name="x", task_id="t", instance="i", sharding_total_count=1, job_parameter="", items={}
    )
    with pytest.raises(Exception, match="not bound to a job"):
        Once(Journal()).before_job_executed(fire)


def test_unbinding_releases_a_waiting_fire() -> None:
    registry = MemoryRegistry(namespace="unbind")
    registry.start()
    paths = JobPaths("unbind")
    registry.put(paths.root, b"unbind")
    listener = Once(Journal(), timeout=30)
    listener.bind(registry, paths, "i")
    fire = FireContext(
        job_name="unbind",
        task_id="t",
        instance="i",
        sharding_total_count=2,
        job_parameter="",
        items={0: None},
    )
    outcome: list[BaseException] = []

    def arrive() -> None:
        try:
            listener.before_job_executed(fire)
        except ShardcronError as exc:
            outcome.append(exc)

    waiting = threading.Thread(target=arrive)
    waiting.start()
    wait_until(lambda: registry.children(paths.guarantee("started")) == ["0"], what="arrival")
    listener.unbind()
    waiting.join(10)
    registry.close()
    assert [str(e) for e in outcome] == ["job unbind: stopped while waiting for a round"]
