"""The ZooKeeper registry, through kazoo: with :mod:`.zkwire` and :mod:`.zkcache`, the
only modules that import kazoo. A session, its node operations and transactions, ACLs
and the session's listeners live here; its tree caches in :mod:`.zkcache`; kazoo's
errors become :mod:`shardcron.errors` in :mod:`.zkwire`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Self

from kazoo import exceptions as kx
from kazoo.client import KazooClient, KazooState
from kazoo.protocol.serialization import Watch
from kazoo.protocol.states import KeeperState
from kazoo.recipe.lock import Lock as KazooLock
from kazoo.retry import KazooRetry
from kazoo.security import CREATOR_ALL_ACL, Permissions, make_digest_acl

from shardcron.config.registry import RegistryConfig
from shardcron.errors import (
    ConfigError,
    NoNodeError,
    RegistryError,
    TransactionError,
)
from shardcron.registry import zkwire
from shardcron.registry.contract import (
    Answer,
    CacheSpec,
    Node,
    NodeListener,
    Op,
    OpResult,
    SessionListener,
    SessionState,
    Stat,
    settle,
)
from shardcron.registry.zkcache import ZooKeeperCaches, ZooKeeperTreeCache
from shardcron.registry.zkwire import kazoo_errors as _errors
from shardcron.registry.zkwire import translate as _translate

log = logging.getLogger(__name__)
# kazoo warns when a client's chroot (our namespace) does not exist yet: start() creates
# it right after connecting. A filter for good, not warnings.catch_warnings() around the
# connect: that swaps the process-wide filters, and two registries starting on two threads
# restored each other's.
warnings.filterwarnings(
    "ignore", message="No chroot path exists", category=UserWarning, module="kazoo.client"
)
# Any of these for world:anyone means an anonymous client can change the jobs.
_CHANGE_PERMS = Permissions.WRITE | Permissions.CREATE | Permissions.DELETE | Permissions.ADMIN


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
        self._caches = ZooKeeperCaches(self.client, f"shardcron-zk-{config.namespace}")
        self._session: int | None = None
        self._closing = False
        self._suspended = False
        self._state_lock = threading.Lock()  # the suspension, as kazoo and the watchdog see it
        self._suspended_at = 0.0
        # Set when the watchdog gave up on the session: (its id, the last zxid seen, since).
        self._renewed: tuple[int, int, float] | None = None
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
        zkwire.send_queued(client._connection)

    def _hook_watch_events(self) -> None:
        client = self.client
        connection = client._connection
        original = connection._read_watch_event

        def on_watches(events: list[tuple[int, str]]) -> int:
            """Most events: decoded by BufferedReads, never through kazoo's reader. Kazoo's
            own handling serves only the one-shot watches kazoo set (a lock's)."""
            one_shot, children = client._data_watchers, client._child_watchers
            if one_shot or children:
                for n, (_, full) in enumerate(events):
                    if full in one_shot or full in children:
                        events = events[:n]
                        break
            self._caches.notify(events)
            return len(events)

        def read_watch_event(buffer: bytes, offset: int) -> Any:
            watch, _ = Watch.deserialize(buffer, offset)
            if not on_watches([(watch.type, watch.path)]):
                self._caches.notify([(watch.type, watch.path)])
                original(buffer, offset)

        connection._read_watch_event = read_watch_event
        self._reads.on_watches = on_watches

    def _on_kazoo_state(self, state: str) -> None:
        # Runs on kazoo's connection thread: read what we need now, act on our thread.
        session = self.client._session_id
        if state == KazooState.SUSPENDED:
            with self._state_lock:
                self._suspended = True
                self._suspended_at = time.monotonic()
            self._watch_for_refusal(self._suspended_at)
            self._publish(SessionState.SUSPENDED)
        elif state == KazooState.LOST:
            self._publish(SessionState.LOST if self._closing else SessionState.EXPIRED)
            self._session = None
        elif state == KazooState.CONNECTED:
            with self._state_lock:
                same = self._session is not None and session == self._session
                self._session = session
                self._suspended = False
                renewed, self._renewed = self._renewed, None
            if renewed is not None:  # ahead of the resync: it may find the namespace gone
                self._caches.submit(lambda: self._after_renewal(*renewed), send=False)
            if self._caches.index:
                self._caches.submit(self._caches.resync, send=False)
            self._publish(SessionState.RECONNECTED if same else SessionState.CONNECTED)

    def _watch_for_refusal(self, since: float) -> None:
        """A ZooKeeper that lost its data, or was restored from a backup, refuses this
        session for good: the session has seen later transactions than the server has
        ("client has seen zxid ..."), and kazoo retries it for ever. Once the session
        timeout has passed one and a half times with no connection, the session is over on
        every server anyway; a new one is started (see :meth:`_renew`)."""
        wait = 1.5 * self._config.session_timeout_ms / 1000

        def check() -> None:
            with self._state_lock:
                if self._closing or not self._suspended or self._suspended_at != since:
                    return  # connected again meanwhile, or suspended anew
                self._renew(since)
            self._publish(SessionState.EXPIRED)

        timer = threading.Timer(wait, check)
        timer.daemon = True
        timer.start()

    def _renew(self, since: float) -> None:
        """Make kazoo's next connection attempt ask for a new session, as it does after
        an expiry the server reported (the attempt reads these when it is made)."""
        client = self.client
        self._renewed = (int(client._session_id or 0), int(client.last_zxid), since)
        self._session = None
        client._session_id = None
        client._session_passwd = b"\x00" * 16
        client.last_zxid = 0

    def _after_renewal(self, old: int, seen: int, since: float) -> None:
        """On the event thread, with the new session: say why the old one was given up on
        (one line), put the namespace back if it is gone, and tell the listeners when the
        server has lost what the old session had seen."""
        servers, silent = self._config.servers, time.monotonic() - since
        try:
            gone = self.client.exists("/") is None
            now = int(self.client.last_zxid)  # from the answer's header
            if gone and self._create_namespace:
                self.client.ensure_path("/")
        except kx.KazooException as exc:
            log.warning("ZooKeeper at %s: new session, but reading it failed: %s", servers, exc)
            return
        causes = []
        if now < seen:
            causes.append(f"its last transaction 0x{now:x} is older than 0x{seen:x} seen before")
        if gone:
            causes.append(f"the namespace /{self._namespace} was gone")
        if not causes:
            log.warning(
                "ZooKeeper at %s: no connection for %.0f s, longer than the session timeout: "
                "started a new session",
                servers,
                silent,
            )
            return
        log.error(
            "ZooKeeper at %s refused session 0x%x (%s): it lost its data or was restored "
            "from a backup; started a new session and registering every job again",
            servers,
            old,
            "; ".join(causes),
        )
        for listener in list(self._listeners):  # on the event thread already: in order
            listener(SessionState.RESET)

    def _publish(self, state: SessionState) -> None:
        for listener in list(self._listeners):
            self._caches.submit(lambda fn=listener: fn(state), send=False)  # type: ignore[misc]

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
        with _errors(f"connect to ZooKeeper at {self._config.servers}"):
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
        for cache in self._caches.index.all():
            cache.close()
        try:
            self.client.stop()
            self.client.close()
        except kx.KazooException:
            log.debug("error while closing the ZooKeeper client", exc_info=True)
        self._caches.events.stop()

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

    def get_with_stats(self, paths: Sequence[str]) -> list[Node | None]:
        reads = [(zkwire.GET_DATA, path) for path in paths]
        results = self._caches.read_many(reads, zkwire.MultiReadStats)
        return [None if isinstance(r, int) else (r[0], _stat(r[1])) for r in results]

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
            missing = [a for a in ancestors if not (trust_caches and self._caches.cached(a))]
            parents = [client.create_async(a) for a in missing]
            created = client.create_async(path, data, ephemeral=ephemeral, sequence=sequential)
            for parent in parents:
                # No node: a cache showed its parent, gone since. The node's own answer
                # tells whether to create every ancestor.
                with contextlib.suppress(kx.NodeExistsError, kx.NoNodeError):
                    parent.get()
            try:
                return str(created.get())
            except kx.NoNodeError:
                if not trust_caches:
                    raise
        raise AssertionError("unreachable")

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
        return _results(ops, self._send(ops))

    def send_transaction(self, ops: Sequence[Op], answer: Callable[[Answer], None]) -> None:
        def arrived(sent: Any) -> None:  # on kazoo's completion thread
            answer(settle(lambda: _results(ops, sent)))

        self._send(ops).rawlink(arrived)

    def _send(self, ops: Sequence[Op]) -> Any:
        request = zkwire.transaction(ops, self._caches.full, self.client.default_acl)
        sent = self.client.handler.async_result()
        self.client._call(request, sent)
        return sent

    # -- caches, locks, time -------------------------------------------------------------

    def tree_cache(
        self,
        path: str,
        listener: NodeListener | None = None,
        skip_data: Callable[[str], bool] | None = None,
        timeout: float = 15.0,
    ) -> ZooKeeperTreeCache:
        return self.tree_caches([(path, listener, skip_data)], timeout)[0]

    def tree_caches(
        self, specs: Sequence[CacheSpec], timeout: float = 15.0
    ) -> list[ZooKeeperTreeCache]:
        return self._caches.load(specs, timeout)

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


def _results(ops: Sequence[Op], sent: Any) -> list[OpResult]:
    """The results of the transaction ``sent`` (kazoo's async result), once it arrives."""
    with _errors("transaction"):
        raw = sent.get()
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
