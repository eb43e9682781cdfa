"""A loopback TCP proxy for network faults in tests: blackhole or reset one client's link.

Usage::

    with zookeeper_server() as zk, TcpProxy(zk.port) as proxy:
        client = KazooClient(proxy.connect_string, timeout=2)
        client.start()
        proxy.blackhole(4.0)  # nothing passes for 4 s: the session expires on the server
        proxy.reset()  # every connection through the proxy is reset (RST); the session stays

Give each client its own proxy, so a fault hits that client alone. A blackhole behaves like a
network partition: bytes are held, not dropped, and delivered in order once it heals, so a
request the client gave up on during the blackhole may still be applied afterwards (an answer
lost, as on a real network). Connections opened during a blackhole are accepted but pass
nothing until it heals. ``reset()`` closes both sides with an RST, as a middlebox dropping
its state would. Everything runs on one selector thread per proxy.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from shardcron.errors import ShardcronError
from shardcron.testing.zookeeper import HOST, Started

_CHUNK = 65536
# Stop reading a side while this much is waiting to go out the other way (back-pressure).
_HIGH_WATER = 1 << 20


@dataclass(eq=False)
class _Side:
    sock: socket.socket
    outgoing: bytearray = field(default_factory=bytearray)
    eof: bool = False  # nothing more will come for this side: shut its write end once drained


@dataclass(eq=False)
class _Link:
    client: _Side
    server: _Side

    def sides(self) -> tuple[tuple[_Side, _Side], tuple[_Side, _Side]]:
        return (self.client, self.server), (self.server, self.client)


class TcpProxy(Started):
    """Forwards ``127.0.0.1:port`` to ``target_port`` on loopback; see the module docstring."""

    def __init__(self, target_port: int, *, target_host: str = HOST) -> None:
        self._target = (target_host, target_port)
        self._listener: socket.socket | None = None
        self._port: int | None = None
        self._selector = selectors.DefaultSelector()
        self._links: list[_Link] = []
        self._until = 0.0  # blackholed while time.monotonic() < this
        self._lock = threading.Lock()
        self._commands: list[Callable[[], None]] = []
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()
        self.accepted = 0
        self.resets = 0
        self.failure: BaseException | None = None  # what stopped the selector thread, if anything

    @property
    def port(self) -> int:
        if self._port is None:
            raise ShardcronError("TcpProxy has no port until start()")
        return self._port

    @property
    def connect_string(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def blackholed(self) -> bool:
        return time.monotonic() < self._until

    def start(self) -> None:
        listener = socket.create_server((HOST, 0))
        listener.setblocking(False)
        self._listener = listener
        self._port = listener.getsockname()[1]
        self._thread = threading.Thread(
            target=self._loop, name=f"tcp-proxy-{self.port}", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stop forwarding and close every connection and the listening socket."""
        if self._thread is None or self._closed.is_set():
            return
        self._closed.set()
        self._wake()
        self._thread.join(timeout=5)
        self._check()

    def _check(self) -> None:
        if self.failure is not None:
            raise ShardcronError(
                f"proxy {self.connect_string} stopped forwarding: {self.failure!r}"
            ) from self.failure

    def blackhole(self, seconds: float) -> None:
        """Pass nothing either way for ``seconds`` from now; returns at once."""
        with self._lock:
            self._until = time.monotonic() + seconds
        self._wake()

    def heal(self) -> None:
        """End a blackhole now; held bytes are delivered."""
        self.blackhole(0.0)

    def reset(self, timeout: float = 5.0) -> int:
        """Reset every connection through the proxy (RST to both ends); returns how many."""
        done = threading.Event()
        count: list[int] = []

        def command() -> None:
            count.append(len(self._links))
            for link in list(self._links):
                self._drop(link, abort=True)
            self.resets += count[0]
            done.set()

        self._check()
        with self._lock:
            self._commands.append(command)
        self._wake()
        if not done.wait(timeout):
            raise ShardcronError(f"proxy {self.connect_string} did not reset in {timeout}s")
        return count[0]

    # -- the selector thread ------------------------------------------------------------

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _loop(self) -> None:
        assert self._listener is not None
        self._selector.register(self._listener, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        try:
            while not self._closed.is_set():
                self._run_commands()
                self._watch()
                with self._lock:
                    left = self._until - time.monotonic()
                for key, mask in self._selector.select(timeout=left if left > 0 else None):
                    self._dispatch(key, mask)
        except BaseException as exc:  # kept for the test thread: close() and reset() raise it
            self.failure = exc
            raise
        finally:
            for link in list(self._links):
                self._drop(link, abort=True)
            self._selector.close()
            self._listener.close()
            self._wake_r.close()
            self._wake_w.close()

    def _run_commands(self) -> None:
        with self._lock:
            commands, self._commands = self._commands, []
        for command in commands:
            command()

    def _watch(self) -> None:
        """(Re)register every socket for what it may do now: nothing while blackholed."""
        held = self.blackholed
        for link in self._links:
            for side, other in link.sides():
                events = 0
                if not held:
                    if not other.eof and len(other.outgoing) < _HIGH_WATER:
                        events |= selectors.EVENT_READ
                    if side.outgoing:
                        events |= selectors.EVENT_WRITE
                self._register(side.sock, events, link)

    def _register(self, sock: socket.socket, events: int, link: _Link) -> None:
        try:
            key = self._selector.get_key(sock)
        except KeyError:
            if events:
                self._selector.register(sock, events, link)
            return
        if not events:
            self._selector.unregister(sock)
        elif key.events != events:
            self._selector.modify(sock, events, link)

    def _dispatch(self, key: selectors.SelectorKey, mask: int) -> None:
        if key.data == "wake":
            with contextlib.suppress(BlockingIOError):
                self._wake_r.recv(4096)
        elif key.data == "accept":
            self._accept()
        else:
            link: _Link = key.data
            if link in self._links:
                self._pump(link, key.fileobj, mask)  # type: ignore[arg-type]

    def _accept(self) -> None:
        assert self._listener is not None
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        self.accepted += 1
        try:
            server = socket.create_connection(self._target, timeout=2)
        except OSError:
            _abort(client)  # the server is down: the client sees its connection reset
            return
        for sock in (client, server):
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._links.append(_Link(_Side(client), _Side(server)))

    def _pump(self, link: _Link, sock: socket.socket, mask: int) -> None:
        side, other = link.sides()[0] if sock is link.client.sock else link.sides()[1]
        try:
            if mask & selectors.EVENT_READ:
                data = sock.recv(_CHUNK)
                if data:
                    other.outgoing += data
                    self._send(other)  # most often it goes at once: no extra select round
                else:
                    other.eof = True
            if mask & selectors.EVENT_WRITE:
                self._send(side)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(link, abort=True)
            return
        self._flush_eof(link)

    @staticmethod
    def _send(side: _Side) -> None:
        if side.outgoing:
            with contextlib.suppress(BlockingIOError, InterruptedError):
                sent = side.sock.send(side.outgoing)
                del side.outgoing[:sent]

    def _flush_eof(self, link: _Link) -> None:
        # Half-close passes through: a side whose peer said EOF gets EOF once drained.
        for side in (link.client, link.server):
            if side.eof and not side.outgoing:
                with contextlib.suppress(OSError):
                    side.sock.shutdown(socket.SHUT_WR)
        if (
            link.client.eof
            and link.server.eof
            and not (link.client.outgoing or link.server.outgoing)
        ):
            self._drop(link, abort=False)

    def _drop(self, link: _Link, *, abort: bool) -> None:
        if link in self._links:
            self._links.remove(link)
        for side in (link.client, link.server):
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(side.sock)
            if abort:
                _abort(side.sock)
            else:
                side.sock.close()


def _abort(sock: socket.socket) -> None:
    """Close with an RST (linger 0) rather than a FIN."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
