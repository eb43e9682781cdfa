"""Group commit: the claims and completions of every job of a process, one multi-op a tick.

A process's jobs due in the same tick do not send a transaction each. They hand a
:class:`Request` to the process's :class:`GroupCommit`, which sends every request queued
by then as one transaction once the coordinator has run what is due now (cut into chunks
under ZooKeeper's request size limit), so a tick costs one round trip for the claims of
all jobs due in it, whatever the number of jobs. A completion waits (briefly) for those
of the other fires running in the process, so they go out together too. A chunk that
fills goes out at once, while the coordinator prepares the rest of the tick; the
coordinator never waits for an answer, it reads it when its turn comes (ZooKeeper
applies a session's transactions in the order they were sent).

The protocol, all on the coordinator thread:

* a request gives its current ops (``ops()``); none left means it is finished;
* the transaction went through: the request reads its slice of the results
  (``applied``), then its ``then`` callback runs with ``None``;
* the registry refused the transaction at one op: nothing of it was applied. The request
  owning that op is told (``refused``); if it can go on without it (an item claimed
  elsewhere meanwhile, a node already gone), its remaining ops are sent again with every
  other request of the chunk; if not, its ``then`` gets the error. One job's contention
  costs the others one more round trip, never their fire;
* any other registry error (a lost connection, a lost answer) goes to every request of
  the chunk: whether it was applied is for each to settle, as it would for its own.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from shardcron.errors import RegistryError, TransactionError
from shardcron.registry import Answer, Op, Registry, fitting, prefix_bytes

if TYPE_CHECKING:
    from shardcron.coordination.host import Host

log = logging.getLogger(__name__)

# Ops per chunk: bounds a chunk's answer too, which the request's size does not (an
# item's claim answer is about 200 bytes: 2,000 items' answers stay under 0.5 MiB).
MAX_CHUNK_OPS = 6000
# How long a completion waits for those of the other fires running in the process.
COMPLETION_WAIT_SECONDS = 0.05


class Request(Protocol):
    def ops(self) -> list[Op]:
        """The ops still to apply; an empty list when the request has nothing left."""
        ...

    def applied(self, results: Sequence[object]) -> None:
        """Everything ``ops()`` gave went through; ``results`` holds one result per op."""
        ...

    def refused(self, index: int, cause: RegistryError) -> bool:
        """The registry refused op ``index`` of ``ops()`` (nothing was applied). True when
        the request can go on without it (``ops()`` then gives what is left)."""
        ...


Then = Callable[[RegistryError | None], None]


def run_now(registry: Registry, request: Request) -> None:
    """Apply ``request`` on its own, at once (for rare requests that need no batching)."""
    while ops := request.ops():
        try:
            results = registry.transaction(ops)
        except TransactionError as exc:
            if not request.refused(exc.index, exc.cause):
                raise
            continue
        request.applied(results)
        return


class GroupCommit:
    """The requests of one process's jobs, sent together after the current tick."""

    def __init__(self, registry: Registry, host: Host) -> None:
        self.registry = registry
        self.host = host
        self._queue: list[tuple[Request, Then]] = []
        self._ops = 0  # in the queue
        self._soon = self._later = False  # a flush is queued on the coordinator / armed
        self._running = 0  # claimed fires whose completion has not been submitted yet

    def submit(self, request: Request, then: Then) -> None:
        """Queue ``request``; it goes out once the coordinator has run what is queued there
        now (the jobs due in this tick), or at once with a chunk it fills. ``then`` runs on
        the coordinator once it settled, never inside ``submit``."""
        self._enqueue(request, then)
        self._flush_soon()

    def _enqueue(self, request: Request, then: Then) -> None:
        self._queue.append((request, then))
        self._ops += len(request.ops())
        if self._ops >= MAX_CHUNK_OPS:
            # Full chunks go out now: ZooKeeper applies them while the coordinator prepares
            # the rest of the tick (10,000 jobs take it half a second).
            self.flush(whole_chunks=True)

    def claimed(self) -> None:
        """A claimed fire runs: its completion is expected."""
        self._running += 1

    def submit_completion(self, request: Request, then: Then) -> None:
        """Like :meth:`submit`, for a fire's completion: it waits for the completions of
        the other fires running here, up to :data:`COMPLETION_WAIT_SECONDS`, so the items
        of one tick complete in one transaction too."""
        self._enqueue(request, then)
        self._running = max(0, self._running - 1)
        if self._running == 0:
            self._flush_soon()
        elif not self._later:
            self._later = True
            self.host.call_later(COMPLETION_WAIT_SECONDS, self._flush_later)

    def _flush_soon(self) -> None:
        if not self._soon:
            self._soon = True
            self.host.coordinate(self._flush)

    def _flush(self) -> None:
        self._soon = False
        self.flush()

    def _flush_later(self) -> None:
        self._later = False
        self.flush()

    def flush(self, whole_chunks: bool = False) -> None:
        """Send what is queued; with ``whole_chunks``, only the chunks that are full."""
        queue, self._queue = self._queue, []
        prefix = prefix_bytes(self.registry)
        while queue:
            n = fitting((request.ops() for request, _ in queue), prefix, MAX_CHUNK_OPS)
            if whole_chunks and n == len(queue):
                break
            chunk, queue = queue[:n], queue[n:]
            for request, then in chunk:
                if not request.ops():
                    self.host.coordinate(functools.partial(_call, then, None))
            chunk = [(r, t) for r, t in chunk if r.ops()]
            if chunk:
                self._send(chunk)
        self._queue = queue
        self._ops = sum(len(request.ops()) for request, _ in queue)

    def _send(self, chunk: list[tuple[Request, Then]]) -> None:
        """Send one chunk without waiting: the coordinator goes on with the fires due
        meanwhile, and reads the answer once it is its turn."""
        slices = [request.ops() for request, _ in chunk]
        self.registry.send_transaction(
            [op for ops in slices for op in ops],
            lambda answer: self.host.coordinate(lambda: self._answered(chunk, slices, answer)),
        )

    def _answered(
        self, chunk: list[tuple[Request, Then]], slices: list[list[Op]], answer: Answer
    ) -> None:
        if isinstance(answer, TransactionError):
            index = answer.index
            for n, (request, then) in enumerate(chunk):
                if index < len(slices[n]):
                    if not request.refused(index, answer.cause):
                        _call(then, TransactionError(index, answer.op, answer.cause))
                        del chunk[n]
                    self._queue[:0] = chunk  # the rest again, ahead of anything newer
                    self._ops += sum(len(r.ops()) for r, _ in chunk)
                    self._flush_soon()
                    return
                index -= len(slices[n])
            failure: RegistryError = answer  # an op outside the transaction: nobody's to retry
        elif isinstance(answer, RegistryError):
            failure = answer
        else:
            start = 0
            for n, (request, then) in enumerate(chunk):
                request.applied(answer[start : start + len(slices[n])])
                start += len(slices[n])
                _call(then, None)
            return
        for _, then in chunk:
            _call(then, failure)


def _call(then: Then, error: RegistryError | None) -> None:
    try:
        then(error)
    except Exception:  # one job's failing callback must not cost the others theirs
        log.exception("shardcron group commit: a callback failed")
