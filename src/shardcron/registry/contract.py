"""The registry contract: what every backend implements, and the ops, events and session
states coordination code speaks in. Semantics are in :mod:`shardcron.registry`'s docstring."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import NamedTuple, Protocol

from shardcron.errors import RegistryError


class SessionState(StrEnum):
    CONNECTED = "CONNECTED"  # first connection of a new session
    SUSPENDED = "SUSPENDED"  # connection dropped; the session may still be alive
    RECONNECTED = "RECONNECTED"  # back on the same session, ephemerals intact
    EXPIRED = "EXPIRED"  # the session is gone with its ephemerals; a new one follows
    LOST = "LOST"  # the client was closed; no further events
    # The registry came back without what this session had seen (it lost its data, or was
    # restored from a backup): every node is gone, and the jobs register as if new. Comes
    # ahead of the CONNECTED of the new session and of the events that empty the caches.
    RESET = "RESET"


class EventType(StrEnum):
    ADDED = "ADDED"
    UPDATED = "UPDATED"
    REMOVED = "REMOVED"


class NodeEvent(NamedTuple):
    """A change a tree cache saw. A named tuple, not a dataclass: a big layout makes a
    million of them, and a frozen dataclass takes several times as long to build."""

    type: EventType
    path: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Stat:
    version: int
    czxid: int  # transaction id that created the node: grows monotonically
    mzxid: int  # transaction id of the last change
    ctime_ms: int
    mtime_ms: int
    ephemeral_owner: int  # session id, 0 for persistent nodes


@dataclass(frozen=True, slots=True)
class Create:
    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequential: bool = False


@dataclass(frozen=True, slots=True)
class SetData:
    path: str
    data: bytes
    version: int = -1


@dataclass(frozen=True, slots=True)
class Delete:
    path: str
    version: int = -1


@dataclass(frozen=True, slots=True)
class Check:
    """Succeeds if the node exists (and has ``version`` unless it is -1)."""

    path: str
    version: int = -1


Op = Create | SetData | Delete | Check
# A committed op's result: the created path, the new Stat of a SetData, or None.
OpResult = str | Stat | None
Node = tuple[bytes, Stat]  # a node's value and stat (Registry.get_with_stats)
# What a transaction sent without waiting comes back as: its results, or the error
# ``transaction`` would have raised.
Answer = list[OpResult] | RegistryError

# ZooKeeper rejects requests over jute.maxbuffer (1 MiB by default, and the same limit
# holds for the transaction it logs and sends to followers): a quarter of it is headroom.
MAX_TRANSACTION_BYTES = 768 * 1024
# Per op of a multi: its header (type, done, err), the version or flags, each string's
# length prefix, and for a create its ACL list (an ACL with a digest id is the largest).
_OP_OVERHEAD_BYTES = 9 + 4 + 4 + 4
_ACL_BYTES = 4 + 4 + (4 + 6) + (4 + 64)


def op_bytes(op: Op, prefix: int) -> int:
    """An upper bound of ``op``'s size in a multi request; ``prefix`` is the length the
    registry adds to every path (ZooKeeper's chroot, ``/{namespace}``)."""
    size = _OP_OVERHEAD_BYTES + prefix + len(op.path.encode())
    if isinstance(op, Create | SetData):
        size += len(op.data)
    if isinstance(op, Create):
        size += _ACL_BYTES
    return size


def prefix_bytes(registry: Registry) -> int:
    """What ``registry`` adds to every path of a request (``/{namespace}``), in bytes."""
    return len(registry.namespace.encode()) + 1


def settle(transaction: Callable[[], list[OpResult]]) -> Answer:
    """Run ``transaction`` now, for a registry whose answer is at hand."""
    try:
        return transaction()
    except RegistryError as exc:
        return exc


def fitting(groups: Iterable[Sequence[Op]], prefix: int, max_ops: float = float("inf")) -> int:
    """How many of ``groups`` (at least one), in order, fit one transaction: at most
    MAX_TRANSACTION_BYTES and ``max_ops`` ops. A group is never cut: its ops are one
    job's, applied together or not at all."""
    count = size = ops = 0
    for group in groups:
        size += sum(op_bytes(op, prefix) for op in group)
        ops += len(group)
        if count and (size > MAX_TRANSACTION_BYTES or ops > max_ops):
            return count
        count += 1
    return count


def group_of(groups: Iterable[Sequence[Op]], index: int) -> int:
    """Which of ``groups``, joined in one transaction, holds its op ``index`` (the op a
    :class:`~shardcron.errors.TransactionError` names)."""
    for n, group in enumerate(groups):
        if index < len(group):
            return n
        index -= len(group)
    return n


class TreeCache(Protocol):
    """A local, watched copy of a subtree; reads cost no round trip.

    Nodes for which the cache's ``skip_data`` predicate holds are tracked for existence
    only and read as ``b""``: read them from the registry if their value matters.
    """

    def get(self, path: str) -> bytes | None: ...
    def exists(self, path: str) -> bool: ...
    def children(self, path: str) -> list[str]: ...
    def close(self) -> None: ...
    @property
    def version(self) -> int:
        """Changes with every change the copy takes: an equal version, equal contents."""
        ...

    @property
    def values_version(self) -> int:
        """Changes with every change to a non-empty value: a node holding one appears,
        changes or goes. Flags (empty nodes) leave it alone, so what is read from values
        alone (an item's owner) stays valid while it is equal."""
        ...


class Lock(Protocol):
    """A distributed mutex held by this session; released if the session ends."""

    def acquire(self, timeout: float) -> bool: ...
    def release(self) -> None: ...


NodeListener = Callable[[NodeEvent], None]
SessionListener = Callable[[SessionState], None]
# A tree cache's root, listener and skip_data (see Registry.tree_cache).
CacheSpec = tuple[str, NodeListener | None, Callable[[str], bool] | None]


class Registry(Protocol):
    """Storage for coordination state. Methods raise :class:`RegistryError` subclasses only.

    A request made while the connection is down fails (:class:`ConnectionLostError`)
    instead of waiting for the connection to come back."""

    @property
    def namespace(self) -> str: ...
    @property
    def session_id(self) -> int: ...
    @property
    def request_count(self) -> int:
        """Round trips made so far (reads served by a cache do not count)."""
        ...

    @property
    def connected(self) -> bool: ...

    def start(self, timeout: float = 15.0) -> None:
        """Connect; raise :class:`ConnectionLostError` if the server cannot be reached in time."""
        ...

    def close(self) -> None:
        """End the session: its ephemeral nodes vanish, listeners get ``LOST``."""
        ...

    def add_session_listener(self, listener: SessionListener) -> None: ...

    def get(self, path: str) -> bytes | None:
        """The node's value, or None if it does not exist."""
        ...

    def stat(self, path: str) -> Stat | None: ...
    def get_with_stats(self, paths: Sequence[str]) -> list[Node | None]:
        """The value and stat of each of ``paths`` (None where there is no node), read
        together: on ZooKeeper, multiRead requests of thousands of reads each, all sent
        before the first answer is awaited. Not one consistent snapshot: write at the
        versions read to find out that a node changed since."""
        ...

    def children(self, path: str) -> list[str]:
        """Child names, sorted; ``[]`` if the node does not exist."""
        ...

    def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequential: bool = False
    ) -> str:
        """Create a node (and persistent parents); return its path. :raises NodeExistsError:"""
        ...

    def put(self, path: str, data: bytes) -> None:
        """Create a persistent node or overwrite its value."""
        ...

    def delete(self, path: str, *, recursive: bool = False) -> None:
        """Delete a node (with its subtree if ``recursive``); a missing node is not an error."""
        ...

    def transaction(self, ops: Sequence[Op]) -> list[OpResult]:
        """Apply all ops or none. :raises TransactionError: naming the failing op."""
        ...

    def send_transaction(self, ops: Sequence[Op], answer: Callable[[Answer], None]) -> None:
        """:meth:`transaction` without waiting: ``answer`` gets what it would have returned
        or raised, on the thread the answer arrives on (the embedded registry answers
        before returning). Transactions of one session apply in the order they were sent."""
        ...

    def tree_cache(
        self,
        path: str,
        listener: NodeListener | None = None,
        skip_data: Callable[[str], bool] | None = None,
        timeout: float = 15.0,
    ) -> TreeCache:
        """Start a cache of ``path``'s subtree, loaded before returning.

        ``listener`` gets an ADDED event per node of the initial load, then every change.
        """
        ...

    def tree_caches(self, specs: Sequence[CacheSpec], timeout: float = 15.0) -> Sequence[TreeCache]:
        """Start several caches at once (each as :meth:`tree_cache`): on ZooKeeper their
        loads share one pipelined pass, so a thousand caches cost a handful of round trips.
        All load or none (the error of the first that failed)."""
        ...

    def lock(self, path: str) -> Lock: ...

    def server_time(self, path: str) -> float:
        """The registry's clock, in epoch seconds, by touching ``path``."""
        ...
