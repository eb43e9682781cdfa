"""A claimed fire in flight: its items, claim and progress (:class:`Fire`), whether a staged
fire starts (:class:`Gate`), and what runs its items (:class:`Lanes`, implemented by
:mod:`shardcron.execution.lanes`).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from shardcron.coordination import claims
from shardcron.coordination.events import Event
from shardcron.coordination.paths import JobPaths
from shardcron.model import ExecutionSource, FireContext, ShardingContext
from shardcron.registry import Registry


class Gate:
    """Whether a staged fire starts, decided once: by its first lane on the second (on a
    worker: the claim still holds) or by a stop before it (on the coordinator: no)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started: bool | None = None  # None until decided

    def decide(self, start: Callable[[Fire], bool], fire: Fire) -> tuple[bool, bool]:
        """(whether the fire starts, whether this call decided it): ``start(fire)``
        decides, if no call did before."""
        with self._lock:
            if self.started is not None:
                return self.started, False
            self.started = start(fire)
            return self.started, True

    def cancel(self) -> bool:
        """On the coordinator, before the second: True when this call decided the fire
        does not start (False when a lane decided first)."""
        with self._lock:
            if self.started is not None:
                return False
            self.started = False
            return True


@dataclass(eq=False)
class Fire:
    """The items of one dispatch, counted down as lanes finish them."""

    items: list[int]
    claim: claims.Claim
    source: ExecutionSource
    session: int
    when: float = 0.0  # the second it fires for
    next_claim: float | None = None  # when its job claims again, if it will
    context: FireContext | None = None
    errors: dict[int, BaseException] = field(default_factory=dict)
    waiting: deque[ShardingContext] = field(default_factory=deque)
    active: int = 0
    # Items whose run began, and whose run returned, added by the workers: the
    # coordinator may not have heard yet (it is behind), and reads these only to say why
    # a later fire skips them. Dicts used as ordered sets: one of ints only is not tracked
    # by the garbage collector, where two lists per fire in flight were scanned by it.
    started: dict[int, None] = field(default_factory=dict)
    returned: dict[int, None] = field(default_factory=dict)
    ended: bool = False  # the after listeners and the final status were sent
    # A fire of these items due while this one held them: (source, second, items),
    # claimed once this one's completion is applied (see Firing._follow).
    follow: tuple[ExecutionSource, float, list[int]] | None = None
    gate: Gate | None = None  # set when staged


class Lanes(Protocol):
    """What runs a claimed fire's items: user code on workers, listeners, error reports."""

    @property
    def stages(self) -> bool:
        """Whether a fire claimed ahead of its second may be staged on the host's timer."""
        ...

    def begin(
        self,
        fire: Fire,
        contexts: list[ShardingContext],
        total: int,
        parameter: str,
        lanes: int,
        at: float | None = None,
    ) -> None:
        """Start ``fire`` now, or stage it to start at ``at``."""
        ...

    def end(self, fire: Fire) -> None:
        """After the registry completion: the ``after`` listeners and the fire's status."""
        ...

    def report(self, ctx: ShardingContext | None, error: BaseException) -> bool:
        """Hand ``error`` to the job's error handler; False if the handler raised (THROW)."""
        ...

    def bind(self, registry: Registry, paths: JobPaths, instance: str) -> None:
        """The job registered: distributed listeners coordinate through the registry."""
        ...

    def unbind(self) -> None:
        """The job left: listeners let go of the registry."""
        ...


@dataclass(frozen=True, slots=True)
class LaneHooks:
    """What the lanes of one job call back on the coordinator's side."""

    emit: Callable[[Event], None]
    on_done: Callable[[Fire], None]  # the last item returned: complete the fire
    may_start: Callable[[Fire], bool]  # whether the fire's claim still holds
    on_refused: Callable[[Fire, list[int]], None]  # items that did not start


LanesFactory = Callable[[LaneHooks], Lanes]
