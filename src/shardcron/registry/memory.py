"""The embedded registry: an in-process ZooKeeper look-alike, client side.

A :class:`~shardcron.registry.memoryserver.MemoryServer` holds the tree; each
:class:`MemoryRegistry` is one client session on it, so several in-process instances can
share one server the way several processes share a ZooKeeper ensemble. This module owns
the session: its node operations, its tree caches (fed in order by the server's change
notices), its lock recipe, its listeners, and the per-session connection faults
(:meth:`MemoryRegistry.disconnect` / :meth:`MemoryRegistry.reconnect`). The server's
semantics (ephemerals, all-or-nothing transactions, zxids) are in
:mod:`shardcron.registry.memoryserver`; ``MemoryServer`` is re-exported here.

A session reacts to a server that lost its data as the ZooKeeper backend does: refused
(it has seen later transactions than the server has), it stays SUSPENDED; once 1.5
session timeouts pass without a connection it gives up on the session (EXPIRED), and
with the next connection starts a new one, logs why in one ERROR line, and publishes
RESET ahead of the caches' resync and of CONNECTED.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from shardcron.errors import (
    ConnectionLostError,
    NotEmptyError,
    RegistryError,
    TransactionError,
)
from shardcron.registry.cache import CacheIndex, EventSink, EventThread, LocalTree, is_below
from shardcron.registry.contract import (
    Answer,
    CacheSpec,
    Check,
    Create,
    Delete,
    Node,
    NodeListener,
    Op,
    OpResult,
    SessionListener,
    SessionState,
    SetData,
    Stat,
    settle,
)
from shardcron.registry.memorylock import MemoryLock
from shardcron.registry.memoryserver import MemoryServer

__all__ = ["MemoryLock", "MemoryRegistry", "MemoryServer", "MemoryTreeCache"]

log = logging.getLogger(__name__)

Timer = Callable[[float, Callable[[], None]], None]


def thread_timer(delay: float, fn: Callable[[], None]) -> None:
    timer = threading.Timer(delay, fn)
    timer.daemon = True
    timer.start()


class MemoryRegistry:
    """One session on a :class:`MemoryServer` (a fresh private server if none is given)."""

    def __init__(
        self,
        server: MemoryServer | None = None,
        namespace: str = "shardcron",
        events: EventSink | None = None,
        session_timeout: float = 10.0,
        timer: Timer = thread_timer,
    ) -> None:
        """``events`` runs this session's cache updates and listener calls in order (one
        thread by default; the simulation passes its own deterministic queue), ``timer``
        calls a function after a delay (a thread; the simulation passes its clock's)."""
        self.server = server or MemoryServer()
        self.session_timeout = session_timeout
        self._timer = timer
        self.links = 0  # connections dropped so far: a request sent on one dies with it
        self._seen = 0  # the last zxid this client saw, as ZooKeeper's last_zxid
        self._suspensions = 0  # bumped at each suspension: the watchdog's token
        # Set when the watchdog gave up on the session: (its id, the last zxid seen, since).
        self._renewed: tuple[int, int, float] | None = None
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
        self._seen = self.server._zxid
        self._started = True
        self._connected = True
        self._publish(SessionState.CONNECTED)

    def close(self) -> None:
        if not self._started:
            return
        self._started = False
        self._connected = False
        self.server.detach(self)
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
        with self.server.lock:
            result = self.server.run(self._sid, fn)
            self._seen = self.server._zxid
        return result

    def _check_link(self) -> None:
        if not self._link_up or (self._started and not self._connected):
            raise ConnectionLostError("embedded registry: this session is disconnected")

    # -- one session's connection (fault injection) -----------------------------------------

    def disconnect(self) -> None:
        """Drop this session's connection only: requests fail fast, the caches stop
        hearing changes, listeners get SUSPENDED. The session itself lives on the server
        until :meth:`reconnect` or until the server expires it."""
        if not self._link_up:
            return
        self._link_up = False
        if self._connected:
            self._suspend()

    def reconnect(self) -> None:
        """Back after :meth:`disconnect`: on the same session if the server kept it
        (caches resync, then RECONNECTED), else EXPIRED and a new session, as ZooKeeper
        tells a client only once it reaches the server again."""
        if self._link_up:
            return
        self._link_up = True
        self._attempt()

    # -- losing the session, and giving up on it ------------------------------------------

    def _suspend(self) -> None:
        """The connection dropped: SUSPENDED, and the watchdog armed (see :meth:`_give_up`)."""
        self._connected = False
        self.links += 1
        self._suspensions += 1
        token, since = self._suspensions, self.server.clock()
        self._publish(SessionState.SUSPENDED)
        self._timer(1.5 * self.session_timeout, lambda: self._give_up(token, since))

    def _give_up(self, token: int, since: float) -> None:
        """1.5 session timeouts without a connection: the session is over on any server
        (and one that lost its data refuses it for good), so the next connection starts
        a new one, as the ZooKeeper backend does."""
        with self.server.lock:
            if not self._started or self._connected or token != self._suspensions:
                return
            self._renewed = (self._sid, self._seen, since)
            self._publish(SessionState.EXPIRED)
            self._attempt()

    def _attempt(self) -> None:
        """Reach the server (this link back, or the server up again), as a ZooKeeper
        client's connection attempt: the old session if the server has it, a new one if
        given up on; refused (stay SUSPENDED) if the server has not seen what this session
        has; else the session expired meanwhile."""
        with self.server.lock:
            if not self._started or not self._link_up or not self.server.up or self._connected:
                return
            if self._renewed is not None:
                self._renew(*self._renewed)
            elif self._sid in self.server._sessions:
                self._connected = True
                self._resync()
                self._publish(SessionState.RECONNECTED)
            elif self._seen <= self.server._zxid:
                self._replace_expired()

    def _renew(self, old: int, seen: int, since: float) -> None:
        """A new session after giving up on ``old``: say why (one line) and, when the server
        lost what the old session had seen, publish RESET ahead of the resync."""
        self._renewed = None
        self.server.close_session(old)  # over on any server by now (this one never expires)
        self._sid = self.server.open_session(self)
        self._connected = True
        now, silent = self.server._zxid, self.server.clock() - since
        causes = []
        if now < seen:
            causes.append(f"its last transaction 0x{now:x} is older than 0x{seen:x} seen before")
        if self._root not in self.server._nodes:
            causes.append(f"the namespace {self._root} was gone")
            # Put back, as the ZooKeeper backend does: a transaction creates no parents.
            sid = self._sid
            self.server.run(sid, lambda: self.server._create(sid, Create(self._root), True))
        self._seen = self.server._zxid
        if causes:
            log.error(
                "embedded registry refused session 0x%x (%s): it lost its data or was "
                "restored from a backup; started a new session and registering every job again",
                old,
                "; ".join(causes),
            )
            self._publish(SessionState.RESET)
        else:
            log.warning(
                "embedded registry: no connection for %.0f s, longer than the session "
                "timeout: started a new session",
                silent,
            )
        self._resync()
        self._publish(SessionState.CONNECTED)

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

    def get_with_stats(self, paths: Sequence[str]) -> list[Node | None]:
        def read() -> list[Node | None]:
            nodes = self.server._nodes
            found = [nodes.get(self._full(path)) for path in paths]
            return [None if node is None else (node.data, node.stat()) for node in found]

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
            with self.server.lock:
                results = self.server.transaction(self._sid, full_ops)
                self._seen = self.server._zxid
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

    def send_transaction(self, ops: Sequence[Op], answer: Callable[[Answer], None]) -> None:
        answer(settle(lambda: self.transaction(ops)))

    def server_time(self, path: str) -> float:
        self.put(path, b"")
        stat = self.stat(path)
        assert stat is not None
        return stat.mtime_ms / 1000

    # -- called by the server, under its lock --------------------------------------------

    def _node_changed(self, full_path: str, data: bytes | None) -> None:
        self._seen = self.server._zxid
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
        if not self._connected:
            return  # a disconnected client learns of the expiry when it reconnects
        self._connected = False
        self._replace_expired()

    def _replace_expired(self) -> None:
        self._publish(SessionState.EXPIRED)
        if self._started and self.server.up:
            self._sid = self.server.open_session(self)
            self._seen = self.server._zxid
            self._connected = True
            self._resync()
            self._publish(SessionState.CONNECTED)

    def _connection_changed(self, up: bool) -> None:
        if not self._link_up:
            return  # this session's own link is down; reconnect() reports for it
        if up:
            self._attempt()
        elif self._connected:
            self._suspend()

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

    @property
    def values_version(self) -> int:
        return self._tree.values_version

    def close(self) -> None:
        self._tree.close()
