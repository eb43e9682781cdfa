"""Shared parts of both backends: the ordered event thread and the local tree copy.

Each registry owns one :class:`EventThread`. Every watch notification, cache update and
listener call of that registry runs on it, in the order the server applied the changes,
so listeners see a consistent history and never race each other.
"""

from __future__ import annotations

import logging
import queue
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Generic, Protocol, TypeVar

from shardcron.registry.contract import EventType, NodeEvent, NodeListener

log = logging.getLogger(__name__)

_STOP = object()
C = TypeVar("C")


class EventSink(Protocol):
    """Where a registry runs its cache updates and listener calls, one at a time, in order."""

    def submit(self, fn: Callable[[], None]) -> None: ...
    def is_current(self) -> bool: ...
    def stop(self) -> None: ...


class EventThread:
    """Runs submitted callables one at a time, in order, on a single daemon thread."""

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], None]) -> None:
        self._queue.put(fn)

    def is_current(self) -> bool:
        return threading.current_thread() is self._thread

    def stop(self) -> None:
        self._queue.put(_STOP)
        if not self.is_current():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            fn = self._queue.get()
            if fn is _STOP:
                return
            try:
                fn()  # type: ignore[operator]
            except Exception:
                log.exception("registry event handler failed")


# Small values repeat, in every tree of the process: an item's owner is one of a few
# instance ids, in thousands of items and in each session's cache. Values up to this size
# are kept once (see _shared), this many at most: the table empties when full.
_SHARED_VALUE_BYTES = 64
_SHARED_VALUES = 4096
_shared_values: dict[bytes, bytes] = {}


def _shared(data: bytes) -> bytes:
    """``data``, or an equal value kept already. Any event thread may call it: each dict
    operation is atomic, and a race costs only a value not shared."""
    if len(data) > _SHARED_VALUE_BYTES:
        return data
    if len(_shared_values) >= _SHARED_VALUES:
        _shared_values.clear()
    return _shared_values.setdefault(data, data)


def parent_of(path: str) -> str:
    head = path.rsplit("/", 1)[0]
    return head or "/"


def _split(path: str) -> tuple[str, str]:
    """``path``'s parent and its own name."""
    parent, _, name = path.rpartition("/")
    return parent or "/", name


def join(parent: str, child: str) -> str:
    return f"{parent.rstrip('/')}/{child}"


def _levels(path: str) -> int:
    return 0 if path == "/" else path.count("/")


def is_below(path: str, root: str) -> bool:
    return path == root or root == "/" or path.startswith(root + "/")


class LocalTree:
    """A copy of one subtree, updated by its backend on the registry's event thread.

    Reads may come from any thread; the lock keeps each write of several keys, and each
    read of several (children, paths), consistent.
    """

    def __init__(
        self,
        root: str,
        listener: NodeListener | None,
        skip_data: Callable[[str], bool] | None,
        on_close: Callable[[LocalTree], None] | None = None,
    ) -> None:
        self.root = root
        self.skip_data = skip_data or (lambda _path: False)
        self._listener = listener
        self._on_close = on_close
        self._lock = threading.Lock()
        self._data: dict[str, bytes] = {}
        # A node's child names: one name as a plain str (most nodes with children have
        # one: an item's ``instance``), a set from the second on. A set costs 216 bytes.
        self._children: dict[str, str | set[str]] = {}
        self.version = 0  # bumped by every change: an equal version means equal contents
        self.values_version = 0  # bumped by every change to a value (see TreeCache)
        self.closed = False

    # -- reads (any thread) -------------------------------------------------------------

    # One key's read is a single dict operation, atomic without the lock (which guards the
    # writes of several keys). Taking it here made the coordinator queue behind the event
    # thread for each of the thousands of lookups a busy second makes.
    def get(self, path: str) -> bytes | None:
        return self._data.get(path)

    def exists(self, path: str) -> bool:
        return path in self._data

    def children(self, path: str) -> list[str]:
        with self._lock:
            return sorted(self._names(path))

    def close(self) -> None:
        self.closed = True
        if self._on_close:
            self._on_close(self)

    # -- writes (event thread only) -----------------------------------------------------

    def upsert(self, path: str, data: bytes) -> None:
        if is_below(path, self.root):
            self.put(path, b"" if self.skip_data(path) else data)

    def put(self, path: str, data: bytes) -> None:
        """:meth:`upsert` of a path known to be below the root, ``data`` as kept (empty
        where ``skip_data``). The common cases, a new node under a known parent and a
        changed value, take one lookup each: a big layout makes a million of them."""
        old = self._data.get(path)
        if old is not None:
            if old != data:
                data = _shared(data)
                with self._lock:
                    self._data[path] = data
                    self.version += 1
                    self.values_version += 1
                self._emit_one(NodeEvent(EventType.UPDATED, path, data))
            return
        parent = parent_of(path)
        if parent not in self._data and path != self.root:
            self._add_with_ancestors(path, data)
            return
        with self._lock:
            self._add(path, data)
        self._emit_one(NodeEvent(EventType.ADDED, path, data))

    def _add_with_ancestors(self, path: str, data: bytes) -> None:
        events = []
        with self._lock:
            missing = []
            node = path
            while node != self.root and parent_of(node) not in self._data and node != "/":
                node = parent_of(node)
                missing.append(node)
            for ancestor in reversed(missing):
                if is_below(ancestor, self.root):
                    self._add(ancestor, b"")
                    events.append(NodeEvent(EventType.ADDED, ancestor, b""))
            if path not in self._data:
                self._add(path, data)
                events.append(NodeEvent(EventType.ADDED, path, data))
        self._emit(events)

    def remove(self, path: str) -> None:
        events = []
        with self._lock:
            if path not in self._data:
                return
            for p in self._subtree(path):  # children before their parent
                if self._data.pop(p):
                    self.values_version += 1
                self.version += 1
                self._children.pop(p, None)
                parent, name = _split(p)
                siblings = self._children.get(parent)
                if siblings == name:
                    del self._children[parent]
                elif isinstance(siblings, set):
                    siblings.discard(name)
                    if not siblings:
                        del self._children[parent]
                events.append(NodeEvent(EventType.REMOVED, p, b""))
        self._emit(events)

    def replace_all(self, snapshot: dict[str, bytes]) -> None:
        """Make the copy equal to ``snapshot``, emitting only the differences."""
        with self._lock:
            gone = [p for p in self._data if p not in snapshot]
        for path in sorted(gone, key=len, reverse=True):
            self.remove(path)
        for path in sorted(snapshot, key=lambda p: (p.count("/"), p)):
            self.upsert(path, snapshot[path])

    def paths(self) -> Iterable[str]:
        with self._lock:
            return list(self._data)

    def _subtree(self, path: str) -> list[str]:
        """``path`` and its descendants, deepest first (walks the subtree, not the tree)."""
        found: list[str] = []
        for name in sorted(self._names(path)):
            found += self._subtree(join(path, name))
        found.append(path)
        return found

    def _names(self, path: str) -> Iterable[str]:
        names = self._children.get(path, ())
        return (names,) if isinstance(names, str) else names

    def _add(self, path: str, data: bytes) -> None:
        self._data[path] = _shared(data)
        self.version += 1
        if data:
            self.values_version += 1
        # Leaves have no entry in _children, and the names (the same few in every job:
        # running, lease, instance...) are shared: 2 KiB less memory per job.
        if path != self.root:
            parent, name = _split(path)
            name = sys.intern(name)
            names = self._children.get(parent)
            if names is None:
                self._children[parent] = name
            elif isinstance(names, set):
                names.add(name)
            elif names != name:
                self._children[parent] = {names, name}

    def _emit(self, events: list[NodeEvent]) -> None:
        for event in events:
            self._emit_one(event)

    def _emit_one(self, event: NodeEvent) -> None:
        if self._listener is None or self.closed:
            return
        try:
            self._listener(event)
        except Exception:
            log.exception("tree cache listener failed on %s", event)


class CacheIndex(Generic[C]):
    """Tree caches by root, so routing a change costs a dict read per level of the deepest
    root (one for a job's cache), not the cache count (a process with thousands of jobs has
    thousands of caches)."""

    def __init__(self) -> None:
        self._by_root: dict[str, tuple[C, ...]] = {}  # replaced, never changed in place
        self._deepest = 0  # levels of the deepest root ("/" has 0, "/job" 1), or more
        self._lock = threading.Lock()

    def add(self, root: str, cache: C) -> None:
        with self._lock:
            self._by_root[root] = (*self._by_root.get(root, ()), cache)
            self._deepest = max(self._deepest, _levels(root))

    def remove(self, root: str, cache: C) -> None:
        with self._lock:
            caches = tuple(c for c in self._by_root.get(root, ()) if c is not cache)
            if caches:
                self._by_root[root] = caches
            else:
                self._by_root.pop(root, None)
            if not self._by_root:
                self._deepest = 0  # else it may stay deeper than needed: only slower

    def covering(self, path: str) -> tuple[C, ...]:
        """Every cache whose root is ``path`` or one of its ancestors. Only the ancestors
        no deeper than the deepest root can be roots: one dict read each."""
        by_root = self._by_root
        found = by_root.get("/", ())
        end = 0
        for _ in range(self._deepest):
            end = path.find("/", end + 1)
            node = path if end < 0 else path[:end]
            if node != "/":
                found += by_root.get(node, ())
            if end < 0:
                break
        return found

    def all(self) -> list[C]:
        with self._lock:
            return [cache for caches in self._by_root.values() for cache in caches]

    def __bool__(self) -> bool:
        return bool(self._by_root)
