"""The fault layer: a :class:`Registry` wrapper that breaks chosen requests.

For any request (get, stat, children, create, put, delete, transaction, server_time) a
planted :class:`Fault` can fail it *before* it is applied or apply it and lose the
*answer*; either way the caller gets :class:`ConnectionLostError` and the session's
connection drops for a drawn virtual delay (``MemoryRegistry.disconnect``). While it is
down every request fails fast; if the outage outlasts the session timeout the server
expires the session, and the client learns it on reconnecting (EXPIRED, a new session,
CONNECTED). Expiry, cache lag and slow answers are driven by the scenario (see
``scenario.py``).

Slow requests (:meth:`FaultyRegistry.slow_requests`): while a window is open, every
request sent without waiting (``send_transaction``) is applied a drawn delay later, in
the order sent (one TCP connection keeps a session's requests in order), and answered
then; every other event of the world goes on meanwhile. A request still on its way when
the connection drops or the session ends is never applied: it fails with
:class:`ConnectionLostError`, as ZooKeeper fails the requests of a connection it lost.
The coordination requests sent without waiting are those of the group commit
(:mod:`shardcron.coordination.groupcommit`): claims, completions, misfire flags written
and taken, and a layout's commit. Synchronous calls (``get``, ``stat``,
``get_with_stats``, ``children``, ``create``, ``put``, ``delete``, ``transaction``,
``server_time``, a cache's load) cannot let other events interleave in this
single-threaded model: the caller would have to wait without the world moving on. They
are applied at once, after the requests still on their way (the session's order holds),
so these are never late: the registration, the election and its abdication, a layout's
``processing`` node and a layout written in parts, failover claims, the leader's repairs
of stale claims and its other sweep repairs, lease and instance writes, deregistration,
and every read. Those races are checked by tests that make the registry late on purpose
(``tests/test_late_repairs.py``).

:func:`kind_of` names the coordination request kind from the ops it carries, so the
systematic fault points (``tests/test_fault_points.py``) can aim at one kind exactly.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from shardcron.coordination.paths import JobPaths, job_of
from shardcron.errors import ConnectionLostError, RegistryError
from shardcron.registry import (
    Answer,
    CacheSpec,
    Check,
    Create,
    Delete,
    Lock,
    Node,
    NodeListener,
    Op,
    OpResult,
    SessionListener,
    SetData,
    Stat,
    TreeCache,
    settle,
)
from shardcron.registry.memory import MemoryRegistry

T = TypeVar("T")


class Timing(StrEnum):
    BEFORE = "lost-before-applied"
    AFTER = "applied-answer-lost"


class Kind(StrEnum):
    """Coordination request kinds, told apart by the paths their ops touch."""

    CLAIM = "claim"
    COMPLETION = "completion"
    FAILOVER_CLAIM = "failover-claim"
    FAILOVER_QUEUE = "failover-queue"
    RESHARD_PROCESSING = "reshard-processing"
    RESHARD_COMMIT = "reshard-commit"
    ELECTION = "election"
    REGISTRATION = "registration"
    MISFIRE_WRITE = "misfire-write"
    MISFIRE_TAKE = "misfire-take"
    OTHER = "other"


def _role(op: Op) -> tuple[type, str]:
    """What an op does to which node of the job layout (:class:`JobPaths`), e.g.
    ``(Create, "running")`` or ``(Delete, "necessary")``."""
    paths = JobPaths(job_of(op.path))
    path = op.path
    named = {
        paths.sharding_processing: "processing",
        paths.sharding_necessary: "necessary",
        paths.election_instance: "election",
    }
    if path in named:
        return type(op), named[path]
    for parent, role in ((paths.instances, "instance"), (paths.failover_items, "queue")):
        if paths.child_name(parent, path) is not None:
            return type(op), role
    parsed = paths.parse_item(path)
    if parsed is not None:  # sharding/{i}/instance names the item's owner
        return type(op), {"": "item", "instance": "owner"}.get(parsed[1], parsed[1])
    return type(op), ""


def kind_of(method: str, ops: Sequence[Op]) -> Kind:
    """The coordination kind of one request (``ops``: the transaction's, or one op
    standing for a single create/delete/put), told from the nodes the ops touch."""
    roles = {_role(op) for op in ops}
    if (Create, "failover") in roles and (Create, "running") in roles:
        return Kind.FAILOVER_CLAIM
    if (Create, "running") in roles:
        return Kind.CLAIM
    # A dead holder's claim repaired (queued for failover, or misfired) is conditional on
    # the item node as a completion is: what it creates tells them apart.
    if (Create, "queue") in roles:
        return Kind.FAILOVER_QUEUE
    if (Check, "item") in roles and (Delete, "running") in roles and (Create, "misfire") in roles:
        return Kind.MISFIRE_WRITE
    if (Check, "item") in roles and (Delete, "running") in roles:
        return Kind.COMPLETION
    if (Create, "instance") in roles:  # one transaction, with the job's election if new
        return Kind.REGISTRATION
    if method == "create" and (Create, "processing") in roles:
        return Kind.RESHARD_PROCESSING
    if (Delete, "necessary") in roles and method == "transaction":
        return Kind.RESHARD_COMMIT
    if method == "create" and (Create, "election") in roles:
        return Kind.ELECTION
    if (Create, "misfire") in roles:
        return Kind.MISFIRE_WRITE
    if (Delete, "misfire") in roles:
        return Kind.MISFIRE_TAKE
    return Kind.OTHER


@dataclass(eq=False)
class Sent:
    """A request sent without waiting, on its way while requests are slow."""

    ops: Sequence[Op]
    answer: Callable[[Answer], None]
    session: int
    link: int  # the connection it was sent on (MemoryRegistry.links)
    done: bool = False


@dataclass
class Fault:
    """Break the first request matching ``kind`` (any kind if None); ``outage`` is how
    long the connection then stays down."""

    timing: Timing
    outage: float
    kind: Kind | None = None
    fired: bool = False


class FaultyRegistry:
    """Delegates to a :class:`MemoryRegistry`, breaking the request a planted fault names.

    ``on_break(outage)`` is called when a fault fires: the world drops the connection
    and schedules the reconnect (see ``scenario.Cluster.disconnect``).
    """

    def __init__(
        self,
        inner: MemoryRegistry,
        on_break: Callable[[float], None],
        on_fault: Callable[[Fault, Kind], None] = lambda _f, _k: None,
        clock: Callable[[], float] = lambda: 0.0,
        defer: Callable[[float, Callable[[], None]], None] | None = None,
    ) -> None:
        self.inner = inner
        self.clock = clock
        self.defer = defer
        # A slow link (see send_transaction): answers wait this long, and never overtake.
        self.answer_delay = 0.0
        self._answer_due = 0.0
        # Slow requests (see slow_requests): the delay of each request sent, if a window
        # is open; the requests on their way, in the order sent; when the last applies.
        self.request_delay: Callable[[], float] | None = None
        self._sent: deque[Sent] = deque()
        self._apply_due = 0.0
        self._applying = False
        self.on_break = on_break
        self.on_fault = on_fault
        self.faults: list[Fault] = []
        self.paused = False  # the ledger's own reads are never broken
        # Fencing token -> (session, when) of each claim made with it: a registry that lost
        # its data starts its transaction ids, so the tokens, over.
        self.claims: dict[int, list[tuple[int, float]]] = {}

    # -- plumbing -------------------------------------------------------------------------

    def _call(self, method: str, ops: Sequence[Op], fn: Callable[[], T]) -> T:
        if self._sent and not self.paused and not self._applying:
            self._apply_sent(self._sent[-1])  # a session's requests apply in order
        if self.faults and not self.paused and self.inner._link_up:
            kind = kind_of(method, ops)
            for fault in self.faults:
                if fault.kind is None or fault.kind is kind:
                    self.faults.remove(fault)
                    fault.fired = True
                    self.on_fault(fault, kind)
                    if fault.timing is Timing.AFTER:
                        with contextlib.suppress(RegistryError):
                            self._seen(ops, fn())  # applied (or refused): the answer is lost
                    self.on_break(fault.outage)
                    raise ConnectionLostError(f"simulated: {fault.timing} ({kind})")
        return self._seen(ops, fn())

    def _seen(self, ops: Sequence[Op], result: T) -> T:
        """Remember which session made each claim (for I1's allowance, see checks.py)."""
        if isinstance(result, list) and any(
            isinstance(op, Create) and op.path.endswith("/running") for op in ops
        ):
            for stat in result:
                if isinstance(stat, Stat):
                    made = (self.inner.session_id, self.clock())
                    self.claims.setdefault(stat.mzxid, []).append(made)
        return result

    @property
    def namespace(self) -> str:
        return self.inner.namespace

    @property
    def session_id(self) -> int:
        return self.inner.session_id

    @property
    def request_count(self) -> int:
        return self.inner.request_count

    @property
    def connected(self) -> bool:
        return self.inner.connected

    def start(self, timeout: float = 15.0) -> None:
        self.inner.start(timeout)

    def close(self) -> None:
        self.inner.close()

    def add_session_listener(self, listener: SessionListener) -> None:
        self.inner.add_session_listener(listener)

    # -- requests -------------------------------------------------------------------------

    def get(self, path: str) -> bytes | None:
        return self._call("get", [Check(path)], lambda: self.inner.get(path))

    def stat(self, path: str) -> Stat | None:
        return self._call("stat", [Check(path)], lambda: self.inner.stat(path))

    def get_with_stats(self, paths: Sequence[str]) -> list[Node | None]:
        checks = [Check(path) for path in paths]
        return self._call("get_with_stats", checks, lambda: self.inner.get_with_stats(paths))

    def children(self, path: str) -> list[str]:
        return self._call("children", [Check(path)], lambda: self.inner.children(path))

    def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequential: bool = False
    ) -> str:
        return self._call(
            "create",
            [Create(path, data, ephemeral, sequential)],
            lambda: self.inner.create(path, data, ephemeral=ephemeral, sequential=sequential),
        )

    def put(self, path: str, data: bytes) -> None:
        self._call("put", [SetData(path, data)], lambda: self.inner.put(path, data))

    def delete(self, path: str, *, recursive: bool = False) -> None:
        self._call("delete", [Delete(path)], lambda: self.inner.delete(path, recursive=recursive))

    def transaction(self, ops: Sequence[Op]) -> list[OpResult]:
        return self._call("transaction", ops, lambda: self.inner.transaction(ops))

    def send_transaction(self, ops: Sequence[Op], answer: Callable[[Answer], None]) -> None:
        if self.defer is not None and (self.request_delay is not None or self._sent):
            self._send_slowly(ops, answer)
            return
        self._answer(settle(lambda: self.transaction(ops)), answer)

    def _answer(self, result: Answer, answer: Callable[[Answer], None]) -> None:
        now = self.clock()
        if self.defer is None or (not self.answer_delay and self._answer_due <= now):
            answer(result)
            return
        # A slow link or a busy server: applied now, answered later, in the order sent.
        self._answer_due = max(now + self.answer_delay, self._answer_due)
        self.defer(self._answer_due, lambda: answer(result))

    # -- slow requests ---------------------------------------------------------------------

    def slow_requests(self, delay: Callable[[], float] | None) -> None:
        """Open a window of slow requests (``delay`` draws each one's), or close it (None):
        the requests on their way still apply when due."""
        self.request_delay = delay

    def _send_slowly(self, ops: Sequence[Op], answer: Callable[[Answer], None]) -> None:
        assert self.defer is not None
        sent = Sent(ops, answer, self.inner.session_id, self.inner.links)
        self._sent.append(sent)
        delay = self.request_delay() if self.request_delay is not None else 0.0
        self._apply_due = max(self.clock() + delay, self._apply_due)
        self.defer(self._apply_due, lambda: self._apply_sent(sent))

    def _apply_sent(self, last: Sent) -> None:
        """Apply the requests on their way up to ``last``, in the order sent, and answer."""
        if last.done or self._applying:
            return
        self._applying = True
        try:
            while self._sent:
                sent = self._sent.popleft()
                sent.done = True
                self._answer(self._apply_one(sent), sent.answer)
                if sent is last:
                    return
        finally:
            self._applying = False

    def _apply_one(self, sent: Sent) -> Answer:
        inner = self.inner
        if inner.session_id != sent.session or inner.links != sent.link or not inner._link_up:
            return ConnectionLostError("simulated: the connection was lost on the way")
        return settle(lambda: self.transaction(sent.ops))

    def server_time(self, path: str) -> float:
        return self._call("server_time", [SetData(path, b"")], lambda: self.inner.server_time(path))

    def tree_cache(
        self,
        path: str,
        listener: NodeListener | None = None,
        skip_data: Callable[[str], bool] | None = None,
        timeout: float = 15.0,
    ) -> TreeCache:
        if self._sent:
            self._apply_sent(self._sent[-1])
        return self.inner.tree_cache(path, listener, skip_data, timeout)

    def tree_caches(self, specs: Sequence[CacheSpec], timeout: float = 15.0) -> list[TreeCache]:
        if self._sent:
            self._apply_sent(self._sent[-1])
        return list(self.inner.tree_caches(specs, timeout))

    def lock(self, path: str) -> Lock:
        return self.inner.lock(path)
