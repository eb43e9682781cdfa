"""A herd's items start before the ends of its first items are reported.

On a second, the timer hands the items of every fire staged for it to the worker pool
at once (:class:`HandOvers`). Items of a few milliseconds
end while others of the same second still wait for a thread. Reported one by one, each
end would have the coordinator complete its fire (build the completion, then apply its
watch events) under the same GIL as the items still waiting, and those would start
later: on two workers of 10,000 jobs each, a steady herd's items started at p99
0.38–0.62 s late in three runs, against 0.18–0.36 s in nine with the ends held.

So while items handed over on a second have not all started, the ends of items are
held, and go to the coordinator in one task when the last of them starts. They are never
held longer than the hand-over's *hold* (:func:`hold_for`): items waiting behind
long-running ones in a busy pool must not keep the fires that ended from completing
before their jobs' next claims. The hold is half the time from the second to the
earliest next claim of the jobs handed over, within :data:`HOLD_SECONDS` and
:data:`MAX_HOLD_SECONDS`: a quarter of a second for every-second jobs, a second for a
herd due every 20 s. Ends released while a herd's items still start take the GIL from
them, and the items left start slower: with a quarter second for every herd, a steady
herd of 14,000 jobs on each of two workers started at p99 0.42-1.39 s late in five runs
(median 0.70 s), and at 0.25-0.89 s (median 0.32 s) in four with a hold of a second.

For the same window the cyclic garbage collector waits. A herd's fires are alive until
they complete, so the young collections it sets off while its items start find nothing
to free, and each stops every thread: on two workers of 10,000 jobs each, young
collections of 30–110 ms ran every 100–200 ms of a herd's start, one or two of them
before its last item started. Paused, the collector runs once the last item has started
(or the hold after the hand-over, at the latest). A program that disabled the collector
itself keeps it disabled; one that asked shardcron to leave the collector alone
(``Scheduler(gc_threshold=None)``) gets no pause.
"""

from __future__ import annotations

import functools
import gc
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from shardcron.scheduler.timers import logged

T = TypeVar("T")
Report = Callable[[], None]  # runs on the coordinator: an item's end, to its fire
# The least hold: an every-second job claims its next fire half a second after its
# second at the earliest (its lead is at most half its interval); an item of it that ends
# early in its second and is held this long still completes before that claim.
HOLD_SECONDS = 0.25
# The most: a worker starts a herd of 10,000 items in 0.2-0.3 s on a fast machine of the
# bench's kind and in 0.5-0.8 s on a slow one. A herd whose items take longer to start
# has its ends released in slices this long.
MAX_HOLD_SECONDS = 1.0


def hold_for(when: float, next_claim: float | None) -> float:
    """How long after its second ``when`` a staged fire's end may be held: half the time
    to its job's next claim (None: no next fire), within the bounds above."""
    if next_claim is None:
        return MAX_HOLD_SECONDS
    return min(MAX_HOLD_SECONDS, max(HOLD_SECONDS, (next_claim - when) / 2))


class StartsFirst:
    """Counts items handed over and not yet started; holds ends while there are any."""

    def __init__(
        self,
        coordinate: Callable[[Report], None],
        call_later: Callable[[float, Report], None],
        pause_collector: bool = True,
    ) -> None:
        self._coordinate = coordinate
        self._pause_collector = pause_collector
        self._call_later = call_later
        self._lock = threading.Lock()
        self._waiting = 0  # handed over, not yet started
        self._hold = HOLD_SECONDS  # the shortest hold of the hand-overs still starting
        self._held: list[Report] = []
        self._paused = 0  # the hand-over that paused the collector, 0 if none did
        self._handovers = 0

    def handed(self, count: int, hold: float = HOLD_SECONDS) -> None:
        """The timer handed ``count`` items to the pool, whose ends may be held ``hold``
        seconds (see :func:`hold_for`)."""
        with self._lock:
            self._hold = hold if self._waiting == 0 else min(self._hold, hold)
            self._waiting += count
            if self._paused or not self._pause_collector or not gc.isenabled():
                return
            gc.disable()
            self._handovers += 1
            self._paused = handover = self._handovers
        self._call_later(hold, lambda: self._bound(handover))

    def _bound(self, handover: int) -> None:
        """On the coordinator, the hold after ``handover``."""
        with self._lock:
            if self._paused == handover:
                self._resume()

    def _resume(self) -> None:
        """Under the lock."""
        if self._paused:
            self._paused = 0
            gc.enable()

    def started(self) -> None:
        """On a worker, as one of those items starts: the last one releases the ends."""
        with self._lock:
            self._waiting -= 1
            if self._waiting > 0:
                return
            self._resume()
            if not self._held:
                return
            held, self._held = self._held, []
        self._coordinate(lambda: _run(held))

    def ended(self, report: Report) -> None:
        """On a worker, as an item ends: ``report`` goes to the coordinator now, or once
        the items handed over with it have started."""
        with self._lock:
            held = self._waiting > 0
            if held:
                self._held.append(report)
                first, hold = len(self._held) == 1, self._hold
        # Outside the lock: the timer thread takes it in handed() while it holds the
        # timer's own lock, which call_later takes.
        if not held:
            self._coordinate(report)
        elif first:
            self._call_later(hold, self._release)

    def _release(self) -> None:
        """On the coordinator, the hold after an end was first held."""
        with self._lock:
            held, self._held = self._held, []
        _run(held)


class HandOvers:
    """The works staged for each second, handed to the pool in one go on it (on the timer
    thread): :class:`StartsFirst` sees a herd's items as one hand-over, held as its
    soonest next claim needs."""

    def __init__(
        self,
        starts: StartsFirst,
        at_second: Callable[[float, Callable[[], None]], None],
        submit: Callable[[Callable[[], None]], None],
    ) -> None:
        self._starts = starts
        self._at_second = at_second  # runs the callable on the timer thread at the second
        self._submit = submit  # to the pool
        self._lock = threading.Lock()
        self._staged: dict[float, tuple[float, list[Callable[[], None]]]] = {}  # hold, works

    def stage(
        self,
        when: float,
        works: Sequence[Callable[[], T]],
        then: Callable[[T], None],
        next_claim: float | None,
        returned: Callable[[T], None] | None = None,
    ) -> None:
        """``Host.execute_at``."""
        hold = hold_for(when, next_claim)
        # A partial of a module function, not of a closure: a worker of thousands of jobs
        # has thousands of fires staged at each collection of the garbage collector, and
        # every object of them is one more for it to scan.
        run = functools.partial(_run_staged, self._starts, then, returned)
        with self._lock:
            first = when not in self._staged
            held, tasks = self._staged.get(when, (hold, []))
            tasks.extend(functools.partial(run, work) for work in works)
            self._staged[when] = (min(hold, held), tasks)
        if first:
            self._at_second(when, lambda: self._hand_over(when))

    def _hand_over(self, when: float) -> None:
        with self._lock:
            hold, tasks = self._staged.pop(when)
        self._starts.handed(len(tasks), hold)
        for task in tasks:
            self._submit(task)


def _run_staged(
    starts: StartsFirst,
    then: Callable[[T], None],
    returned: Callable[[T], None] | None,
    work: Callable[[], T],
) -> None:
    """On a worker: a staged item (see :meth:`HandOvers.stage`)."""
    starts.started()
    result = work()
    if returned is not None:
        returned(result)
    starts.ended(functools.partial(then, result))


def _run(reports: list[Report]) -> None:
    for report in reports:  # each on its own, as the coordinator runs its tasks
        logged(report)
