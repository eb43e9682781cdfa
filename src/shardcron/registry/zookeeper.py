"""The ZooKeeper registry, through kazoo: the only module that imports kazoo.

Every kazoo exception becomes a :mod:`shardcron.errors` error here and nowhere else.

Tree caches use ZooKeeper 3.6+ *persistent recursive watches* (``addWatch``), which
kazoo 2.11 does not expose, so this module sends that request itself and routes its
notifications. One registration per cache replaces the one-shot watch that kazoo's
TreeCache re-arms with a read on every change: an instance that only observes others'
writes makes no request at all, which is what keeps a fire within two round trips.
Values are fetched only for nodes whose value matters (``skip_data`` says which); the
fetch is pipelined from the connection thread, so a burst of thousands of changes
(resharding at scale) costs one batch of concurrent reads, not a serial chain.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import warnings
from collections import namedtuple
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Self

from kazoo import exceptions as kx
from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.serialization import Watch, write_string
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
from shardcron.registry.cache import CacheIndex, EventThread, LocalTree, join

log = logging.getLogger(__name__)
# Any of these for world:anyone means an anonymous client can change the jobs.
_CHANGE_PERMS = Permissions.WRITE | Permissions.CREATE | Permissions.DELETE | Permissions.ADMIN

_CREATED, _DELETED, _CHANGED = 1, 2, 3
_PERSISTENT_RECURSIVE = 1


class _AddWatch(namedtuple("_AddWatch", "path mode")):
    """ZooKeeper's addWatch request (opcode 106), missing from kazoo."""

    type = 106

    def serialize(self) -> bytearray:
        b = bytearray(write_string(self.path))
        b.extend(int(self.mode).to_bytes(4, "big", signed=True))
        return b

    @classmethod
    def deserialize(cls, buffer: bytes, offset: int) -> bool:
        return True


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
        self._session: int | None = None
        self._closing = False
        self._suspended = False
        self._install_hooks()

    # -- plumbing -----------------------------------------------------------------------

    def _install_hooks(self) -> None:
        client = self.client
        original_call = client._call

        def counted_call(request: Any, async_object: Any) -> Any:
            with self._count_lock:
                self._requests += 1
            return original_call(request, async_object)

        client._call = counted_call
        client.add_listener(self._on_kazoo_state)

    def _hook_watch_events(self) -> None:
        connection = self.client._connection
        original = connection._read_watch_event

        def read_watch_event(buffer: bytes, offset: int) -> Any:
            watch, _ = Watch.deserialize(buffer, offset)
            path = self.client.unchroot(watch.path) or "/"
            for cache in self._caches.covering(path):
                cache.notify(watch.type, path)
            return original(buffer, offset)

        connection._read_watch_event = read_watch_event

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
                self._events.submit(self._resync_caches)
            self._publish(SessionState.RECONNECTED if same else SessionState.CONNECTED)

    def _publish(self, state: SessionState) -> None:
        for listener in list(self._listeners):
            self._events.submit(lambda fn=listener: fn(state))  # type: ignore[misc]

    def _resync_caches(self) -> None:
        for cache in self._caches.all():
            try:
                cache.load()
            except RegistryError:
                log.warning("could not resync the cache of %s; next reconnect retries", cache)

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
            return str(
                self.client.create(
                    path, data, ephemeral=ephemeral, sequence=sequential, makepath=True
                )
            )

    def put(self, path: str, data: bytes) -> None:
        def put_once() -> None:
            try:
                self.client.set(path, data)
            except kx.NoNodeError:
                try:
                    self.client.create(path, data, makepath=True)
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
        txn = self.client.transaction()
        for op in ops:
            if isinstance(op, Create):
                txn.create(op.path, op.data, ephemeral=op.ephemeral, sequence=op.sequential)
            elif isinstance(op, SetData):
                txn.set_data(op.path, op.data, version=op.version)
            elif isinstance(op, Delete):
                txn.delete(op.path, version=op.version)
            elif isinstance(op, Check):
                txn.check(op.path, op.version)
        with _errors("transaction"):
            raw = txn.commit()
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
        cache = _ZooKeeperTreeCache(self, LocalTree(path, listener, skip_data))
        self._caches.add(path, cache)
        loaded = threading.Event()
        failure: list[RegistryError] = []

        def load() -> None:
            try:
                cache.load()
            except RegistryError as exc:
                failure.append(exc)
            loaded.set()

        self._events.submit(load)
        if not loaded.wait(timeout):
            raise ConnectionLostError(f"tree cache of {path} did not load in {timeout}s")
        if failure:
            cache.close()
            raise failure[0]
        return cache

    def lock(self, path: str) -> _ZooKeeperLock:
        return _ZooKeeperLock(KazooLock(self.client, path))

    def server_time(self, path: str) -> float:
        with _errors(f"server time via {path}"):
            try:
                zstat = self.client.set(path, b"")
            except kx.NoNodeError:
                self.client.create(path, b"", makepath=True)
                zstat = self.client.exists(path)
        return float(zstat.mtime) / 1000


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

    def close(self) -> None:
        self.tree.closed = True
        self.registry._caches.remove(self.tree.root, self)

    def notify(self, kind: int, path: str) -> None:
        """Called on kazoo's connection thread for each change below the root."""
        tree, events = self.tree, self.registry._events
        if kind == _DELETED:
            events.submit(lambda: tree.remove(path))
        elif kind in (_CREATED, _CHANGED):
            if tree.skip_data(path):
                events.submit(lambda: tree.upsert(path, b""))
                return
            pending = self.registry.client.get_async(path)

            def apply() -> None:
                try:
                    data, _ = pending.get(timeout=30)
                except kx.NoNodeError:
                    return  # already deleted; its DELETED event follows
                except (kx.KazooException, KazooTimeoutError):
                    log.warning("lost the value of %s; the next resync restores it", path)
                    return
                tree.upsert(path, bytes(data))

            events.submit(apply)

    def load(self) -> None:
        """Arm the persistent watch, then read the subtree: changes during the read queue up."""
        client, root = self.registry.client, self.tree.root
        with _errors(f"watch {root}"):
            armed = client.handler.async_result()
            client._call(_AddWatch(self.registry._full(root), _PERSISTENT_RECURSIVE), armed)
            armed.get(timeout=30)
        snapshot: dict[str, bytes] = {}
        level = [root]
        with _errors(f"load {root}"):
            while level:
                kids = [(p, client.get_children_async(p)) for p in level]
                datas = [(p, client.get_async(p)) for p in level if not self.tree.skip_data(p)]
                next_level: list[str] = []
                for p, pending in kids:
                    try:
                        names = pending.get(timeout=30)
                    except kx.NoNodeError:
                        continue
                    snapshot.setdefault(p, b"")
                    next_level.extend(join(p, n) for n in names)
                for p, pending in datas:
                    try:
                        snapshot[p] = bytes(pending.get(timeout=30)[0])
                    except kx.NoNodeError:
                        snapshot.pop(p, None)
                level = next_level
        self.tree.replace_all(snapshot)


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
