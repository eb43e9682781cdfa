"""The threads that run job code: up to a fixed number, started as work comes, fed by one
queue.

``concurrent.futures.ThreadPoolExecutor`` builds a Future (a Condition and its locks) for
every submit; the scheduler never looks at it (an item reports its end to the coordinator
itself), and with thousands of items a second those Futures cost more CPU than the
hand-off. The threads are daemons: :meth:`shardcron.scheduler.Scheduler.stop` is what waits
for running items; an interpreter exiting without it abandons them, as a crash would (their
claims fail over once the session ends).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable

log = logging.getLogger(__name__)

Work = Callable[[], None]


class WorkerPool:
    def __init__(self, max_workers: int, name: str) -> None:
        self.max_workers = max_workers
        self._name = name
        self._queue: queue.SimpleQueue[Work | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        # Threads done with their work, less the work queued since: while above 0,
        # submit starts no thread. It counts high once every thread is started (work
        # queued then takes none), when it no longer matters, so it cannot tell how many
        # threads are busy.
        self._idle = 0
        self._running: deque[None] = deque()  # one entry per thread running work
        self._closed = False

    @property
    def busy(self) -> int:
        """Threads running work (appends and pops of a deque are atomic: no lock)."""
        return len(self._running)

    def submit(self, work: Work) -> None:
        """Run ``work`` on an idle thread, or a new one while fewer than ``max_workers``
        run, or else once a thread is free. Ignored once the pool is shut down."""
        with self._lock:
            if self._closed:
                return
            if self._idle > 0:
                self._idle -= 1
            elif self._threads < self.max_workers:
                self._threads += 1
                number = self._threads - 1
                threading.Thread(
                    target=self._run, name=f"{self._name}_{number}", daemon=True
                ).start()
            self._queue.put(work)

    def shutdown(self) -> None:
        """Drop the work not started yet; each thread ends after its current item."""
        with self._lock:
            self._closed = True
            while True:
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    break
            for _ in range(self._threads):
                self._queue.put(None)

    def _run(self) -> None:
        while True:
            work = self._queue.get()
            if work is None:
                return
            self._running.append(None)
            try:
                work()
            except Exception:  # job code is wrapped already: this is a bug of ours
                log.exception("shardcron worker task failed")
            finally:
                self._running.pop()
            with self._lock:
                if self._closed:
                    return
                self._idle += 1
