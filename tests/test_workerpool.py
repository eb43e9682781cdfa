"""The worker pool: items run side by side up to the cap, never more threads than that,
and work not started by a shutdown is dropped."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from shardcron import workerpool
from shardcron.workerpool import WorkerPool
from tests.helpers import wait_until


def test_items_run_side_by_side_up_to_the_cap_on_that_many_threads() -> None:
    pool = WorkerPool(3, "test-pool")
    together = threading.Barrier(3, timeout=10)
    names: set[str] = set()
    done: list[int] = []

    def work(n: int) -> None:
        names.add(threading.current_thread().name)
        if n < 3:
            together.wait()  # only passes if three run at once
        done.append(n)

    try:
        for n in range(3):
            pool.submit(lambda n=n: work(n))  # type: ignore[misc]
        wait_until(lambda: len(done) == 3, 10, "three items side by side")
        for n in range(3, 20):  # idle threads are reused: no fourth thread
            pool.submit(lambda n=n: work(n))  # type: ignore[misc]
        wait_until(lambda: len(done) == 20, 10, "the rest")
    finally:
        pool.shutdown()
    assert len(names) == 3


def test_past_the_cap_an_item_waits_for_a_free_thread() -> None:
    pool = WorkerPool(2, "test-pool")
    release = threading.Event()
    started: list[int] = []

    def work(n: int) -> None:
        started.append(n)
        if n < 2:
            release.wait(10)

    try:
        for n in range(3):
            pool.submit(lambda n=n: work(n))  # type: ignore[misc]
        wait_until(lambda: len(started) == 2, 10, "two items")
        assert sorted(started) == [0, 1]  # the third waits: both threads are busy
        assert pool.busy == 2  # what the worker page shows as pool use
        release.set()
        wait_until(lambda: len(started) == 3, 10, "the third item")
        wait_until(lambda: pool.busy == 0, 10, "the pool to be idle again")
    finally:
        pool.shutdown()


def test_shutdown_drops_work_not_started_and_refuses_more() -> None:
    pool = WorkerPool(1, "test-pool")
    release = threading.Event()
    ran: list[str] = []

    def hold() -> None:
        ran.append("first")
        release.wait(10)

    pool.submit(hold)
    wait_until(lambda: ran == ["first"], 10, "the first item")
    pool.submit(lambda: ran.append("queued"))
    pool.shutdown()
    pool.submit(lambda: ran.append("after"))
    release.set()
    # The thread ends after its current item; nothing else ran.
    wait_until(
        lambda: not any(t.name.startswith("test-pool") for t in threading.enumerate()),
        10,
        "the pool's thread to end",
    )
    assert ran == ["first"]


def test_a_long_task_pauses_while_the_threads_take_its_work_and_no_longer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``let_start`` (the items-first pause of a herd's timer batch) waits while the
    threads take the work queued, not for that work to end, nor on threads all busy."""
    pool = WorkerPool(1, "test-pool")
    gates = [threading.Event() for _ in range(5)]
    began = [threading.Event() for _ in range(5)]
    steps: list[int] = []

    def work(n: int) -> None:
        began[n].set()
        gates[n].wait(10)

    def step_releasing_the_running_item(seconds: float) -> None:
        n = len(steps)
        steps.append(n)
        gates[n].set()  # item n ends; the thread takes item n + 1
        assert began[n + 1].wait(10)

    monkeypatch.setattr(workerpool, "SLICE_SECONDS", 0.0)  # pause at every call
    try:
        pool.submit(lambda: work(0))
        assert began[0].wait(10)
        for n in (1, 2, 3):
            pool.submit(lambda n=n: work(n))  # type: ignore[misc]
        clock = SimpleNamespace(sleep=step_releasing_the_running_item, monotonic=time.monotonic)
        monkeypatch.setattr(workerpool, "time", clock)
        pool.let_start()
        assert steps == [0, 1, 2]  # waited until item 3 was taken ...
        assert not gates[3].is_set() and pool.busy == 1  # ... not until it ended

        pool.submit(lambda: work(4))  # queued behind item 3, which holds the only thread
        clock.sleep = lambda seconds: steps.append(-1)
        pool.let_start()
        assert steps[3:] == [-1]  # one step without progress ends the pause
        assert not began[4].is_set()
    finally:
        for gate in gates:
            gate.set()
        pool.shutdown()
