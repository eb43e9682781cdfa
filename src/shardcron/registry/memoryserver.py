"""The embedded registry's server: the one in-process tree its sessions share.

A :class:`MemoryServer` plays the ZooKeeper ensemble for :mod:`shardcron.registry.memory`
(whose :class:`~shardcron.registry.memory.MemoryRegistry` is one client session on it). It
owns the nodes, the sessions and the zxid: ephemeral nodes die with their session,
transactions are all or nothing, every change is told to every session in order, and
zxids grow monotonically until the server loses its data (fencing tokens derive from
them). ``expire``, ``set_up`` and ``lose_data`` are the fault hooks the simulation and
the fault tests pull.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from shardcron.errors import (
    BadVersionError,
    ConnectionLostError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RegistryError,
    SessionExpiredError,
    TransactionError,
)
from shardcron.registry.cache import join, parent_of
from shardcron.registry.contract import Check, Create, Delete, Op, OpResult, SetData, Stat


class Session(Protocol):
    """What the server calls on a client session, always under its lock.

    :class:`~shardcron.registry.memory.MemoryRegistry` is the one implementation; a
    Protocol rather than an import, so the server does not depend on its clients.
    """

    def _node_changed(self, full_path: str, data: bytes | None) -> None: ...
    def _begin_batch(self) -> None: ...
    def _end_batch(self, commit: bool) -> None: ...
    def _expired(self) -> None: ...
    def _connection_changed(self, up: bool) -> None: ...


@dataclass(slots=True)
class _Node:
    data: bytes
    czxid: int
    mzxid: int
    ctime_ms: int
    mtime_ms: int
    owner: int = 0
    version: int = 0
    children: set[str] = field(default_factory=set)
    sequence: int = 0  # children created so far: the next sequential node's suffix

    def stat(self) -> Stat:
        return Stat(
            version=self.version,
            czxid=self.czxid,
            mzxid=self.mzxid,
            ctime_ms=self.ctime_ms,
            mtime_ms=self.mtime_ms,
            ephemeral_owner=self.owner,
        )


class MemoryServer:
    """The shared tree. Thread-safe; every change notifies the watching sessions."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        """``clock`` gives node times (epoch seconds); the simulation passes its virtual one."""
        self.clock = clock
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self._zxid = 0
        self._nodes: dict[str, _Node] = {"/": _Node(b"", 0, 0, 0, 0)}
        self._sessions: dict[int, Session] = {}
        self._clients: list[Session] = []  # every client connected, with a session or not
        self._session_ids = itertools.count(0x1000)
        self.up = True

    # -- sessions -----------------------------------------------------------------------

    def open_session(self, client: Session) -> int:
        with self.lock:
            sid = next(self._session_ids)
            self._sessions[sid] = client
            if client not in self._clients:
                self._clients.append(client)
            return sid

    def detach(self, client: Session) -> None:
        """A closed client: the server tells it nothing more."""
        with self.lock:
            if client in self._clients:
                self._clients.remove(client)

    def close_session(self, sid: int) -> None:
        with self.lock:
            if self._sessions.pop(sid, None) is None:
                return
            self._zxid += 1
            for path in [p for p, n in self._nodes.items() if n.owner == sid]:
                if path in self._nodes:
                    self._delete_tree(path)
            self.changed.notify_all()

    def expire(self, sid: int) -> None:
        """Expire a session as ZooKeeper would after its timeout; the client sees EXPIRED."""
        client = self._sessions.get(sid)
        self.close_session(sid)
        if client is not None:
            client._expired()

    def set_up(self, up: bool) -> None:
        """Simulate the server going down (every client SUSPENDED) and coming back."""
        with self.lock:
            self.up = up
            clients = list(self._clients)
        for client in clients:
            client._connection_changed(up)

    def lose_data(self) -> None:
        """The server, down, loses its data, as a ZooKeeper rebuilt or restored from a
        backup comes back: every node and every session is gone, and transaction ids start
        over, so a client that has seen later ones is refused until it gives up on its
        session (see :class:`~shardcron.registry.memory.MemoryRegistry`)."""
        with self.lock:
            if self.up:
                raise RegistryError("lose_data() is for a server that is down: set_up(False)")
            self._nodes = {"/": _Node(b"", 0, 0, 0, 0)}
            self._sessions.clear()
            self._zxid = 0

    # -- tree operations (callers hold the lock) ----------------------------------------

    def _check_live(self, sid: int) -> None:
        if not self.up:
            raise ConnectionLostError("embedded registry is down")
        if sid not in self._sessions:
            raise SessionExpiredError(f"session {sid:#x} has expired")

    def _node(self, path: str) -> _Node:
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        return node

    def _create(self, sid: int, op: Create, make_parents: bool) -> str:
        parent = parent_of(op.path)
        if parent not in self._nodes:
            if not make_parents:
                raise NoNodeError(parent)
            self._create(sid, Create(parent), True)
        pnode = self._nodes[parent]
        if pnode.owner:
            raise RegistryError(f"{parent}: ephemeral nodes cannot have children")
        path = op.path
        if op.sequential:
            path = f"{op.path}{pnode.sequence:010d}"
        if path in self._nodes:
            raise NodeExistsError(path)
        now = int(self.clock() * 1000)
        self._nodes[path] = _Node(
            op.data, self._zxid, self._zxid, now, now, owner=sid if op.ephemeral else 0
        )
        pnode.children.add(path.rsplit("/", 1)[1])
        pnode.sequence += 1  # every child counts, as ZooKeeper's suffix (its cversion) does
        self._notify(path, op.data)
        return path

    def _set(self, op: SetData) -> Stat:
        node = self._node(op.path)
        if op.version != -1 and op.version != node.version:
            raise BadVersionError(op.path)
        node.data = op.data
        node.version += 1
        node.mzxid = self._zxid
        node.mtime_ms = int(self.clock() * 1000)
        self._notify(op.path, op.data)
        return node.stat()

    def _delete(self, op: Delete) -> None:
        node = self._node(op.path)
        if op.version != -1 and op.version != node.version:
            raise BadVersionError(op.path)
        if node.children:
            raise NotEmptyError(op.path)
        self._delete_tree(op.path)

    def _delete_tree(self, path: str) -> None:
        for name in list(self._nodes[path].children):
            self._delete_tree(join(path, name))
        del self._nodes[path]
        self._nodes[parent_of(path)].children.discard(path.rsplit("/", 1)[1])
        self._notify(path, None)

    def _check(self, op: Check) -> None:
        node = self._node(op.path)
        if op.version != -1 and op.version != node.version:
            raise BadVersionError(op.path)

    def _notify(self, path: str, data: bytes | None) -> None:
        for client in self._sessions.values():
            client._node_changed(path, data)

    # -- the API used by MemoryRegistry -------------------------------------------------

    def run(self, sid: int, fn: Callable[[], object]) -> object:
        with self.lock:
            self._check_live(sid)
            self._zxid += 1
            try:
                return fn()
            finally:
                self.changed.notify_all()

    def transaction(self, sid: int, ops: Sequence[Op]) -> list[OpResult]:
        with self.lock:
            self._check_live(sid)
            # Undo log of the nodes the ops touch (None: did not exist), not a tree copy.
            undo: dict[str, _Node | None] = {}
            clients = list(self._sessions.values())
            for client in clients:
                client._begin_batch()
            self._zxid += 1
            results: list[OpResult] = []
            try:
                for index, op in enumerate(ops):
                    for path in (op.path, parent_of(op.path)):
                        if path not in undo:
                            node = self._nodes.get(path)
                            undo[path] = None if node is None else _copy(node)
                    try:
                        result = self._apply(sid, op)
                    except RegistryError as exc:
                        raise TransactionError(index, op, exc) from exc
                    if isinstance(result, str):
                        undo.setdefault(result, None)  # a sequential node's real name
                    results.append(result)
            except TransactionError:
                for path, saved in undo.items():
                    if saved is None:
                        self._nodes.pop(path, None)
                    else:
                        self._nodes[path] = saved
                for client in clients:
                    client._end_batch(commit=False)
                raise
            for client in clients:
                client._end_batch(commit=True)
            self.changed.notify_all()
            return results

    def _apply(self, sid: int, op: Op) -> OpResult:
        if isinstance(op, Create):
            return self._create(sid, op, make_parents=False)
        if isinstance(op, SetData):
            return self._set(op)
        if isinstance(op, Delete):
            self._delete(op)
            return None
        self._check(op)
        return None

    def snapshot(self, root: str) -> dict[str, bytes]:
        """Every node at or below ``root`` but "/", walked from ``root``: a filter over all
        nodes made a process of N jobs load its N caches in N² steps (5,000 jobs: a minute)."""
        nodes, found = self._nodes, {}
        below = [root] if root in nodes else []
        while below:
            path = below.pop()
            node = nodes[path]
            if path != "/":
                found[path] = node.data
            below.extend(join(path, name) for name in node.children)
        return found


def _copy(node: _Node) -> _Node:
    return _Node(
        node.data,
        node.czxid,
        node.mzxid,
        node.ctime_ms,
        node.mtime_ms,
        node.owner,
        node.version,
        set(node.children),
        node.sequence,
    )
