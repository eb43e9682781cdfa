"""The ZooKeeper registry, through kazoo: with :mod:`.zkwire`, the only module that
imports kazoo.

Every kazoo exception becomes a :mod:`shardcron.errors` error here and nowhere else.

Tree caches use ZooKeeper 3.6+ *persistent recursive watches* (``addWatch``), which
kazoo 2.11 does not expose, so this module sends that request itself and routes its
notifications. One registration per cache replaces the one-shot watch that kazoo's
TreeCache re-arms with a read on every change: an instance that only observes others'
writes makes no request at all, which is what keeps a fire within two round trips.
Values are fetched only for nodes whose value matters (``skip_data`` says which), and
in batches: notifications that arrive while the event thread is busy join one
*multiRead* (ZooKeeper 3.6+, several reads in one request), so a burst of thousands of
changes (a resharding at scale) costs a few requests, not one read per event. Cache
loads read level by level, each level one multiRead across every cache being loaded,
and run on the caller's thread: many caches load side by side.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Self

from kazoo import exceptions as kx
from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.serialization import Watch
from kazoo.protocol.states import KeeperState
from kazoo.recipe.lock import Lock as KazooLock
from kazoo.retry import KazooRetry, RetryFailedError
from kazoo.security import CREATOR_ALL_ACL, Permissions, make_digest_acl

from shardcron.config import RegistryConfig
from shardcron.errors import (
    BadVersionError,
    ConfigError,
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
    NodeListener,
    Op,
    OpResult,
    SessionListener,
    SessionState,
    Stat,
    zkwire,
)
from shardcron.registry.cache import CacheIndex, EventThread, LocalTree, join

log = logging.getLogger(__name__)
# Any of these for world:anyone means an anonymous client can change the jobs.
_CHANGE_PERMS = Permissions.WRITE | Permissions.CREATE | Permissions.DELETE | Permissions.ADMIN

_CREATED, _DELETED, _CHANGED = 1, 2, 3
_FETCH, _TOUCH = 10, 11  # how a change applies to a cache: read its value, or not
_NO_NODE = kx.NoNodeError.code
# Reads per multiRead: a response of about 100 bytes a read stays far below jute.maxbuffer.
MAX_READS_PER_REQUEST = 2000


_ERRORS: list[tuple[type[Exception], type[RegistryError]]] = [
    (kx.NoNodeError, NoNodeError),
    (kx.NodeExistsError, NodeExistsError),
    (kx.NotEmptyError, NotEmptyError),
    (kx.BadVersionError, BadVersionError),
    (kx.SessionExpiredError, SessionExpiredError),
    (kx.ConnectionClosedError, ConnectionLostError),
    (kx.ConnectionLoss, ConnectionLostError),
    (kx.OperationTimeoutError, ConnectionLostError),
    (RetryFailedError, ConnectionLostError),
    (KazooTimeoutError, ConnectionLostError),
]


def _translate(exc: Exception, what: str) -> RegistryError:
    for kazoo_type, ours in _ERRORS:
        if isinstance(exc, kazoo_type):
            return ours(f"{what}: {type(exc).__name__}")
    return RegistryError(f"{what}: {type(exc).__name__}: {exc}")


@contextmanager
def _errors(what: str) -> Iterator[None]:
    try:
        yield
    except (kx.KazooException, KazooTimeoutError, RetryFailedError) as exc:
        raise _translate(exc, what) from exc


def _stat(zstat: Any) -> Stat:
    return Stat(
        version=zstat.version,
        czxid=zstat.czxid,
        mzxid=zstat.mzxid,
        ctime_ms=zstat.ctime,
        mtime_ms=zstat.mtime,
        ephemeral_owner=zstat.ephemeralOwner,
    )


class ZooKeeperRegistry:
    """A kazoo session on a ZooKeeper ensemble, chrooted to ``/{namespace}``."""

    def __init__(self, config: RegistryConfig, *, create_namespace: bool = True) -> None:
        """``create_namespace=False`` makes :meth:`start` fail on a namespace that does not
        exist, so an operator's typo is reported instead of created."""
        self._config = config
        self._create_namespace = create_namespace
        self._namespace = config.namespace
        retry = {
            "max_tries": config.max_retries,
            "delay": config.base_sleep_ms / 1000,
            "max_delay": config.max_sleep_ms / 1000,
            "ignore_expire": False,
        }
        digest = config.digest
        self.client = KazooClient(
            hosts=f"{config.servers}/{config.namespace}",
            timeout=config.session_timeout_ms / 1000,
            connection_retry=KazooRetry(**{**retry, "max_tries": -1}),
            command_retry=KazooRetry(**retry),
            auth_data=[("digest", digest)] if digest else None,
            default_acl=CREATOR_ALL_ACL if digest else None,
        )
        self._requests = 0
        self._count_lock = threading.Lock()
        self._listeners: list[SessionListener] = []
        self._caches: CacheIndex[_ZooKeeperTreeCache] = CacheIndex()
        self._events = EventThread(f"shardcron-zk-{config.namespace}")
        # The changes the next batch job applies (see _queue_change), or None; and the
        # batches closed whose reads have not gone out yet, oldest first. Kazoo's thread
        # takes _batch_lock, so nobody holds it while sending: a send can block until that
        # thread reads its wake-up pipe. _send_lock keeps the batches' reads in order.
        self._batch: _Batch | None = None
        self._unsent: list[_Batch] = []
        self._batch_lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._session: int | None = None
        self._closing = False
        self._suspended = False
        self._install_hooks()

    # -- plumbing -----------------------------------------------------------------------

    def _install_hooks(self) -> None:
        client = self.client
        original_call = client._call

        def counted_call(request: Any, async_object: Any) -> Any:
            if client._state == KeeperState.CONNECTING:
                # Kazoo would queue it until the connection is back, however long that
                # takes (a stop during an outage hung for good). Fail at once, as the
                # embedded registry does: retried reads and writes retry; a transaction's
                # outcome is settled after the reconnect, as for a lost answer.
                async_object.set_exception(kx.ConnectionLoss("not connected to ZooKeeper"))
                return False
            with self._count_lock:
                self._requests += 1
            return original_call(request, async_object)

        client._call = counted_call
        client.add_listener(self._on_kazoo_state)
        client.handler.select = zkwire.poll_select
        self._reads = zkwire.BufferedReads(client._connection)

    def _hook_watch_events(self) -> None:
        client = self.client
        connection = client._connection
        original = connection._read_watch_event

        def notify(kind: int, full: str) -> None:
            path = client.unchroot(full) or "/"
            for cache in self._caches.covering(path):
                cache.notify(kind, path)

        def on_watch(kind: int, full: str) -> bool:
            """Most events: decoded by BufferedReads, never through kazoo's reader. Kazoo's
            own handling serves only the one-shot watches kazoo set (a lock's)."""
            if full in client._data_watchers or full in client._child_watchers:
                return False
            notify(kind, full)
            return True

        def read_watch_event(buffer: bytes, offset: int) -> Any:
            watch, _ = Watch.deserialize(buffer, offset)
            if not on_watch(watch.type, watch.path):
                notify(watch.type, watch.path)
                original(buffer, offset)

        connection._read_watch_event = read_watch_event
        self._reads.on_watch = on_watch

    def _on_kazoo_state(self, state: str) -> None:
        # Runs on kazoo's connection thread: read what we need now, act on our thread.
        session = self.client._session_id
        if state == KazooState.SUSPENDED:
            self._suspended = True
            self._publish(SessionState.SUSPENDED)
        elif state == KazooState.LOST:
            self._publish(SessionState.LOST if self._closing else SessionState.EXPIRED)
            self._session = None
        elif state == KazooState.CONNECTED:
            same = self._session is not None and session == self._session
            self._session = session
            self._suspended = False
            if self._caches:
                self._submit(self._resync_caches, send=False)
            self._publish(SessionState.RECONNECTED if same else SessionState.CONNECTED)

    def _publish(self, state: SessionState) -> None:
        for listener in list(self._listeners):
            self._submit(lambda fn=listener: fn(state), send=False)  # type: ignore[misc]

    def _submit(self, fn: Callable[[], None], send: bool = True) -> None:
        """Queue ``fn`` on the event thread, after every notification received so far:
        it closes the open batch, so later notifications apply after ``fn`` runs.

        The closed batch's reads go out now, so they are answered by the time the event
        thread gets to it; on kazoo's thread (``send=False``) the event thread sends them,
        as kazoo's thread must never wait for its own wake-up pipe."""
        with self._batch_lock:
            self._close_batch()
            self._events.submit(fn)
        if send:
            with self._send_lock:
                self._send_unsent()

    def _close_batch(self) -> None:
        """No more changes join the open batch (caller holds the batch lock)."""
        batch, self._batch = self._batch, None
        if batch is not None:
            self._unsent.append(batch)

    def _send_unsent(self) -> None:
        """Send the reads of every closed batch not sent yet, oldest first (caller holds
        the send lock, not the batch lock)."""
        with self._batch_lock:
            batches, self._unsent = self._unsent, []
        for batch in batches:
            batch.paths = list(dict.fromkeys(p for _, p, kind in batch.changes if kind == _FETCH))
            try:
                batch.answers = self._send_reads([(zkwire.GET_DATA, p) for p in batch.paths])
            except RegistryError as exc:
                batch.failure = exc

    def _queue_change(self, tree: LocalTree, path: str, kind: int) -> None:
        """Called on the connection thread: apply a change notification to ``tree``, in
        order, fetching the value if ``tree`` needs it (``kind`` is _FETCH, _TOUCH for a
        node tracked for existence only, or _DELETED).

        Changes that arrive before the event thread gets to the batch join it, and its
        values are read in one multiRead: a burst of changes costs a request or two."""
        with self._batch_lock:
            batch = self._batch
            if batch is None:
                batch = self._batch = _Batch()
                self._events.submit(lambda: self._apply_batch(batch))
            batch.changes.append((tree, path, kind))

    def _apply_batch(self, batch: _Batch) -> None:
        with self._send_lock:
            with self._batch_lock:
                if self._batch is batch:
                    self._close_batch()  # later notifications start the next batch
            self._send_unsent()
        values: dict[str, bytes | list[str] | int] = {}
        retry = False
        try:
            if batch.failure is not None:
                raise batch.failure
            if batch.paths:
                reads = [(zkwire.GET_DATA, p) for p in batch.paths]
                values = dict(zip(batch.paths, self._collect(reads, batch.answers), strict=True))
        except RegistryError as exc:
            # Still connected (a slow answer): read them again in a later batch. Otherwise
            # the resync after the reconnect restores them.
            retry = self.connected and isinstance(exc, ConnectionLostError)
            log.warning(
                "could not read the values of %d nodes (%s); %s",
                len(batch.paths),
                exc,
                "reading them again" if retry else "the resync after reconnecting restores them",
            )
        for tree, path, kind in batch.changes:
            if tree.closed:
                continue
            if kind == _FETCH and retry:
                self._queue_change(tree, path, _FETCH)
            elif kind == _DELETED:
                tree.remove(path)
            elif kind == _TOUCH:
                tree.upsert(path, b"")
            elif isinstance(value := values.get(path), bytes):
                tree.upsert(path, value)
            # else: deleted meanwhile (its DELETED notification follows) or not read

    def _read_many(self, reads: list[tuple[int, str]]) -> list[bytes | list[str] | int]:
        """Reads (kind, path) in multiRead requests, all sent before any answer is awaited.
        Errors come back as ZooKeeper's codes; any but "no node" raises."""
        return self._collect(reads, self._send_reads(reads))

    def _send_reads(self, reads: list[tuple[int, str]]) -> list[Any]:
        client = self.client
        pending = []
        with _errors(f"read {len(reads)} nodes"):
            for i in range(0, len(reads), MAX_READS_PER_REQUEST):
                chunk = reads[i : i + MAX_READS_PER_REQUEST]
                answer = client.handler.async_result()
                client._call(zkwire.MultiRead([(kind, self._full(p)) for kind, p in chunk]), answer)
                pending.append(answer)
        return pending

    def _collect(
        self, reads: list[tuple[int, str]], pending: list[Any]
    ) -> list[bytes | list[str] | int]:
        results: list[bytes | list[str] | int] = []
        with _errors(f"read {len(reads)} nodes"):
            for answer in pending:
                results += answer.get(timeout=30)
        for (_, path), result in zip(reads, results, strict=True):
            if isinstance(result, int) and result != _NO_NODE:
                raise _translate(kx.EXCEPTIONS[result](), f"read {path}")
        return results

    def _read_trees(
        self, caches: list[_ZooKeeperTreeCache], arm: bool = True
    ) -> list[dict[str, bytes]]:
        """Snapshots of the caches' subtrees, read level by level across all of them; the
        persistent watches are armed first (in the same pipeline), so no change is lost."""
        client = self.client
        armed = []
        if arm:
            with _errors("watch"):
                for cache in caches:
                    answer = client.handler.async_result()
                    request = zkwire.AddWatch(
                        self._full(cache.tree.root), zkwire.PERSISTENT_RECURSIVE
                    )
                    client._call(request, answer)
                    armed.append(answer)
        snapshots: list[dict[str, bytes]] = [{} for _ in caches]
        level = [(k, cache.tree.root) for k, cache in enumerate(caches)]
        while level:
            reads: list[tuple[int, int, str]] = []
            for k, path in level:
                reads.append((k, zkwire.GET_CHILDREN, path))
                if not caches[k].tree.skip_data(path):
                    reads.append((k, zkwire.GET_DATA, path))
            results = self._read_many([(kind, path) for _, kind, path in reads])
            level = []
            for (k, _kind, path), result in zip(reads, results, strict=True):
                if isinstance(result, int):  # no node: gone (or not there yet)
                    snapshots[k].pop(path, None)
                elif isinstance(result, list):
                    snapshots[k].setdefault(path, b"")
                    level.extend((k, join(path, name)) for name in result)
                else:
                    snapshots[k][path] = result
        with _errors("watch"):
            for answer in armed:
                answer.get(timeout=30)
        return snapshots

    def _resync_caches(self) -> None:
        caches = self._caches.all()
        try:
            snapshots = self._read_trees(caches)
        except RegistryError as exc:
            log.warning("could not resync %d caches (%s); next reconnect retries", len(caches), exc)
            return
        for cache, snapshot in zip(caches, snapshots, strict=True):
            if not cache.tree.closed:
                cache.tree.replace_all(snapshot)

    def _full(self, path: str) -> str:
        chroot = self.client.chroot or ""
        return chroot if path == "/" and chroot else chroot + path

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def namespace(self) -> str:
        return self._namespace

    @property
    def session_id(self) -> int:
        return int(self.client._session_id or 0)

    @property
    def request_count(self) -> int:
        return self._requests

    @property
    def connected(self) -> bool:
        return bool(self.client.connected)

    def start(self, timeout: float = 15.0) -> None:
        with _errors(f"connect to ZooKeeper at {self._config.servers}"), warnings.catch_warnings():
            # kazoo warns that the chroot is missing; it is created right below.
            warnings.simplefilter("ignore", UserWarning)
            self.client.start(timeout=timeout)
        self._hook_watch_events()
        with _errors(f"create the namespace /{self._namespace}"):
            if self._create_namespace:
                self.client.ensure_path("/")
            elif self.client.exists("/") is None:
                self.close()
                raise NoNodeError(f"namespace /{self._namespace} does not exist")
        if self._config.digest and self.world_writable():
            log.warning(
                "namespace /%s is writable by anyone who reaches ZooKeeper (it was created "
                "without a digest), so anyone can change these jobs' schedules; apply the "
                "digest ACL once with: shardcron acl --registry zk://USER:PASSWORD@%s/%s",
                self._namespace,
                self._config.servers,
                self._namespace,
            )

    # -- ACLs ---------------------------------------------------------------------------

    def world_writable(self) -> bool:
        """True when the namespace root lets an unauthenticated client change it."""
        with _errors(f"read the ACL of /{self._namespace}"):
            acls, _ = self.client.get_acls("/")
        return any(acl.id.scheme == "world" and acl.perms & _CHANGE_PERMS for acl in acls)

    def apply_digest_acl(self) -> int:
        """Give every node of the namespace (and the namespace itself) the ACL of this
        session's digest: all rights to that user, none to anyone else. Returns the count.

        Nodes created before the digest was configured keep the open ACL they were created
        with; this is the one-off fix. Nodes made later by a digest session get it anyway.
        """
        digest = self._config.digest
        if not digest:
            raise ConfigError("registry.digest", "required: zk://USER:PASSWORD@HOST:PORT/NS")
        user, _, password = digest.partition(":")
        acl = [make_digest_acl(user, password, all=True)]
        count = 0
        pending = ["/"]
        with _errors(f"set the ACLs of /{self._namespace}"):
            while pending:
                path = pending.pop()
                try:
                    # Children first read, then the node locked: the walk still sees them.
                    children = self.client.get_children(path)
                    self.client.set_acls(path, acl)
                except kx.NoNodeError:
                    continue  # deleted while we walked (an ephemeral node, a finished claim)
                count += 1
                pending += [f"{path.rstrip('/')}/{child}" for child in children]
        return count

    def close(self) -> None:
        self._closing = True
        for cache in self._caches.all():
            cache.close()
        try:
            self.client.stop()
            self.client.close()
        except kx.KazooException:
            log.debug("error while closing the ZooKeeper client", exc_info=True)
        self._events.stop()

    def add_session_listener(self, listener: SessionListener) -> None:
        self._listeners.append(listener)

    # -- node operations ----------------------------------------------------------------

    def get(self, path: str) -> bytes | None:
        with _errors(f"get {path}"):
            try:
                data, _ = self.client.retry(self.client.get, path)
            except kx.NoNodeError:
                return None
            return bytes(data)

    def stat(self, path: str) -> Stat | None:
        with _errors(f"stat {path}"):
            zstat = self.client.retry(self.client.exists, path)
            return None if zstat is None else _stat(zstat)

    def children(self, path: str) -> list[str]:
        with _errors(f"children of {path}"):
            try:
                return sorted(self.client.retry(self.client.get_children, path))
            except kx.NoNodeError:
                return []

    def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequential: bool = False
    ) -> str:
        # Not retried: after a connection loss the create may have happened; callers decide.
        with _errors(f"create {path}"):
            return self._create(path, data, ephemeral=ephemeral, sequential=sequential)

    def _create(
        self, path: str, data: bytes, *, ephemeral: bool = False, sequential: bool = False
    ) -> str:
        """Create, with missing parents: two round trips at most, whatever the depth (the
        server applies one session's requests in order, so the parents' creates and the
        node's are sent together), where kazoo's makepath checks each ancestor in turn."""
        client = self.client
        try:
            return str(client.create(path, data, ephemeral=ephemeral, sequence=sequential))
        except kx.NoNodeError:
            pass
        parts = path.strip("/").split("/")[:-1]
        ancestors = ["/" + "/".join(parts[: n + 1]) for n in range(len(parts))]
        for trust_caches in (True, False):
            missing = [a for a in ancestors if not (trust_caches and self._cached(a))]
            parents = [client.create_async(a) for a in missing]
            created = client.create_async(path, data, ephemeral=ephemeral, sequence=sequential)
            for parent in parents:
                with contextlib.suppress(kx.NodeExistsError):
                    parent.get()
            try:
                return str(created.get())
            except kx.NoNodeError:
                if not trust_caches:
                    raise
        raise AssertionError("unreachable")

    def _cached(self, path: str) -> bool:
        """Whether a cache shows ``path`` (it may be a moment behind: a hint, not a fact)."""
        return any(cache.tree.exists(path) for cache in self._caches.covering(path))

    def put(self, path: str, data: bytes) -> None:
        def put_once() -> None:
            try:
                self.client.set(path, data)
            except kx.NoNodeError:
                try:
                    self._create(path, data)
                except kx.NodeExistsError:
                    self.client.set(path, data)

        with _errors(f"put {path}"):
            self.client.retry(put_once)

    def delete(self, path: str, *, recursive: bool = False) -> None:
        def delete_once() -> None:
            with contextlib.suppress(kx.NoNodeError):
                self.client.delete(path, recursive=recursive)

        with _errors(f"delete {path}"):
            self.client.retry(delete_once)

    def transaction(self, ops: Sequence[Op]) -> list[OpResult]:
        request = zkwire.transaction(ops, self._full, self.client.default_acl)
        with _errors("transaction"):
            answer = self.client.handler.async_result()
            self.client._call(request, answer)
            raw = answer.get()
        results: list[OpResult] = []
        for index, (op, result) in enumerate(zip(ops, raw, strict=True)):
            if isinstance(result, Exception) and not isinstance(result, kx.RolledBackError):
                raise TransactionError(index, op, _translate(result, op.path))
            if isinstance(result, Exception):
                continue
            results.append(
                result if isinstance(result, str) else _stat(result) if result is not True else None
            )
        if len(results) != len(ops):
            raise RegistryError("transaction rolled back without naming a failing op")
        return results

    # -- caches, locks, time -------------------------------------------------------------

    def tree_cache(
        self,
        path: str,
        listener: NodeListener | None = None,
        skip_data: Callable[[str], bool] | None = None,
        timeout: float = 15.0,
    ) -> _ZooKeeperTreeCache:
        return self.tree_caches([(path, listener, skip_data)], timeout)[0]

    def tree_caches(
        self, specs: Sequence[CacheSpec], timeout: float = 15.0
    ) -> list[_ZooKeeperTreeCache]:
        caches = [_ZooKeeperTreeCache(self, LocalTree(*spec)) for spec in specs]
        if self._events.is_current():  # a listener making a cache: load it right here
            for cache in caches:
                self._caches.add(cache.tree.root, cache)
            try:
                trees = self._read_trees(caches)
            except RegistryError:
                for cache in caches:
                    cache.close()
                raise
            for cache, tree in zip(caches, trees, strict=True):
                cache.tree.replace_all(tree)
            return caches
        # The snapshots are applied on the event thread, ahead of every notification that
        # follows the watches; they are read here, so several loads go side by side.
        read, loaded = threading.Event(), threading.Event()
        snapshots: list[dict[str, bytes]] = []
        failure: list[RegistryError] = []

        def apply() -> None:
            if read.wait(timeout) and snapshots:
                for cache, snapshot in zip(caches, snapshots, strict=True):
                    if not cache.tree.closed:
                        cache.tree.replace_all(snapshot)
            loaded.set()

        self._submit(apply)
        for cache in caches:  # notifications from now on queue behind apply
            self._caches.add(cache.tree.root, cache)
        try:
            snapshots += self._read_trees(caches)
        except RegistryError as exc:
            failure.append(exc)
        read.set()
        if failure or not loaded.wait(timeout) or not snapshots:
            for cache in caches:
                cache.close()
            if failure:
                raise failure[0]
            raise ConnectionLostError(f"{len(caches)} tree caches did not load in {timeout}s")
        return caches

    def lock(self, path: str) -> _ZooKeeperLock:
        return _ZooKeeperLock(KazooLock(self.client, path))

    def server_time(self, path: str) -> float:
        with _errors(f"server time via {path}"):
            try:
                zstat = self.client.set(path, b"")
            except kx.NoNodeError:
                self._create(path, b"")
                zstat = self.client.exists(path)
        return float(zstat.mtime) / 1000


class _Batch:
    """Change notifications applied together, and the reads of the values they need."""

    __slots__ = ("answers", "changes", "failure", "paths")

    def __init__(self) -> None:
        self.changes: list[tuple[LocalTree, str, int]] = []
        self.paths: list[str] = []
        self.answers: list[Any] = []
        self.failure: RegistryError | None = None


class _ZooKeeperTreeCache:
    def __init__(self, registry: ZooKeeperRegistry, tree: LocalTree) -> None:
        self.registry = registry
        self.tree = tree

    def __repr__(self) -> str:
        return f"TreeCache({self.tree.root})"

    def get(self, path: str) -> bytes | None:
        return self.tree.get(path)

    def exists(self, path: str) -> bool:
        return self.tree.exists(path)

    def children(self, path: str) -> list[str]:
        return self.tree.children(path)

    @property
    def version(self) -> int:
        return self.tree.version

    def close(self) -> None:
        self.tree.closed = True
        self.registry._caches.remove(self.tree.root, self)

    def notify(self, kind: int, path: str) -> None:
        """Called on kazoo's connection thread for each change below the root."""
        tree, registry = self.tree, self.registry
        if kind == _DELETED:
            registry._queue_change(tree, path, _DELETED)
        elif kind in (_CREATED, _CHANGED):
            registry._queue_change(tree, path, _TOUCH if tree.skip_data(path) else _FETCH)


class _ZooKeeperLock:
    def __init__(self, lock: KazooLock) -> None:
        self._lock = lock

    def acquire(self, timeout: float) -> bool:
        with _errors("acquire lock"):
            try:
                return bool(self._lock.acquire(timeout=timeout))
            except kx.LockTimeout:
                return False

    def release(self) -> None:
        with _errors("release lock"):
            self._lock.release()

    def __enter__(self) -> Self:
        self.acquire(timeout=30)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
