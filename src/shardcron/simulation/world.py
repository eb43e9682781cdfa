"""Virtual time: one clock, one queue of ``(time, seq, callback)``, one thread.

Everything a simulated seed does is a callback on :class:`World`'s queue, run in
``(time, seq)`` order, so a seed replays exactly. :class:`SimHost` is the
:class:`shardcron.coordination.host.Host` of one simulated instance; :class:`SessionEvents` is the
deterministic event sink of one registry session (inline, or lagging behind).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TypeVar

T = TypeVar("T")

# 2023-11-14 22:13:20 UTC: a round second, so every-second crons fire on whole numbers.
EPOCH = 1_700_000_000.0


class Phase(Enum):
    UP = "up"
    STALLED = "stalled"  # SIGSTOP: nothing runs until it resumes
    DEAD = "dead"  # SIGKILL: nothing runs ever again


@dataclass
class Node:
    """What the world knows of one simulated process."""

    name: str
    phase: Phase = Phase.UP
    resume_at: float = 0.0
    stalls: list[tuple[float, float]] = field(default_factory=list)
    on_error: Callable[[Exception], None] = lambda _e: None
    # Set by the job runner while ``execute`` runs an item: how long it takes, and a
    # callback that records its end in the ledger.
    pending: tuple[float, Callable[[], None]] | None = None
    open_runs: dict[int, Callable[[], None]] = field(default_factory=dict)


class World:
    """The virtual clock and the one event queue of a seed.

    A callback queued for a :class:`Node` runs only while the node is UP: a stalled
    node's callbacks wait until it resumes, a dead node's are dropped, and an exception
    is handed to ``node.on_error`` (the production coordinator logs it and goes on).
    """

    def __init__(self, start: float = EPOCH) -> None:
        self.now = start
        self._queue: list[tuple[float, int, Callable[[], None], Node | None]] = []
        self._seq = itertools.count()
        self.steps = 0

    def at(self, when: float, fn: Callable[[], None], node: Node | None = None) -> None:
        heapq.heappush(self._queue, (max(when, self.now), next(self._seq), fn, node))

    def run_until(self, end: float) -> None:
        """Run every callback due up to ``end``; the clock then reads ``end``."""
        queue, up, stalled = self._queue, Phase.UP, Phase.STALLED
        while queue and queue[0][0] <= end:
            when, _, fn, node = heapq.heappop(queue)
            self.now = when
            self.steps += 1
            if node is None:
                fn()
            elif node.phase is up:
                try:
                    fn()
                except Exception as exc:  # noqa: BLE001 - as the production coordinator does
                    node.on_error(exc)
            elif node.phase is stalled:
                heapq.heappush(queue, (node.resume_at, next(self._seq), fn, node))
        self.now = max(self.now, end)


class SimHost:
    """``Host`` on virtual time, for one node, with a wall clock of its own.

    The node's wall clock reads the world's time plus ``offset``, which :meth:`step`
    moves as an NTP step or a resumed VM would. Delays (``call_later``) run on the
    world's time, as the production timer keeps them on the monotonic clock. Callbacks
    due at a wall-clock time (``call_at``, ``execute_at``) run when this node's clock
    reaches that time, and a step moves them as it moves the production timer's
    (:mod:`shardcron.scheduler.timers`): see :meth:`step`.
    """

    def __init__(self, world: World, node: Node) -> None:
        self.world = world
        self.node = node
        self.offset = 0.0  # this node's wall clock minus the world's time
        # Callbacks due at a wall-clock time, not run yet, by key: a step moves them.
        self._walls: dict[int, tuple[float, Callable[[], None]]] = {}
        self._keys = itertools.count()
        self._steps = 0  # bumped by each step: a callback armed before it is void
        self._wake = 0.0  # no wall-clock callback runs before then (world time)

    def now(self) -> float:
        return self.world.now + self.offset

    def released(self) -> float:
        # The virtual clock runs each callback at its moment: the timer's tick is now.
        return self.now()

    def monotonic(self) -> float:
        return self.world.now

    def released_monotonic(self) -> float:
        return self.world.now

    @property
    def chains_items(self) -> bool:
        return False  # one item per step: each item gets its own drawn duration

    def coordinate(self, fn: Callable[[], None]) -> None:
        self.world.at(self.world.now, fn, self.node)

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        self.world.at(self.world.now + delay, fn, self.node)

    def call_at(self, when: float, fn: Callable[[], None]) -> None:
        key = next(self._keys)
        self._walls[key] = (when, fn)
        self._arm(key, max(when - self.offset, self._wake))

    def _arm(self, key: int, at: float) -> None:
        steps = self._steps

        def due() -> None:
            if steps == self._steps:  # else a step armed it again
                self._walls.pop(key)[1]()

        self.world.at(at, due, self.node)

    def step(self, amount: float, noticed: float) -> None:
        """The wall clock steps by ``amount`` seconds (back if negative).

        As the production timer does: callbacks due at a wall-clock time stay at that time,
        so after a step back they come that much later, and none comes twice. After a step
        forward those now due are released together when the timer notices the step: its
        thread sleeps until its next entry, but never longer than a second, so ``noticed``
        (drawn below a second) from now, or sooner if an entry was due sooner than that.
        """
        before, self.offset = self.offset, self.offset + amount
        self._steps += 1
        if amount > 0:
            soonest = min((when - before for when, _ in self._walls.values()), default=math.inf)
            self._wake = max(self.world.now, min(self.world.now + noticed, soonest))
        for key, (when, _) in sorted(self._walls.items(), key=lambda kv: (kv[1][0], kv[0])):
            self._arm(key, max(when - self.offset, self._wake))

    def execute_at(
        self,
        when: float,
        works: Sequence[Callable[[], T]],
        then: Callable[[T], None],
        next_claim: float | None,
        returned: Callable[[T], None] | None = None,
    ) -> None:
        def start() -> None:
            for work in works:
                self.execute(work, then, returned)

        self.call_at(when, start)  # the production timer hands them over at that time

    def execute(
        self,
        work: Callable[[], T],
        then: Callable[[T], None],
        returned: Callable[[T], None] | None = None,
    ) -> None:
        """Run ``work`` now; ``then`` comes back after the duration the runner drew
        (at once for work that is not an item: listeners, error handlers), and
        ``returned`` with it: the work has returned by then, not before."""
        node = self.node
        node.pending = None
        result = work()
        pending, node.pending = node.pending, None
        if pending is None:
            if returned is not None:
                returned(result)
            self.world.at(self.world.now, lambda: then(result), node)
            return
        duration, record_end = pending
        key = id(record_end)
        node.open_runs[key] = record_end

        def back() -> None:
            if node.open_runs.pop(key, None) is not None:
                record_end()
            if returned is not None:
                returned(result)
            then(result)

        self.world.at(self.world.now + duration, back, node)

    def end_runs(self) -> None:
        """The process died: its items stop with it."""
        for record_end in list(self.node.open_runs.values()):
            record_end()
        self.node.open_runs.clear()


class SessionEvents:
    """A registry session's event sink (``MemoryRegistry(events=...)``): inline while no
    lag is set; otherwise every event is queued ``lag`` seconds later, in order."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.lag = 0.0
        self.stopped = False
        self._backlog = 0
        self._last = 0.0

    def submit(self, fn: Callable[[], None]) -> None:
        if self.stopped:
            return
        if self.lag <= 0 and self._backlog == 0:
            fn()
            return
        self._backlog += 1
        self._last = max(self._last, self.world.now + self.lag)

        def deliver() -> None:
            self._backlog -= 1
            if not self.stopped:
                fn()

        self.world.at(self._last, deliver)

    def is_current(self) -> bool:
        return True

    def stop(self) -> None:
        self.stopped = True
