"""What a stop waits for, per job: no item of it running on this instance (idle), then
its registration removed (gone)."""

from __future__ import annotations

import threading

# One condition for the idle flags of every job of the process: a threading.Event per job
# cost 0.8 KiB (its condition's waiter deque), most of a job's budget of 30 KiB.
_IDLE_CHANGED = threading.Condition()


class IdleFlag:
    """One job's flag (set while no item of it runs here, or once it is gone); its users
    treat it as a :class:`threading.Event` (``is_set``, ``set``, ``clear``, ``wait``)."""

    __slots__ = ("_set",)

    def __init__(self, is_set: bool = True) -> None:
        self._set = is_set

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        with _IDLE_CHANGED:
            self._set = True
            _IDLE_CHANGED.notify_all()

    def clear(self) -> None:
        self._set = False

    def wait(self, timeout: float | None = None) -> bool:
        with _IDLE_CHANGED:
            return _IDLE_CHANGED.wait_for(self.is_set, timeout)
