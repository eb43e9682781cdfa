"""What shardcron adds to kazoo's connection loop: its select, buffered reads and batched
sends (see shardcron.registry.zkwire)."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from types import SimpleNamespace

from kazoo.protocol.connection import PING_XID
from kazoo.protocol.serialization import CheckVersion
from kazoo.protocol.serialization import Create as KazooCreate
from kazoo.protocol.serialization import Delete as KazooDelete
from kazoo.protocol.serialization import SetData as KazooSetData
from kazoo.protocol.serialization import Transaction as KazooTransaction
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl

from shardcron.registry import Check, Create, Delete, Op, SetData
from shardcron.registry.zkwire import BufferedReads, Multi, poll_select, transaction
from shardcron.registry.zookeeper import ZooKeeperRegistry
from shardcron.testing.zookeeper import ZooKeeperServer, unique_namespace
from tests.conftest import zk_config


def test_the_connection_loop_wakes_for_data_for_room_to_send_and_for_a_dropped_peer() -> None:
    ours, theirs = socket.socketpair()
    wake, waker = socket.socketpair()
    with ours, theirs, wake, waker:
        assert poll_select([ours, wake], [], [], 0.01) == ([], [], [])  # nothing: time-out
        waker.send(b"!")
        assert poll_select([ours, wake], [], [], 1.0) == ([wake], [], [])
        assert poll_select([ours], [ours], [], 1.0) == ([], [ours], [])
        theirs.send(b"packet")
        assert set(poll_select([ours, wake], [], [], 1.0)[0]) == {ours, wake}
        ours.recv(64)
        theirs.close()
        # A closed connection reads as ready, so kazoo's read raises and it reconnects.
        assert poll_select([ours], [], [], 1.0)[0] == [ours]


def test_a_multi_is_the_bytes_kazoo_would_send_and_reads_kazoos_answers() -> None:
    running = "127.0.0.1@-@7001 é".encode()
    ops: list[Op] = [
        Create("/j/sharding/0/running", running),
        SetData("/j/sharding/0", b""),
        Check("/j/leases/x", 3),
        Delete("/j/sharding/7/running", -1),
        Create("/j/instances/i", b"", ephemeral=True, sequential=True),
        SetData("/j/config", b"\x00v", 7),
    ]
    for acl in (None, [make_digest_acl("user", "secret", all=True)]):
        theirs = KazooTransaction(
            [
                KazooCreate("/ns/j/sharding/0/running", running, acl or OPEN_ACL_UNSAFE, 0),
                KazooSetData("/ns/j/sharding/0", b"", -1),
                CheckVersion("/ns/j/leases/x", 3),
                KazooDelete("/ns/j/sharding/7/running", -1),
                KazooCreate("/ns/j/instances/i", b"", acl or OPEN_ACL_UNSAFE, 3),
                KazooSetData("/ns/j/config", b"\x00v", 7),
            ]
        )
        ours = transaction(ops, lambda path: "/ns" + path, acl)
        assert ours.type == theirs.type
        assert ours.serialize() == bytes(theirs.serialize())
    # An answer: a created path, a stat, a check, then an op refused (the node exists).
    stat = struct.pack("!qqqqiiiqiiq", 1, 2, 3, 4, 5, 6, 7, 0, 0, 0, 9)
    answer = (
        struct.pack("!iBi", 1, 0, 0) + struct.pack("!i", 6) + b"/ns/a0"
        + struct.pack("!iBi", 5, 0, 0) + stat
        + struct.pack("!iBi", 13, 0, 0)
        + struct.pack("!iBi", -1, 0, -1) + struct.pack("!i", -110)
        + struct.pack("!iBi", -1, 1, -1)
    )  # fmt: skip
    ours_read, theirs_read = Multi.deserialize(answer, 0), KazooTransaction.deserialize(answer, 0)
    assert ours_read[:3] == theirs_read[:3]
    assert [type(r) for r in ours_read[3:]] == [type(r) for r in theirs_read[3:]]


def _packet(xid: int, body: bytes) -> bytes:
    payload = struct.pack("!iqi", xid, 1, 0) + body
    return struct.pack("!i", len(payload)) + payload


def _watch(kind: int, path: str) -> bytes:
    name = path.encode()
    return _packet(-1, struct.pack("!iii", kind, 3, len(name)) + name)


class _KazooSide:
    """What BufferedReads needs of kazoo's connection: its socket, select and reader."""

    def __init__(self, sock: socket.socket) -> None:
        self._socket = sock
        self.handler = SimpleNamespace(select=poll_select, timeout_exception=TimeoutError)
        self.read_by_kazoo: list[int] = []

    def _socket_error_handling(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def _read_socket(self, timeout: float) -> None:
        length = int.from_bytes(self._read(4, timeout), "big")
        self.read_by_kazoo.append(struct.unpack_from("!i", self._read(length, timeout))[0])

    def _read(self, length: int, timeout: float) -> bytes:
        raise AssertionError("replaced by BufferedReads")


def test_watch_events_skip_kazoos_reader_in_order_except_those_kazoo_waits_for() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        ours.setblocking(False)
        kazoo = _KazooSide(ours)
        reads = BufferedReads(kazoo)
        seen: list[tuple[int, str]] = []

        def on_watches(events: list[tuple[int, str]]) -> int:
            for taken, (kind, path) in enumerate(events):
                if path == "/lock":
                    return taken  # a one-shot watch of kazoo's: its reader takes it
                seen.append((kind, path))
                kazoo.read_by_kazoo.append(len(seen) * 1000)  # order across both readers
            return len(events)

        reads.on_watches = on_watches
        theirs.sendall(
            _watch(1, "/a")
            + _watch(3, "/b")
            + _packet(7, b"answer")
            + _watch(2, "/c")
            + _watch(1, "/lock")
            + _watch(4, "/d")
            + _watch(1, "/e")[:-1]  # its last byte is still on the way
        )
        assert poll_select([ours], [], [], 1.0)[0] == [ours]
        assert reads.read_socket(1.0) is None
        # Kazoo's loop reads the first packet; the rest are taken in order.
        assert kazoo.read_by_kazoo == [-1, 1000, 7, 2000, -1, 3000]
        assert seen == [(3, "/b"), (2, "/c"), (4, "/d")]
        theirs.sendall(_watch(1, "/e")[-1:])
        assert reads.read_socket(1.0) is None
        assert kazoo.read_by_kazoo[-1] == -1  # a new turn starts with kazoo's read


def test_requests_queued_during_a_send_go_out_in_one_write_each_answered(
    zookeeper: ZooKeeperServer,
) -> None:
    registry = ZooKeeperRegistry(zk_config(zookeeper, unique_namespace()))
    registry.start()
    try:
        client, connection = registry.client, registry.client._connection
        write, writes = connection._write, []
        sending, release = threading.Event(), threading.Event()

        def held_write(msg: bytes, timeout: float) -> None:
            if struct.unpack_from("!i", msg, 4)[0] != PING_XID:  # a ping may come any time
                writes.append(msg)
                sending.set()
                release.wait(10)  # the first write waits while the others queue up
            write(msg, timeout)

        connection._write = held_write
        first = client.create_async("/n-000", b"0")
        assert sending.wait(10)
        # Fewer than fill kazoo's wake-up socket pair: a one-byte send takes a whole
        # buffer slot there, and a full pair blocks whoever queues a request.
        rest = [client.create_async(f"/n-{n:03d}", str(n).encode()) for n in range(1, 100)]
        release.set()
        assert [answer.get(10) for answer in [first, *rest]] == [f"/n-{n:03d}" for n in range(100)]
        assert len(writes) == 2  # kazoo alone writes once per request
        assert client.get("/n-099")[0] == b"99"
    finally:
        registry.close()
