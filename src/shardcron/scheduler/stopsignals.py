"""Waiting in the main thread for SIGINT or SIGTERM, whichever thread the kernel gives it to.

CPython runs a Python signal handler in the main thread only, but the kernel may deliver a
signal sent to the process to any of its threads. A signal taken by another thread only
marks the handler as due: a main thread asleep in a lock (``threading.Event.wait()``) is
not woken, and never runs it. A worker's main thread waiting that way ignored SIGTERM in 2
runs of 40 on a loaded 2-core machine: the pool, timer and coordinator threads took it.

The wakeup fd is written by the C-level handler in whichever thread runs it, so the main
thread here sleeps reading the other end of a socket pair, and the signal number it reads
is the decision: nothing depends on when the Python-level handler runs.
"""

from __future__ import annotations

import signal
import socket
from types import FrameType, TracebackType
from typing import Any, Self

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _ignore(_signum: int, _frame: FrameType | None) -> None:
    """Only a Python-level handler makes the interpreter write to the wakeup fd."""


class StopSignals:
    """While entered (from the main thread), SIGINT and SIGTERM do nothing but end
    :meth:`wait`; on exit the previous handlers and wakeup fd come back."""

    def __enter__(self) -> Self:
        self._read, self._write = socket.socketpair()
        self._write.setblocking(False)  # the interpreter requires it of a wakeup fd
        self._previous_fd = signal.set_wakeup_fd(self._write.fileno(), warn_on_full_buffer=False)
        self._previous: dict[int, Any] = {
            signum: signal.signal(signum, _ignore) for signum in STOP_SIGNALS
        }
        return self

    def wait(self) -> signal.Signals:
        """Block until SIGINT or SIGTERM arrives; other handled signals are passed over."""
        while True:
            for number in self._read.recv(64):
                if number in STOP_SIGNALS:
                    return signal.Signals(number)

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        for signum, handler in self._previous.items():
            if handler is not None:  # None: set outside Python, which we cannot put back
                signal.signal(signum, handler)
        signal.set_wakeup_fd(self._previous_fd)
        self._read.close()
        self._write.close()
