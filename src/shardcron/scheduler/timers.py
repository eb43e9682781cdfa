"""The process's timer: one heap of every job's due callbacks, released by one thread.

A worker of thousands of jobs keeps no thread per job: each job's next fire, heal tick
and delayed reaction is an entry in one heap. The timer thread sleeps until the earliest
entry and hands everything due to the coordinator as *one* task, so the claims of every
job due in the same tick go out in one group commit (:mod:`shardcron.coordination.groupcommit`).
Entries pushed with ``on_timer`` run on the timer thread itself: they only hand work
over (staged items to the worker pool) and must not queue behind the coordinator.

Two kinds of entries: those due at a wall-clock time (a fire's second: :meth:`push`) and
those due after a delay (a heal tick, a retry: :meth:`push_in`). When the wall clock
steps (an NTP step, a VM resumed), delays keep their length, measured on the monotonic
clock, and wall-clock entries stay at their time: after a step back, fires wait until
the clock reaches them again, so none runs twice; after a step forward, the fires
skipped are released at once, late, and recorded as missed.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

# The timer thread looks at the clocks at least this often: a wall-clock step is seen
# within it, even by a process with nothing due for minutes.
CLOCK_CHECK_SECONDS = 1.0
# A change of the wall clock against the monotonic one of at least this is a step. A
# smaller one (NTP slewing the clock, or the two clocks read a thread switch apart) is not
# worth moving thousands of delays for.
STEP_SECONDS = 0.5


class Timers:
    def __init__(
        self,
        coordinate: Callable[[Callable[[], None]], None],
        stepped: Callable[[], None] = lambda: None,
    ) -> None:
        """``stepped`` runs on the coordinator after each step of the wall clock."""
        self._coordinate = coordinate
        self._stepped = stepped
        self.lock = threading.Condition()
        # (when, order, fn, whether fn runs on the timer thread: it only hands work over,
        # whether ``when`` stands for a delay: it moves with a step of the wall clock)
        self._heap: list[tuple[float, int, Callable[[], None], bool, bool]] = []
        self._offset = time.time() - time.monotonic()
        self._seq = itertools.count()
        self._released: tuple[float, float] | None = None  # see released(): wall, monotonic
        self._closed = False

    def start(self) -> None:
        threading.Thread(target=self._loop, name="shardcron-timer", daemon=True).start()

    def close(self) -> None:
        with self.lock:
            self._closed = True
            self._heap.clear()
            self.lock.notify_all()

    def push(self, when: float, fn: Callable[[], None], on_timer: bool = False) -> None:
        """Run ``fn`` at the wall-clock time ``when`` (epoch seconds)."""
        self._push((when, next(self._seq), fn, on_timer, False))

    def push_in(self, delay: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` in ``delay`` seconds, however the wall clock steps meanwhile."""
        self._push((time.time() + delay, next(self._seq), fn, False, True))

    def _push(self, entry: tuple[float, int, Callable[[], None], bool, bool]) -> None:
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
        return self._released[0] if self._released is not None else time.time()

    def released_monotonic(self) -> float:
        """:meth:`released` on the monotonic clock: how long a herd's claims took is
        measured from it, whatever the wall clock does meanwhile."""
        return self._released[1] if self._released is not None else time.monotonic()

    def _loop(self) -> None:
        with self.lock:
            while not self._closed:
                now, monotonic = time.time(), time.monotonic()
                self._follow_the_wall_clock(now - monotonic)
                if not self._heap:
                    self.lock.wait(CLOCK_CHECK_SECONDS)
                    continue
                delay = self._heap[0][0] - now
                if delay > 0:
                    self.lock.wait(min(delay, CLOCK_CHECK_SECONDS))
                    continue
                # Everything due is one coordinator task: the group commit it leads to
                # then holds the claims of every job due in this tick. Staged items go
                # to the workers straight away: a herd's would otherwise queue behind it.
                due = []
                while self._heap and self._heap[0][0] <= now:
                    _, _, fn, on_timer, _ = heapq.heappop(self._heap)
                    if on_timer:
                        fn()
                    else:
                        due.append(fn)
                if due:
                    at = (now, monotonic)
                    self._coordinate(lambda due=due, at=at: self._run(due, at))  # type: ignore[misc]

    def _follow_the_wall_clock(self, offset: float) -> None:
        """Under the lock: move the delays by a step of the wall clock since last time
        (``offset``: the wall clock less the monotonic one, now)."""
        step, self._offset = offset - self._offset, offset
        if abs(step) < STEP_SECONDS:
            return
        log.warning(
            "the wall clock stepped %s by %.1f s: %s",
            "forward" if step > 0 else "back",
            abs(step),
            "the fires it skipped are recorded as missed"
            if step > 0
            else "fires wait until it reaches their time again, and none runs twice",
        )
        self._heap = [
            (when + step if relative else when, seq, fn, on_timer, relative)
            for when, seq, fn, on_timer, relative in self._heap
        ]
        heapq.heapify(self._heap)
        self._coordinate(self._stepped)

    def _run(self, fns: list[Callable[[], None]], released: tuple[float, float]) -> None:
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
