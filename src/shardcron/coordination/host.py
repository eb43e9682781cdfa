"""The edges of coordination: the clock, the coordinator queue and the workers.

Coordination decides on one thread and reaches the outside world only through a
:class:`Host`: the scheduler's is real threads and time, the simulation's a virtual clock.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

T = TypeVar("T")


class Host(Protocol):
    """The edges of coordination: the clock, the coordinator queue and the workers."""

    def now(self) -> float:
        """Epoch seconds (virtual in the simulation)."""
        ...

    def released(self) -> float:
        """When the timer released the callback now running on the coordinator (``now()``
        outside a timer callback). Lateness measured against it counts a stalled process
        or a clock jump, not the time the callback queued behind other work of its tick."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock no step of the wall clock moves (virtual in the simulation):
        for how long something took, never for a fire's second."""
        ...

    def released_monotonic(self) -> float:
        """:meth:`released` on the :meth:`monotonic` clock."""
        ...

    def coordinate(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the coordinator thread, after what is queued there."""
        ...

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the coordinator thread ``delay`` seconds from now, however the
        wall clock steps meanwhile."""
        ...

    def call_at(self, when: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the coordinator thread at the wall-clock time ``when`` (epoch
        seconds): after a step back of the wall clock, that much later."""
        ...

    def execute(
        self,
        work: Callable[[], T],
        then: Callable[[T], None],
        returned: Callable[[T], None] | None = None,
    ) -> None:
        """Run ``work`` (user code) on a worker, then ``then(result)`` on the coordinator.
        ``returned(result)`` runs where and when the work returns, ahead of ``then``: what
        the coordinator, if it is behind, has not heard yet."""
        ...

    def execute_at(
        self,
        when: float,
        works: Sequence[Callable[[], T]],
        then: Callable[[T], None],
        next_claim: float | None,
        returned: Callable[[T], None] | None = None,
    ) -> None:
        """:meth:`execute` for each of ``works``, handed to workers at ``when`` (epoch
        seconds) by the timer itself, not by the coordinator. ``next_claim``: when the
        job claims its next fire, which should find this one completed (None: never)."""
        ...

    @property
    def chains_items(self) -> bool:
        """Whether a lane's worker starts the fire's next waiting item itself (saves two
        thread hand-offs per item in production; the simulation runs one item a step)."""
        ...
