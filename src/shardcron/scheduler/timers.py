"""The process's timer: one heap of every job's due callbacks, released by one thread.

A worker of thousands of jobs keeps no thread per job: each job's next fire, heal tick
and delayed reaction is an entry in one heap. The timer thread sleeps until the earliest
entry and hands everything due to the coordinator as *one* task, so the claims of every
job due in the same tick go out in one group commit (:mod:`shardcron.coordination.groupcommit`).
Entries pushed with ``on_timer`` run on the timer thread itself: they only hand work
over (staged items to the worker pool) and must not queue behind the coordinator.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class Timers:
    def __init__(self, coordinate: Callable[[Callable[[], None]], None]) -> None:
        self._coordinate = coordinate
        self.lock = threading.Condition()
        # (when, order, fn, whether fn runs on the timer thread: it only hands work over)
        self._heap: list[tuple[float, int, Callable[[], None], bool]] = []
        self._seq = itertools.count()
        self._released: float | None = None  # see released()
        self._closed = False

    def start(self) -> None:
        threading.Thread(target=self._loop, name="shardcron-timer", daemon=True).start()

    def close(self) -> None:
        with self.lock:
            self._closed = True
            self._heap.clear()
            self.lock.notify_all()

    def push(self, when: float, fn: Callable[[], None], on_timer: bool = False) -> None:
        entry = (when, next(self._seq), fn, on_timer)
        with self.lock:
            heapq.heappush(self._heap, entry)
            # The timer thread sleeps until the earliest entry: woken for a later one, it
            # would only go back to sleep, having taken the GIL from the coordinator (a
            # herd re-arms thousands of timers at once).
            if self._heap[0] is entry:
                self.lock.notify()

    def released(self) -> float:
        """When the timer released the callbacks the coordinator is running now (their
        tick), or now outside them: a herd's jobs all see the same tick."""
        return self._released if self._released is not None else time.time()

    def _loop(self) -> None:
        with self.lock:
            while not self._closed:
                if not self._heap:
                    self.lock.wait(60)
                    continue
                now = time.time()
                delay = self._heap[0][0] - now
                if delay > 0:
                    self.lock.wait(min(delay, 60))
                    continue
                # Everything due is one coordinator task: the group commit it leads to
                # then holds the claims of every job due in this tick. Staged items go
                # to the workers straight away: a herd's would otherwise queue behind it.
                due = []
                while self._heap and self._heap[0][0] <= now:
                    _, _, fn, on_timer = heapq.heappop(self._heap)
                    if on_timer:
                        fn()
                    else:
                        due.append(fn)
                if due:
                    self._coordinate(lambda due=due, at=now: self._run(due, at))  # type: ignore[misc]

    def _run(self, fns: list[Callable[[], None]], released: float) -> None:
        self._released = released
        try:
            for fn in fns:
                logged(fn)
        finally:
            self._released = None


def logged(fn: Callable[[], None]) -> None:
    """Run ``fn``; an exception is logged, never raised into the thread that runs it."""
    try:
        fn()
    except Exception:
        log.exception("shardcron internal task failed")
