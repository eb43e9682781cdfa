"""The threads that run job code: up to a fixed number, woken as the queue needs them.

Work waits in one queue. A thread that ends its work takes the next, so as long as work
moves, the threads awake drain the queue. Another thread is woken (or started, up to
``max_workers``) only when no thread is awake, or when the queue has not moved for
:data:`STALL_SECONDS`: the threads awake are all blocked, in I/O or a long item. Each
such stall wakes as many threads again as are awake, so a burst of blocking items has the
whole pool within a few stalls. A garbage collection in between is not a stall: it stops
every thread, and the queue did not move because nothing ran (a busy worker of thousands
of jobs collects a few times a second, 20-80 ms each, and had its whole pool awake).

Why not a thread per queued item, as ``ThreadPoolExecutor`` does: every woken thread
wants the GIL, and a thread running items of a few microseconds gives it up at each
system call (the item's write, say). With 32 threads awake, a burst of 10,000 such
items took 2.5 times as long to start as on one thread, every item a switch between
threads; a herd's items, a worker's every-second jobs, all ran that way.

No Futures: the scheduler never looks at one (an item reports its end to the coordinator
itself). The threads are daemons: :meth:`shardcron.scheduler.Scheduler.stop` is what waits
for running items; an interpreter exiting without it abandons them, as a crash would
(their claims fail over once the session ends).
"""

from __future__ import annotations

import gc
import logging
import threading
from collections import deque
from collections.abc import Callable

log = logging.getLogger(__name__)

Work = Callable[[], None]

# Long enough that a queue of short items moves between two looks (an item takes
# microseconds), short enough that blocking items barely wait for a thread.
STALL_SECONDS = 0.002


def collections_so_far() -> int:
    """The garbage collections of this process so far, of every generation."""
    return sum(generation["collections"] for generation in gc.get_stats())


class WorkerPool:
    def __init__(
        self,
        max_workers: int,
        name: str,
        stall: float = STALL_SECONDS,
        collections: Callable[[], int] = collections_so_far,
    ) -> None:
        self.max_workers = max_workers
        self._name = name
        self._stall = stall
        self._collections = collections
        self._work: deque[Work] = deque()
        self._lock = threading.Lock()
        self._watching = threading.Condition(self._lock)  # the stall watch waits on it
        self._parked: list[threading.Lock] = []  # idle threads, each blocked on its lock
        self._threads = 0
        self._awake = 0  # threads not parked: running work, or about to take some
        self._watch_started = False
        self._watch_idle = False  # the watch waits for work (else it is looking)
        self._running: deque[None] = deque()  # one entry per thread running work
        self._closed = False

    @property
    def busy(self) -> int:
        """Threads running work (appends and pops of a deque are atomic: no lock)."""
        return len(self._running)

    def submit(self, work: Work) -> None:
        """Queue ``work``: a thread takes it now if none is awake, else the threads awake
        take it in turn, and more wake if the queue stops moving. Ignored once shut down."""
        with self._lock:
            if self._closed:
                return
            self._work.append(work)
            if self._awake == 0:
                self._wake(1)
            if not self._watch_started:
                self._watch_started = True
                threading.Thread(
                    target=self._watch_stalls, name=f"{self._name}_watch", daemon=True
                ).start()
            elif self._watch_idle:
                self._watch_idle = False
                self._watching.notify()

    def shutdown(self) -> None:
        """Drop the work not started yet; each thread ends after its current item."""
        with self._lock:
            self._closed = True
            self._work.clear()
            for parked in self._parked:
                parked.release()
            self._parked.clear()
            self._watching.notify()

    def _wake(self, count: int) -> None:
        """Under the lock: unpark ``count`` threads, or start them while fewer than
        ``max_workers`` exist."""
        for _ in range(count):
            if self._parked:
                self._parked.pop().release()
            elif self._threads < self.max_workers:
                self._threads += 1
                threading.Thread(
                    target=self._run, name=f"{self._name}_{self._threads - 1}", daemon=True
                ).start()
            else:
                return
            self._awake += 1

    def _watch_stalls(self) -> None:
        """The queue has not moved if the work at its head is what it was at the last look
        (each submit queues a new callable), and no garbage collection came in between."""
        with self._lock:
            seen: Work | None = None
            collected = -1
            while not self._closed:
                try:
                    head = self._work[0]
                except IndexError:  # threads take work without the lock; submit takes it
                    self._watch_idle, seen = True, None
                    self._watching.wait()  # until submit queues work, or shutdown
                    continue
                collections = self._collections()
                if head is seen and collections == collected:
                    self._wake(max(1, self._awake))
                seen, collected = head, collections
                self._watching.wait(self._stall)

    def _run(self) -> None:
        parked = threading.Lock()
        parked.acquire()
        while True:
            try:
                work = self._work.popleft()  # atomic: the lock only to park
            except IndexError:
                with self._lock:
                    if self._closed:
                        return
                    if self._work:
                        continue
                    self._awake -= 1
                    self._parked.append(parked)
                parked.acquire()  # until _wake or shutdown releases it
                continue
            self._running.append(None)
            try:
                work()
            except Exception:  # job code is wrapped already: this is a bug of ours
                log.exception("shardcron worker task failed")
            finally:
                self._running.pop()
