"""The worker pool: items run side by side up to the cap, never more threads than that,
short items on as few threads as keep the queue moving, and work not started by a
shutdown is dropped."""

from __future__ import annotations

import threading

from shardcron.execution.workerpool import WorkerPool
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


def test_short_items_run_on_one_thread_while_the_queue_moves() -> None:
    # A burst of short items on 32 threads would hand the GIL from thread to thread at
    # every system call; one thread that keeps the queue moving starts them all sooner.
    pool = WorkerPool(8, "test-pool", stall=1.0)
    names: set[str] = set()
    done: list[int] = []

    def work(n: int) -> None:
        names.add(threading.current_thread().name)
        done.append(n)

    try:
        for n in range(500):
            pool.submit(lambda n=n: work(n))  # type: ignore[misc]
        wait_until(lambda: len(done) == 500, 10, "the burst")
    finally:
        pool.shutdown()
    assert names == {"test-pool_0"}


def test_an_item_blocked_in_its_thread_does_not_hold_back_the_queue() -> None:
    pool = WorkerPool(4, "test-pool")
    release = threading.Event()
    started: list[str] = []

    def blocked() -> None:
        started.append("blocked")
        release.wait(60)  # longer than the wait below: "next" must not wait for it

    try:
        pool.submit(blocked)
        pool.submit(lambda: started.append("next"))
        wait_until(lambda: sorted(started) == ["blocked", "next"], 10, "the next item")
    finally:
        release.set()
        pool.shutdown()


def test_a_garbage_collection_between_two_looks_is_not_a_stall() -> None:
    # A collection stops every thread, so the queue does not move during it; taken for
    # a stall, the collections of a busy worker (several a second) had its whole pool
    # awake. Here a collection comes between every two looks of the watch while the only
    # thread awake is blocked: no thread is woken until they stop.
    looks = 0
    collecting = True

    def collections() -> int:
        nonlocal looks
        looks += 1
        return looks if collecting else 0

    pool = WorkerPool(4, "test-pool", stall=0.01, collections=collections)
    release = threading.Event()
    started: list[str] = []

    def blocked() -> None:
        started.append("blocked")
        release.wait(60)

    try:
        pool.submit(blocked)
        wait_until(lambda: started == ["blocked"], 10, "the blocked item")
        pool.submit(lambda: started.append("next"))
        wait_until(lambda: looks >= 10, 10, "ten looks of the stall watch")
        assert started == ["blocked"]  # every look saw a collection: nothing was woken
        collecting = False
        wait_until(lambda: started == ["blocked", "next"], 10, "the next item")
    finally:
        release.set()
        pool.shutdown()


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


def test_busy_counts_the_threads_running_work_when_work_waits_for_them() -> None:
    """What the worker page shows as pool use: a thread that took queued work after its
    last item is busy, not idle."""
    pool = WorkerPool(1, "test-pool")
    gates = [threading.Event() for _ in range(3)]
    began = [threading.Event() for _ in range(3)]

    def work(n: int) -> None:
        began[n].set()
        gates[n].wait(10)

    try:
        for n in range(3):
            pool.submit(lambda n=n: work(n))  # type: ignore[misc]
        for n in range(2):
            assert began[n].wait(10)
            assert pool.busy == 1
            gates[n].set()  # the thread goes on with the next queued item
        assert began[2].wait(10)
        assert pool.busy == 1
        gates[2].set()
        wait_until(lambda: pool.busy == 0, 10, "the pool to be idle again")
    finally:
        for gate in gates:
            gate.set()
        pool.shutdown()
