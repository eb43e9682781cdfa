"""What shardcron adds to kazoo's side of the ZooKeeper wire: two requests kazoo 2.11 lacks,
transactions built without kazoo's per-op checks, buffered reads, and kazoo's errors in
shardcron's terms.

* :class:`AddWatch` (opcode 106) arms a persistent recursive watch; :class:`MultiRead`
  (opcode 22, ZooKeeper 3.6+) sends many reads in one request (:class:`MultiReadStats`
  keeps each value's stat).
* :func:`transaction` builds a multi-op from shardcron's ops directly: kazoo's
  ``TransactionRequest`` type-checks and normalises every path, which costs more than
  the request itself at a thousand ops a tick.
* :class:`BufferedReads`: kazoo reads each packet with two ``recv`` calls, each after a
  ``select`` that builds a new epoll object, about 0.1 ms a packet. A group commit of
  1,000 claims pushes 3,000 watch events ahead of its own answer, so that cost decides
  when the answer arrives. Installed on a connection, it reads what the socket holds in
  one ``recv`` (into one reused buffer, asking the non-blocking socket before building a
  selector) and hands kazoo's packet loop every complete packet already read before
  that loop selects again (a ``select`` cannot see bytes that were already read).
  Watch events among those packets go straight to ``on_watches``, all those of one
  read in one call: kazoo's way through its generic reader, one event at a time, costs
  several times the decoding itself.
* :func:`send_queued`: kazoo sends one request per turn of its packet loop, each with a
  ``poll``, a ``poll`` for writability, a ``send`` and a ``recv`` of its wake-up byte.
  Installed on a connection, every request queued at that turn goes out in one write:
  a worker starting thousands of jobs arms one watch per job in a burst.
* :func:`translate` and :func:`kazoo_errors`: every kazoo exception becomes a
  :mod:`shardcron.errors` error here and nowhere else.
* :func:`poll_select` replaces kazoo's ``select`` (an epoll object built, filled, waited
  on and closed at every wake-up of every session's loop: five system calls) with one
  ``poll`` call.
"""

from __future__ import annotations

import select
import ssl
import struct
from collections import namedtuple
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from kazoo import exceptions as kx
from kazoo.exceptions import ConnectionDropped
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.serialization import (
    Auth,
    CheckVersion,
    Close,
    int_struct,
    multiheader_struct,
    read_buffer,
    read_string,
    stat_struct,
    write_string,
)
from kazoo.protocol.serialization import Create as KazooCreate
from kazoo.protocol.serialization import Delete as KazooDelete
from kazoo.protocol.serialization import SetData as KazooSetData
from kazoo.protocol.serialization import Transaction as KazooTransaction
from kazoo.protocol.states import ZnodeStat
from kazoo.retry import RetryFailedError
from kazoo.security import OPEN_ACL_UNSAFE

from shardcron.errors import (
    BadVersionError,
    ConnectionLostError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RegistryError,
    SessionExpiredError,
)
from shardcron.registry.contract import Check, Create, Delete, Op, SetData

PERSISTENT_RECURSIVE = 1
GET_DATA, GET_CHILDREN = 4, 8
# One recv takes up to this much: about 3,000 watch events of a group commit.
RECV_BYTES = 256 * 1024
# Requests one write sends at most: the loop reads answers between writes.
SEND_BATCH = 1000
WATCH_XID = -1
NO_NODE = kx.NoNodeError.code
# A watch event's packet: length, reply header (xid, zxid, err), type, state, path length.
_WATCH_EVENT = struct.Struct("!iiqiiii")


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


def translate(exc: Exception, what: str) -> RegistryError:
    """Kazoo's ``exc`` as shardcron's error, with ``what`` failed."""
    for kazoo_type, ours in _ERRORS:
        if isinstance(exc, kazoo_type):
            return ours(f"{what}: {type(exc).__name__}")
    return RegistryError(f"{what}: {type(exc).__name__}: {exc}")


@contextmanager
def kazoo_errors(what: str) -> Iterator[None]:
    """Kazoo's exceptions raised inside, as shardcron's (``what`` names the operation)."""
    try:
        yield
    except (kx.KazooException, KazooTimeoutError, RetryFailedError) as exc:
        raise translate(exc, what) from exc


class AddWatch(namedtuple("AddWatch", "path mode")):
    """ZooKeeper's addWatch request (opcode 106)."""

    type = 106

    def serialize(self) -> bytearray:
        b = bytearray(write_string(self.path))
        b.extend(int(self.mode).to_bytes(4, "big", signed=True))
        return b

    @classmethod
    def deserialize(cls, buffer: bytes, offset: int) -> bool:
        return True


class MultiRead(namedtuple("MultiRead", "ops")):
    """ZooKeeper's multiRead request (opcode 22): several getData/getChildren in one
    round trip. Each read answers on its own: a missing node fails its read only. Results
    are bytes (data), a list (children) or an int (error)."""

    type = 22
    with_stats = False

    def serialize(self) -> bytearray:
        b = bytearray()
        for kind, path in self.ops:
            b.extend(multiheader_struct.pack(kind, False, -1))
            b.extend(write_string(path))
            b.append(0)  # no one-shot watch: the persistent one covers it
        b.extend(multiheader_struct.pack(-1, True, -1))
        return b

    @classmethod
    def deserialize(cls, buffer: bytes, offset: int) -> list[bytes | list[str] | int]:
        results: list[bytes | list[str] | int] = []
        with_stats = cls.with_stats
        while True:
            kind, done, _err = multiheader_struct.unpack_from(buffer, offset)
            offset += multiheader_struct.size
            if done:
                return results
            if kind == GET_DATA:
                data, offset = read_buffer(buffer, offset)
                value = b"" if data is None else bytes(data)
                if with_stats:
                    stat = ZnodeStat._make(stat_struct.unpack_from(buffer, offset))
                    results.append((value, stat))  # type: ignore[arg-type]
                else:
                    results.append(value)
                offset += stat_struct.size
            elif kind == GET_CHILDREN:
                count = int_struct.unpack_from(buffer, offset)[0]
                offset += int_struct.size
                names = []
                for _ in range(max(count, 0)):
                    name, offset = read_string(buffer, offset)
                    names.append(name)
                results.append(names)
            else:  # an error result
                results.append(int_struct.unpack_from(buffer, offset)[0])
                offset += int_struct.size


class MultiReadStats(MultiRead):
    """A :class:`MultiRead` whose getData results come with the node's stat, as
    ``(data, ZnodeStat)``: a version to write at, an ephemeral owner to compare."""

    with_stats = True


_CREATE, _DELETE, _SET_DATA, _CHECK = (
    KazooCreate.type,
    KazooDelete.type,
    KazooSetData.type,
    CheckVersion.type,
)
_OP_HEADERS = {
    kind: multiheader_struct.pack(kind, False, -1) for kind in (_CREATE, _DELETE, _SET_DATA, _CHECK)
}
_LAST_HEADER = multiheader_struct.pack(-1, True, -1)
_ACLS: dict[tuple[Any, ...], bytes] = {}  # a client's ACL list, packed once


class Multi(namedtuple("Multi", "packed")):
    """ZooKeeper's multi request (opcode 14), packed when built: kazoo packs a multi op
    by op, with a header object and a bytearray each, on its connection thread, and reads
    the answer the same way. A herd's claims are thousands of ops a second. The answer
    comes back as kazoo's: a created path (kazoo takes the chroot off, as for its own
    multi: same opcode), a stat, ``True``, or an exception per op."""

    type = KazooTransaction.type

    def serialize(self) -> bytes:
        packed: bytes = self.packed
        return packed

    @classmethod
    def deserialize(cls, buffer: bytes, offset: int) -> list[Any]:
        results: list[Any] = []
        while True:
            kind, done, _err = multiheader_struct.unpack_from(buffer, offset)
            offset += multiheader_struct.size
            if done:
                return results
            if kind == _CREATE:
                path, offset = read_string(buffer, offset)
                results.append(path)
            elif kind == _SET_DATA:
                results.append(ZnodeStat._make(stat_struct.unpack_from(buffer, offset)))
                offset += stat_struct.size
            elif kind == -1:
                results.append(kx.EXCEPTIONS[int_struct.unpack_from(buffer, offset)[0]]())
                offset += int_struct.size
            else:  # a delete or a check
                results.append(True)


_INT = struct.Struct("!i")  # kazoo's int_struct, typed


def _packed(text: str) -> bytes:
    data = text.encode()
    return _INT.pack(len(data)) + data


def _packed_acl(acl: Any) -> bytes:
    key = tuple(acl)
    if key not in _ACLS:
        _ACLS[key] = _INT.pack(len(key)) + b"".join(
            _INT.pack(a.perms) + _packed(a.id.scheme) + _packed(a.id.id) for a in key
        )
    return _ACLS[key]


def transaction(ops: Sequence[Op], full: Callable[[str], str], acl: Any) -> Multi:
    """The multi-op request for ``ops``; ``full`` gives a path with the chroot. Packed into
    one growing buffer: a list of a part per field, for the registrations of thousands of
    ops, left a worker of 1,000 jobs 1–2 MiB bigger for good."""
    packed_acl = _packed_acl(acl or OPEN_ACL_UNSAFE)
    pack_int = _INT.pack
    out = bytearray()
    for op in ops:
        path = _packed(full(op.path))
        if isinstance(op, Create):
            flags = (1 if op.ephemeral else 0) | (2 if op.sequential else 0)
            out += _OP_HEADERS[_CREATE] + path + pack_int(len(op.data)) + op.data
            out += packed_acl + pack_int(flags)
        elif isinstance(op, SetData):
            out += _OP_HEADERS[_SET_DATA] + path + pack_int(len(op.data)) + op.data
            out += pack_int(op.version)
        elif isinstance(op, Delete):
            out += _OP_HEADERS[_DELETE] + path + pack_int(op.version)
        elif isinstance(op, Check):
            out += _OP_HEADERS[_CHECK] + path + pack_int(op.version)
    out += _LAST_HEADER
    return Multi(bytes(out))


class BufferedReads:
    """Buffered reading for one kazoo connection (see the module docstring).

    Only the packet loop reads ahead; the reads kazoo makes while connecting take exactly
    what they ask for, so nothing is left in the buffer that the loop's ``select`` would
    not announce. A partial packet left after the loop's turn completes with bytes still
    to come, which ``select`` does announce."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self._read_socket = connection._read_socket
        self._socket: Any = None
        self._buffer = bytearray()
        # One receive buffer, reused, instead of a fresh 256 KiB bytes object per recv.
        self._chunk = bytearray(RECV_BYTES)
        self._chunk_view = memoryview(self._chunk)
        self._ahead = False
        # Takes watch events (type, full path), in order, and says how many it took: it
        # stops before one that kazoo must read (a one-shot watch kazoo set waits for it).
        self.on_watches: Callable[[list[tuple[int, str]]], int] | None = None
        connection._read = self.read
        connection._read_socket = self.read_socket

    def read(self, length: int, timeout: float) -> bytes:
        connection = self._connection
        sock = connection._socket
        if sock is not self._socket:  # a new connection: nothing read before counts
            self._socket, self._buffer = sock, bytearray()
        buffer = self._buffer
        with connection._socket_error_handling():
            while len(buffer) < length:
                missing = length - len(buffer)
                try:
                    # The socket is non-blocking: ask first, and build a selector (an
                    # epoll object, in kazoo) only when nothing is there yet.
                    want = RECV_BYTES if self._ahead else min(missing, RECV_BYTES)
                    got = sock.recv_into(self._chunk, want)
                except (BlockingIOError, ssl.SSLWantReadError):
                    if not connection.handler.select([sock], [], [], timeout)[0]:
                        raise connection.handler.timeout_exception(
                            "socket time-out during read"
                        ) from None
                    continue
                if not got:
                    raise ConnectionDropped("socket connection broken")
                buffer += self._chunk_view[:got]
        data = bytes(buffer[:length])
        del buffer[:length]
        return data

    def read_socket(self, read_timeout: float) -> Any:
        """kazoo's packet loop reads one packet here; this reads every complete one."""
        self._ahead = True
        try:
            while True:
                response = self._read_socket(read_timeout)
                if response is not None:
                    return response  # kazoo's "the session closed"
                self._take_watch_events()
                if not self._packet_buffered():
                    return None
        finally:
            self._ahead = False

    def _take_watch_events(self) -> None:
        """Hand the watch events at the head of the buffer to ``on_watches``, in order, up
        to the first other packet (kazoo's to read) or the first incomplete one."""
        on_watches, buffer = self.on_watches, self._buffer
        if on_watches is None or self._socket is not self._connection._socket:
            return
        events: list[tuple[int, str]] = []
        ends: list[int] = []
        end, offset, head = len(buffer), 0, _WATCH_EVENT.size
        while end - offset >= head:
            length, xid, _zxid, _err, kind, _state, size = _WATCH_EVENT.unpack_from(buffer, offset)
            if xid != WATCH_XID or size < 0 or end - offset < 4 + length:
                break
            events.append((kind, buffer[offset + head : offset + head + size].decode()))
            offset += 4 + length
            ends.append(offset)
        if events and (taken := on_watches(events)):
            del buffer[: ends[taken - 1]]

    def _packet_buffered(self) -> bool:
        buffer = self._buffer
        if self._socket is not self._connection._socket or len(buffer) < 4:
            return False
        return len(buffer) >= 4 + int.from_bytes(buffer[:4], "big", signed=True)


def send_queued(connection: Any) -> None:
    """Install on a kazoo connection: each turn of its packet loop that has requests to
    send writes every request queued then (up to :data:`SEND_BATCH`) in one ``send``,
    where kazoo writes one. Kazoo's own code still sends what needs it: its test hooks,
    and authentication, whose reply has no xid of its own."""
    send_one = connection._send_request
    client = connection.client

    def send_request(read_timeout: float, connect_timeout: float) -> None:
        queue = client._queue
        out = bytearray()
        taken: list[tuple[Any, Any, int]] = []
        xid = connection._xid
        # By index: other threads append to the queue meanwhile (only this one pops).
        for k in range(min(len(queue), SEND_BATCH)):
            request, async_object = queue[k]
            if not hasattr(request, "type") or request.type == Auth.type:
                break
            xid = (xid % 2147483647) + 1
            kind = int_struct.pack(request.type) if request.type else b""  # as kazoo's
            body = int_struct.pack(xid) + kind + request.serialize()
            out += int_struct.pack(len(body)) + body
            taken.append((request, async_object, xid))
            if request.type == Close.type:
                break
        if not taken:
            send_one(read_timeout, connect_timeout)  # nothing queued, a test hook, an auth
            return
        connection._write(bytes(out), connect_timeout)  # raises: nothing taken, as kazoo
        connection._xid = xid
        for _ in taken:
            queue.popleft()
        # A wake-up byte per request; one not written yet only wakes the loop later,
        # with nothing (or something newer) to send: kazoo copes with either.
        connection._read_sock.recv(len(taken))
        client._pending.extend(taken)

    connection._send_request = send_request


_READABLE = select.POLLIN | select.POLLPRI | select.POLLERR | select.POLLHUP | select.POLLNVAL
_WRITABLE = select.POLLOUT | select.POLLERR | select.POLLHUP | select.POLLNVAL


def poll_select(
    rlist: Sequence[Any], wlist: Sequence[Any], xlist: Sequence[Any], timeout: float | None = None
) -> tuple[list[Any], list[Any], list[Any]]:
    """kazoo's ``handler.select`` in one ``poll`` call: the objects of ``rlist`` and
    ``wlist`` that are ready. An error or hang-up counts as ready, so that the read or
    write that follows raises it, as with kazoo's selector. No fd limit, as with it."""
    poller = select.poll()
    masks: dict[int, int] = {}
    objects: dict[int, tuple[list[Any], list[Any]]] = {}
    for listed, mask, side in ((rlist, select.POLLIN, 0), (wlist, select.POLLOUT, 1)):
        for obj in listed:
            fd = obj if isinstance(obj, int) else obj.fileno()
            masks[fd] = masks.get(fd, 0) | mask
            objects.setdefault(fd, ([], []))[side].append(obj)
    for fd, mask in masks.items():
        poller.register(fd, mask)
    readable: list[Any] = []
    writable: list[Any] = []
    for fd, events in poller.poll(None if timeout is None else max(0.0, timeout) * 1000):
        if events & _READABLE and masks[fd] & select.POLLIN:
            readable += objects[fd][0]
        if events & _WRITABLE and masks[fd] & select.POLLOUT:
            writable += objects[fd][1]
    return readable, writable, []
