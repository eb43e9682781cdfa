"""The registry sides a sequence of :mod:`tests.cachediff` is applied to: three sessions on
one backend (the embedded registry, or ZooKeeper with the reader behind its own TCP proxy),
and the faults each can be put through."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError as KazooNoNode

from shardcron.errors import RegistryError, TransactionError
from shardcron.registry import Registry
from shardcron.registry.cache import join
from shardcron.registry.contract import Answer, Op, SessionState, TreeCache
from shardcron.registry.memory import MemoryRegistry, MemoryServer
from shardcron.registry.zookeeper import ZooKeeperRegistry
from shardcron.testing.proxy import TcpProxy
from shardcron.testing.zookeeper import ZooKeeperServer, expire_session
from tests.cachediff import Step
from tests.conftest import zk_config
from tests.helpers import wait_until

BARRIER = "/barrier"
DEADLINE = 20.0  # seconds: for a change to reach a cache, or a session to come back


def describe(exc: RegistryError) -> str:
    if isinstance(exc, TransactionError):
        return f"TransactionError at op {exc.index}: {type(exc.cause).__name__}"
    return type(exc).__name__


def attempt(fn: Callable[[], object]) -> str:
    """What a step answered: ok, the name it created, or the error."""
    try:
        done = fn()
    except RegistryError as exc:
        return describe(exc)
    return done if isinstance(done, str) else "ok"


@dataclass
class Side:
    """Three sessions on one backend: the reader (whose caches are compared), the writer
    and ``eph``, the second session that holds ephemeral nodes."""

    name: str
    open: Callable[[], Registry]
    reader: Registry
    writer: Registry
    eph: Registry = field(init=False)
    states: list[SessionState] = field(default_factory=list)  # the reader's
    barrier: TreeCache | None = None
    _count: int = 0
    _heard: threading.Condition = field(default_factory=threading.Condition)

    def start(self) -> None:
        self.reader.add_session_listener(self.states.append)
        self.reader.start()
        self.writer.start()
        self.eph = self.open()
        self.eph.start()
        self.barrier = self.reader.tree_cache(BARRIER, lambda _event: self._wake())

    def _wake(self) -> None:
        with self._heard:
            self._heard.notify_all()

    def sync(self) -> None:
        """Return once the reader has applied every change made before the call: the
        writer changes the barrier node, and the reader's event thread applies changes in
        the registry's order, so the reader's caches hold everything before it."""
        self._count += 1
        value = str(self._count).encode()
        self.writer.put(BARRIER, value)
        barrier = self.barrier
        assert barrier is not None
        with self._heard:
            if not self._heard.wait_for(lambda: barrier.get(BARRIER) == value, DEADLINE):
                raise AssertionError(f"{self.name}: the reader did not hear the barrier")

    def apply(self, step: Step) -> list[str]:
        session = {"writer": self.writer, "reader": self.reader, "eph": self.eph}[step.who]
        if step.kind == "put":
            return [attempt(lambda: session.put(step.path, step.data))]
        if step.kind == "create":
            return [attempt(lambda: session.create(step.path, step.data))]
        if step.kind in ("delete", "rdelete"):
            return [attempt(lambda: session.delete(step.path, recursive=step.kind == "rdelete"))]
        if step.kind == "txn":
            return [attempt(lambda: session.transaction(step.ops))]
        if step.kind == "burst":
            return self.send(step.burst, session)()
        if step.kind == "ephemeral":
            return [attempt(lambda: session.create(step.path, step.data, ephemeral=True))]
        if step.kind == "seq":
            ephemeral = step.how == "ephemeral"
            return [
                attempt(
                    partial(
                        session.create, step.path, step.data, ephemeral=ephemeral, sequential=True
                    )
                )
            ]
        if step.kind == "end" and step.who == "reader":
            back = self.comebacks()
            self.expire_connected_reader()
            wait_until(lambda: self.comebacks() > back, DEADLINE, f"{self.name}: a new session")
            return ["ok"]
        if step.kind == "end":
            self.end(step.how)
            return ["ok"]
        self.cut()
        outcomes = [outcome for inner in step.inner for outcome in self.apply(inner)]
        if step.how == "expire":
            self.expire_reader()
        back = self.comebacks()
        self.heal()
        outcomes += [outcome for after in step.after for outcome in self.apply(after)]
        wait_until(lambda: self.comebacks() > back, DEADLINE, f"{self.name}: the reader back")
        return outcomes

    def send(
        self, burst: Sequence[tuple[Op, ...]], session: Registry | None = None
    ) -> Callable[[], list[str]]:
        """Send ``burst``'s transactions without waiting, from ``session`` (the writer by
        default); returns what waits for their answers."""
        sender = session or self.writer
        answers: dict[int, Answer] = {}
        done = threading.Condition()

        def answered(n: int, answer: Answer) -> None:
            with done:
                answers[n] = answer
                done.notify_all()

        def answers_told() -> list[str]:
            with done:
                if not done.wait_for(lambda: len(answers) == len(burst), DEADLINE):
                    raise AssertionError(f"{self.name}: a burst was not answered")
            return [
                describe(a) if isinstance(a, RegistryError) else "ok"
                for _, a in sorted(answers.items())
            ]

        for n, ops in enumerate(burst):
            sender.send_transaction(ops, lambda a, n=n: answered(n, a))  # type: ignore[misc]
        return answers_told

    def end(self, how: str) -> None:
        raise NotImplementedError

    def cut(self) -> None:
        """Cut the reader off: it hears nothing until :meth:`heal`."""
        raise NotImplementedError

    def expire_reader(self) -> None:
        """End the reader's session while it is cut off."""
        raise NotImplementedError

    def expire_connected_reader(self) -> None:
        """End the reader's session while it is connected: it starts a new one."""
        raise NotImplementedError

    def heal(self) -> None:
        """Let the reader reach the registry again; it resyncs its caches on its own."""
        raise NotImplementedError

    def truth(self, root: str) -> dict[str, bytes]:
        """Every node at or below ``root`` and its value, read back from the registry."""
        raise NotImplementedError

    def comebacks(self) -> int:
        """The reader's connections since it started, on its session or on a new one
        (either state is told after the caches' resync)."""
        back = (SessionState.CONNECTED, SessionState.RECONNECTED)
        return sum(state in back for state in self.states)

    def close(self) -> None:
        for registry in (self.eph, self.writer, self.reader):
            registry.close()


class MemorySide(Side):
    def __init__(self, server: MemoryServer | None = None) -> None:
        server = server or MemoryServer()
        self.server = server

        def open_session() -> Registry:
            return MemoryRegistry(server, "diff")

        super().__init__("memory", open_session, open_session(), open_session())

    def end(self, how: str) -> None:
        if how == "expire":
            self.server.expire(self.eph.session_id)  # the session renews itself
            return
        self.eph.close()
        self.eph = self.open()
        self.eph.start()

    def cut(self) -> None:
        assert isinstance(self.reader, MemoryRegistry)
        self.reader.disconnect()

    def expire_reader(self) -> None:
        self.server.expire(self.reader.session_id)

    def expire_connected_reader(self) -> None:
        self.server.expire(self.reader.session_id)

    def heal(self) -> None:
        assert isinstance(self.reader, MemoryRegistry)
        self.reader.reconnect()

    def truth(self, root: str) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        level = [root]
        while level:
            below = []
            for path in level:
                data = self.writer.get(path)
                if data is not None:
                    found[path] = data
                    below += [join(path, name) for name in self.writer.children(path)]
            level = below
        return found


class ZooKeeperSide(Side):
    """The reader reaches ZooKeeper through its own TCP proxy, so a cut hits it alone."""

    def __init__(self, server: ZooKeeperServer, namespace: str) -> None:
        config = zk_config(server, namespace, session_ms=20_000)
        self.hosts = server.connect_string
        self.proxy = TcpProxy(server.port)
        self.proxy.start()

        def open_session() -> Registry:
            return ZooKeeperRegistry(config)

        # Back as soon as the link is: kazoo waits its retry delay before each attempt.
        reader = ZooKeeperRegistry(
            replace(config, servers=self.proxy.connect_string, base_sleep_ms=10, max_sleep_ms=50)
        )
        super().__init__("zookeeper", open_session, reader, open_session())

    def end(self, how: str) -> None:
        eph = self.eph
        assert isinstance(eph, ZooKeeperRegistry)
        if how == "expire":
            expire_session(eph.client)
            wait_until(lambda: eph.connected, DEADLINE, "a new session after the expiry")
            return
        eph.close()
        self.eph = self.open()
        self.eph.start()

    def cut(self) -> None:
        """Hold every byte, then reset the reader's connection: it cannot reconnect until
        :meth:`heal`, and hears nothing of what happens meanwhile."""
        suspended = self.states.count(SessionState.SUSPENDED)
        assert isinstance(self.reader, ZooKeeperRegistry)
        self.session = self.reader.client.client_id  # kazoo tells it only while connected
        self.proxy.blackhole(DEADLINE * 3)
        self.proxy.reset()
        wait_until(
            lambda: self.states.count(SessionState.SUSPENDED) > suspended,
            DEADLINE,
            "the reader suspended",
        )

    def expire_reader(self) -> None:
        """Close the reader's session from a client of its own, straight to the server, as
        ZooKeeper expires a session: its ephemeral nodes go."""
        intruder = KazooClient(self.hosts, client_id=self.session)
        intruder.start(timeout=DEADLINE)
        intruder.stop()
        intruder.close()

    def heal(self) -> None:
        self.proxy.heal()

    def expire_connected_reader(self) -> None:
        assert isinstance(self.reader, ZooKeeperRegistry)
        expire_session(self.reader.client)

    def truth(self, root: str) -> dict[str, bytes]:
        assert isinstance(self.writer, ZooKeeperRegistry)
        return read_tree(self.writer.client, root)

    def close(self) -> None:
        super().close()
        self.proxy.close()


def read_tree(client: KazooClient, root: str) -> dict[str, bytes]:
    """The subtree at ``root``, read level by level, each level's reads sent together."""
    found: dict[str, bytes] = {}
    level = [root]
    while level:
        reads = [(p, client.get_async(p), client.get_children_async(p)) for p in level]
        level = []
        for path, data, children in reads:
            try:
                found[path] = bytes(data.get(timeout=DEADLINE)[0])
                level += [join(path, name) for name in children.get(timeout=DEADLINE)]
            except KazooNoNode:
                found.pop(path, None)
    return found
