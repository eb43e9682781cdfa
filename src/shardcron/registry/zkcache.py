"""The tree caches of one ZooKeeper session: watch events in, values read in batches,
changes applied in order on the session's event thread.

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

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from kazoo import exceptions as kx
from kazoo.client import KazooClient

from shardcron.errors import ConnectionLostError, RegistryError
from shardcron.registry import zkwire
from shardcron.registry.cache import CacheIndex, EventThread, LocalTree, join
from shardcron.registry.contract import CacheSpec
from shardcron.registry.zkwire import NO_NODE, kazoo_errors, translate

log = logging.getLogger(__name__)

_CREATED, _DELETED, _CHANGED = 1, 2, 3
_FETCH, _TOUCH = 10, 11  # how a change applies to a cache: read its value, or not
# Reads per multiRead: a response of about 100 bytes a read stays far below jute.maxbuffer.
MAX_READS_PER_REQUEST = 2000


class ZooKeeperCaches:
    """The caches of one kazoo session, and the event thread that applies their changes
    and runs the session's listeners."""

    def __init__(self, client: KazooClient, name: str) -> None:
        self.client = client
        self.index: CacheIndex[ZooKeeperTreeCache] = CacheIndex()
        self.events = EventThread(name)
        # The changes the next batch job applies (see queue_changes), or None; and the
        # batches closed whose reads have not gone out yet, oldest first. Kazoo's thread
        # takes _batch_lock, so nobody holds it while sending: a send can block until that
        # thread reads its wake-up pipe. _send_lock keeps the batches' reads in order.
        self._batch: _Batch | None = None
        self._unsent: list[_Batch] = []
        self._batch_lock = threading.Lock()
        self._send_lock = threading.Lock()

    def full(self, path: str) -> str:
        """``path`` with the session's chroot (the namespace)."""
        chroot = self.client.chroot or ""
        return chroot if path == "/" and chroot else chroot + path

    def cached(self, path: str) -> bool:
        """Whether a cache shows ``path`` (it may be a moment behind: a hint, not a fact)."""
        return any(cache.tree.exists(path) for cache in self.index.covering(path))

    def notify(self, events: list[tuple[int, str]]) -> None:
        """On the connection thread: queue the changes that ``events`` (type, full path)
        make to the caches, in order; the caller holds no lock. One call per socket read,
        not a chain of calls per event: a big layout pushes a million events."""
        chroot = self.client.chroot or ""
        cut = len(chroot)
        covering = self.index.covering
        changes: list[tuple[LocalTree, str, int]] = []
        for kind, full in events:
            path = (full[cut:] or "/") if full.startswith(chroot) else full
            for cache in covering(path):
                tree = cache.tree
                if kind == _DELETED:
                    changes.append((tree, path, _DELETED))
                elif kind == _CREATED:
                    changes.append((tree, path, _TOUCH if tree.skip_data(path) else _FETCH))
                elif kind == _CHANGED and not tree.skip_data(path):
                    changes.append((tree, path, _FETCH))
                # A change to a node tracked for existence only changes nothing in the
                # tree: the node is there already (its creation, or the load, came first,
                # and changes apply in order). Every claim touches its items' nodes.
        if changes:
            self.queue_changes(changes)

    def submit(self, fn: Callable[[], None], send: bool = True) -> None:
        """Queue ``fn`` on the event thread, after every notification received so far:
        it closes the open batch, so later notifications apply after ``fn`` runs.

        The closed batch's reads go out now, so they are answered by the time the event
        thread gets to it; on kazoo's thread (``send=False``) the event thread sends them,
        as kazoo's thread must never wait for its own wake-up pipe."""
        with self._batch_lock:
            self._close_batch()
            self.events.submit(fn)
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

    def queue_changes(self, changes: list[tuple[LocalTree, str, int]]) -> None:
        """Called on the connection thread: apply change notifications, each to its tree,
        in order, fetching the value where the tree needs it (the kind is _FETCH, _TOUCH
        for a node tracked for existence only, or _DELETED).

        Changes that arrive before the event thread gets to the batch join it, and its
        values are read in one multiRead: a burst of changes costs a request or two."""
        with self._batch_lock:
            batch = self._batch
            if batch is None:
                batch = self._batch = _Batch()
                self.events.submit(lambda: self._apply_batch(batch))
            batch.changes += changes

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
            retry = self.client.connected and isinstance(exc, ConnectionLostError)
            log.warning(
                "could not read the values of %d nodes (%s); %s",
                len(batch.paths),
                exc,
                "reading them again" if retry else "the resync after reconnecting restores them",
            )
        again = []
        for tree, path, kind in batch.changes:
            if tree.closed:
                continue
            if kind == _FETCH and retry:
                again.append((tree, path, _FETCH))
            elif kind == _DELETED:
                tree.remove(path)
            # notify() routed the change to this tree (the path is below its root) and
            # asked skip_data already (_TOUCH): put, not upsert, which would ask again.
            elif kind == _TOUCH:
                tree.put(path, b"")
            elif isinstance(value := values.get(path), bytes):
                tree.put(path, value)
            # else: deleted meanwhile (its DELETED notification follows) or not read
        if again:
            self.queue_changes(again)

    def read_many(
        self, reads: list[tuple[int, str]], request: type[zkwire.MultiRead] = zkwire.MultiRead
    ) -> list[Any]:
        """Reads (kind, path) in multiRead requests, all sent before any answer is awaited.
        Errors come back as ZooKeeper's codes; any but "no node" raises."""
        return self._collect(reads, self._send_reads(reads, request))

    def _send_reads(
        self, reads: list[tuple[int, str]], request: type[zkwire.MultiRead] = zkwire.MultiRead
    ) -> list[Any]:
        client = self.client
        pending = []
        with kazoo_errors(f"read {len(reads)} nodes"):
            for i in range(0, len(reads), MAX_READS_PER_REQUEST):
                chunk = reads[i : i + MAX_READS_PER_REQUEST]
                answer = client.handler.async_result()
                client._call(request([(kind, self.full(p)) for kind, p in chunk]), answer)
                pending.append(answer)
        return pending

    def _collect(
        self, reads: list[tuple[int, str]], pending: list[Any]
    ) -> list[bytes | list[str] | int]:
        results: list[bytes | list[str] | int] = []
        with kazoo_errors(f"read {len(reads)} nodes"):
            for answer in pending:
                results += answer.get(timeout=30)
        for (_, path), result in zip(reads, results, strict=True):
            if isinstance(result, int) and result != NO_NODE:
                raise translate(kx.EXCEPTIONS[result](), f"read {path}")
        return results

    def _read_trees(
        self, caches: list[ZooKeeperTreeCache], arm: bool = True
    ) -> list[dict[str, bytes]]:
        """Snapshots of the caches' subtrees, read level by level across all of them; the
        persistent watches are armed first (in the same pipeline), so no change is lost."""
        client = self.client
        armed = []
        if arm:
            with kazoo_errors("watch"):
                for cache in caches:
                    answer = client.handler.async_result()
                    request = zkwire.AddWatch(
                        self.full(cache.tree.root), zkwire.PERSISTENT_RECURSIVE
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
            results = self.read_many([(kind, path) for _, kind, path in reads])
            level = []
            for (k, _kind, path), result in zip(reads, results, strict=True):
                if isinstance(result, int):  # no node: gone (or not there yet)
                    snapshots[k].pop(path, None)
                elif isinstance(result, list):
                    snapshots[k].setdefault(path, b"")
                    level.extend((k, join(path, name)) for name in result)
                else:
                    snapshots[k][path] = result
        with kazoo_errors("watch"):
            for answer in armed:
                answer.get(timeout=30)
        return snapshots

    def resync(self) -> None:
        caches = self.index.all()
        try:
            snapshots = self._read_trees(caches)
        except RegistryError as exc:
            log.warning("could not resync %d caches (%s); next reconnect retries", len(caches), exc)
            return
        for cache, snapshot in zip(caches, snapshots, strict=True):
            if not cache.tree.closed:
                cache.tree.replace_all(snapshot)

    def load(self, specs: Sequence[CacheSpec], timeout: float = 15.0) -> list[ZooKeeperTreeCache]:
        caches = [ZooKeeperTreeCache(self, LocalTree(*spec)) for spec in specs]
        if self.events.is_current():  # a listener making a cache: load it right here
            for cache in caches:
                self.index.add(cache.tree.root, cache)
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

        self.submit(apply)
        for cache in caches:  # notifications from now on queue behind apply
            self.index.add(cache.tree.root, cache)
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


class _Batch:
    """Change notifications applied together, and the reads of the values they need."""

    __slots__ = ("answers", "changes", "failure", "paths")

    def __init__(self) -> None:
        self.changes: list[tuple[LocalTree, str, int]] = []
        self.paths: list[str] = []
        self.answers: list[Any] = []
        self.failure: RegistryError | None = None


class ZooKeeperTreeCache:
    def __init__(self, caches: ZooKeeperCaches, tree: LocalTree) -> None:
        self.caches = caches
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

    @property
    def values_version(self) -> int:
        return self.tree.values_version

    def close(self) -> None:
        self.tree.closed = True
        self.caches.index.remove(self.tree.root, self)
