"""The embedded registry: an in-process ZooKeeper look-alike.

A :class:`MemoryServer` holds the tree; each :class:`MemoryRegistry` is one client
session on it, so several in-process instances can share one server the way several
processes share a ZooKeeper ensemble. It keeps the ZooKeeper semantics shardcron relies
on: ephemeral nodes die with their session, transactions are all or nothing, tree caches
see changes in order, and zxids grow monotonically (fencing tokens derive from them).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Self

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
from shardcron.registry import (
    CacheSpec,
    Check,
    Create,
    Delete,
    NodeListener,
    Op,
    OpResult,
    SessionListener,
    SessionState,
    SetData,
    Stat,
)
from shardcron.registry.cache import (
    CacheIndex,
    EventSink,
    EventThread,
    LocalTree,
    is_below,
    join,
    parent_of,
)


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
    sequence: int = 0

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
        self._sessions: dict[int, MemoryRegistry] = {}
        self._session_ids = itertools.count(0x1000)
        self.up = True

    # -- sessions -----------------------------------------------------------------------

    def open_session(self, client: MemoryRegistry) -> int:
        with self.lock:
            sid = next(self._session_ids)
            self._sessions[sid] = client
            return sid

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
            clients = list(self._sessions.values())
        for client in clients:
            client._connection_changed(up)

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
            pnode.sequence += 1
        if path in self._nodes:
            raise NodeExistsError(path)
        now = int(self.clock() * 1000)
        self._nodes[path] = _Node(
            op.data, self._zxid, self._zxid, now, now, owner=sid if op.ephemeral else 0
        )
        pnode.children.add(path.rsplit("/", 1)[1])
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
        return {p: n.data for p, n in self._nodes.items() if is_below(p, root) and p != "/"}


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


class MemoryRegistry:
    """One session on a :class:`MemoryServer` (a fresh private server if none is given)."""

    def __init__(
        self,
        server: MemoryServer | None = None,
        namespace: str = "shardcron",
        events: EventSink | None = None,
    ) -> None:
        """``events`` runs this session's cache updates and listener calls in order (one
        thread by default; the simulation passes its own deterministic queue)."""
        self.server = server or MemoryServer()
        self._namespace = namespace
        self._root = f"/{namespace}"
        self._sid = 0
        self._requests = 0
        self._started = False
        self._connected = False
        self._link_up = True  # this session's own connection (see disconnect)
        self._listeners: list[SessionListener] = []
        self._caches: CacheIndex[LocalTree] = CacheIndex()
        self._batch: list[tuple[str, bytes | None]] | None = None
        self._events = events or EventThread(f"shardcron-memory-{namespace}")

    @property
    def namespace(self) -> str:
        return self._namespace

    @property
    def session_id(self) -> int:
        return self._sid

    @property
    def request_count(self) -> int:
        return self._requests

    @property
    def connected(self) -> bool:
        return self._connected

    def start(self, timeout: float = 15.0) -> None:
        if not self.server.up:
            raise ConnectionLostError("embedded registry is down")
        self._sid = self.server.open_session(self)
        self._started = True
        self._connected = True
        self._publish(SessionState.CONNECTED)

    def close(self) -> None:
        if not self._started:
            return
        self._started = False
        self._connected = False
        self.server.close_session(self._sid)
        self._publish(SessionState.LOST)
        self._events.stop()

    def add_session_listener(self, listener: SessionListener) -> None:
        self._listeners.append(listener)

    # -- node operations ----------------------------------------------------------------

    def _full(self, path: str) -> str:
        return self._root if path == "/" else self._root + path

    def _run(self, fn: Callable[[], object]) -> object:
        self._requests += 1
        self._check_link()
        return self.server.run(self._sid, fn)

    def _check_link(self) -> None:
        if not self._link_up:
            raise ConnectionLostError("embedded registry: this session is disconnected")

    # -- one session's connection (fault injection) -----------------------------------------

    def disconnect(self) -> None:
        """Drop this session's connection only: requests fail fast, the caches stop
        hearing changes, listeners get SUSPENDED. The session itself lives on the server
        until :meth:`reconnect` or until the server expires it."""
        if not self._link_up:
            return
        self._link_up = False
        self._connected = False
        self._publish(SessionState.SUSPENDED)

    def reconnect(self) -> None:
        """Back after :meth:`disconnect`: on the same session if the server kept it
        (caches resync, then RECONNECTED), else EXPIRED and a new session, as ZooKeeper
        tells a client only once it reaches the server again."""
        if self._link_up:
            return
        self._link_up = True
        if not self._started:
            return
        if self._sid not in self.server._sessions:
            self._expired()
            return
        self._connected = self.server.up
        self._resync()
        self._publish(SessionState.RECONNECTED)

    def get(self, path: str) -> bytes | None:
        def read() -> bytes | None:
            node = self.server._nodes.get(self._full(path))
            return None if node is None else node.data

        return self._run(read)  # type: ignore[return-value]

    def stat(self, path: str) -> Stat | None:
        def read() -> Stat | None:
            node = self.server._nodes.get(self._full(path))
            return None if node is None else node.stat()

        return self._run(read)  # type: ignore[return-value]

    def children(self, path: str) -> list[str]:
        def read() -> list[str]:
            node = self.server._nodes.get(self._full(path))
            return [] if node is None else sorted(node.children)

        return self._run(read)  # type: ignore[return-value]

    def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequential: bool = False
    ) -> str:
        op = Create(self._full(path), data, ephemeral, sequential)
        created = self._run(lambda: self.server._create(self._sid, op, make_parents=True))
        return self._strip(str(created))

    def put(self, path: str, data: bytes) -> None:
        full = self._full(path)

        def write() -> None:
            if full in self.server._nodes:
                self.server._set(SetData(full, data))
            else:
                self.server._create(self._sid, Create(full, data), make_parents=True)

        self._run(write)

    def delete(self, path: str, *, recursive: bool = False) -> None:
        full = self._full(path)

        def remove() -> None:
            node = self.server._nodes.get(full)
            if node is None:
                return
            if node.children and not recursive:
                raise NotEmptyError(path)
            self.server._delete_tree(full)

        self._run(remove)

    def transaction(self, ops: Sequence[Op]) -> list[OpResult]:
        self._requests += 1
        self._check_link()
        full_ops: list[Op] = []
        for op in ops:
            if isinstance(op, Create):
                full_ops.append(Create(self._full(op.path), op.data, op.ephemeral, op.sequential))
            elif isinstance(op, SetData):
                full_ops.append(SetData(self._full(op.path), op.data, op.version))
            elif isinstance(op, Delete):
                full_ops.append(Delete(self._full(op.path), op.version))
            else:
                full_ops.append(Check(self._full(op.path), op.version))
        try:
            results = self.server.transaction(self._sid, full_ops)
        except TransactionError as exc:
            raise TransactionError(exc.index, ops[exc.index], exc.cause) from exc.cause
        return [self._strip(r) if isinstance(r, str) else r for r in results]

    def _strip(self, path: str) -> str:
        return path[len(self._root) :] or "/"

    # -- caches and locks ---------------------------------------------------------------

    def tree_cache(
        self,
        path: str,
        listener: NodeListener | None = None,
        skip_data: Callable[[str], bool] | None = None,
        timeout: float = 15.0,
    ) -> MemoryTreeCache:
        cache = LocalTree(
            path, listener, skip_data, on_close=lambda c: self._caches.remove(c.root, c)
        )
        loaded = threading.Event()

        def load() -> None:
            cache.replace_all(snapshot)
            loaded.set()

        self._requests += 1
        self._check_link()
        with self.server.lock:
            self.server._check_live(self._sid)
            snapshot = {
                self._strip(p): d for p, d in self.server.snapshot(self._full(path)).items()
            }
            # Registered under the server lock, so no change falls between snapshot and watch.
            self._caches.add(path, cache)
            self._events.submit(load)
        if not self._events.is_current() and not loaded.wait(timeout):
            raise ConnectionLostError(f"tree cache of {path} did not load in {timeout}s")
        return MemoryTreeCache(cache)

    def tree_caches(
        self, specs: Sequence[CacheSpec], timeout: float = 15.0
    ) -> list[MemoryTreeCache]:
        caches: list[MemoryTreeCache] = []
        try:
            for spec in specs:
                caches.append(self.tree_cache(*spec, timeout=timeout))
        except RegistryError:
            for cache in caches:
                cache.close()
            raise
        return caches

    def lock(self, path: str) -> MemoryLock:
        return MemoryLock(self, path)

    def server_time(self, path: str) -> float:
        self.put(path, b"")
        stat = self.stat(path)
        assert stat is not None
        return stat.mtime_ms / 1000

    # -- called by the server, under its lock --------------------------------------------

    def _node_changed(self, full_path: str, data: bytes | None) -> None:
        if not self._caches:
            return  # nothing to update (a session that only writes, like an operator's)
        if not is_below(full_path, self._root) or full_path == self._root:
            return
        change = (self._strip(full_path), data)
        if self._batch is not None:
            self._batch.append(change)
        else:
            self._deliver([change])

    def _begin_batch(self) -> None:
        self._batch = []

    def _end_batch(self, commit: bool) -> None:
        batch, self._batch = self._batch or [], None
        if commit:
            self._deliver(batch)

    def _deliver(self, changes: list[tuple[str, bytes | None]]) -> None:
        if not self._link_up:
            return  # a disconnected client hears nothing; reconnect() resyncs its caches

        def apply() -> None:
            for path, data in changes:
                for cache in self._caches.covering(path):
                    if cache.closed:
                        continue
                    if data is None:
                        cache.remove(path)
                    else:
                        cache.upsert(path, data)

        self._events.submit(apply)

    def _expired(self) -> None:
        self._connected = False
        if not self._link_up:
            return  # a disconnected client learns of the expiry when it reconnects
        self._publish(SessionState.EXPIRED)
        if self._started and self.server.up:
            self._sid = self.server.open_session(self)
            self._connected = True
            self._resync()
            self._publish(SessionState.CONNECTED)

    def _connection_changed(self, up: bool) -> None:
        if not self._link_up:
            return  # this session's own link is down; reconnect() reports for it
        self._connected = up
        self._publish(SessionState.RECONNECTED if up else SessionState.SUSPENDED)

    def _resync(self) -> None:
        with self.server.lock:
            for cache in self._caches.all():
                snap = {
                    self._strip(p): d
                    for p, d in self.server.snapshot(self._full(cache.root)).items()
                }
                self._events.submit(lambda c=cache, s=snap: c.replace_all(s))  # type: ignore[misc]

    def _publish(self, state: SessionState) -> None:
        for listener in list(self._listeners):
            self._events.submit(lambda fn=listener: fn(state))  # type: ignore[misc]


class MemoryTreeCache:
    def __init__(self, tree: LocalTree) -> None:
        self._tree = tree

    def get(self, path: str) -> bytes | None:
        return self._tree.get(path)

    def exists(self, path: str) -> bool:
        return self._tree.exists(path)

    def children(self, path: str) -> list[str]:
        return self._tree.children(path)

    @property
    def version(self) -> int:
        return self._tree.version

    def close(self) -> None:
        self._tree.close()


class MemoryLock:
    """ZooKeeper's lock recipe: the lowest ephemeral sequential child holds the lock."""

    def __init__(self, registry: MemoryRegistry, path: str) -> None:
        self._registry = registry
        self._path = path
        self._node: str | None = None

    def acquire(self, timeout: float) -> bool:
        registry, server = self._registry, self._registry.server
        self._node = registry.create(f"{self._path}/lock-", ephemeral=True, sequential=True)
        deadline = time.monotonic() + timeout
        mine = self._node.rsplit("/", 1)[1]
        with server.changed:
            while True:
                first = min(server._nodes[registry._full(self._path)].children, default=None)
                if first == mine:
                    return True
                if registry._full(self._node) not in server._nodes:
                    raise SessionExpiredError("lock node vanished with the session")
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                server.changed.wait(left)
        self.release()
        return False

    def release(self) -> None:
        if self._node is not None:
            self._registry.delete(self._node)
            self._node = None

    def __enter__(self) -> Self:
        self.acquire(timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
