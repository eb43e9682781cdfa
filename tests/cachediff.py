"""Sequences of registry operations on a small job-like tree, drawn from a seed, and the
two registry sides they are replayed on (the embedded registry, ZooKeeper).

A sequence is drawn step by step, each step from what the registry holds after the one
before, and each step is applied to every side in turn, so the sides go through the same
history. Steps cover what coordination does to a job's tree: single writes, multi-op
transactions (some failing as a whole), recursive deletes, ephemeral nodes of a second
session that then closes or expires, bursts of transactions sent without waiting, and a
reader cut off from the registry while others write, then back (on the same session, or on
a new one when its session expired meanwhile) while others go on writing.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError as KazooNoNode

from shardcron.errors import RegistryError, TransactionError
from shardcron.registry import Registry
from shardcron.registry.cache import join
from shardcron.registry.contract import (
    Answer,
    Check,
    Create,
    Delete,
    Op,
    SessionState,
    SetData,
    TreeCache,
)
from shardcron.registry.memory import MemoryRegistry, MemoryServer
from shardcron.registry.zookeeper import ZooKeeperRegistry
from shardcron.testing.proxy import TcpProxy
from shardcron.testing.zookeeper import ZooKeeperServer, expire_session
from tests.conftest import zk_config
from tests.helpers import wait_until

# The tree below a job's root (""), as names relative to it. Values are read for the
# root, the config, the servers and the owners ("instance"); the rest are flags, kept for
# existence only, as a job's cache keeps them.
VALUE_LEAVES: tuple[str, ...] = ("config", "servers/10.0.0.1", "servers/10.0.0.2")
VALUE_LEAVES += ("leader/election/instance", *(f"sharding/{n}/instance" for n in range(3)))
FLAG_LEAVES: tuple[str, ...] = ("sharding/0/running", "sharding/0/misfire", "sharding/1/running")
FLAG_LEAVES += ("sharding/2/running", "sharding/2/misfire", "leader/sharding/necessary")
FLAG_LEAVES += ("instances/a", "instances/b")
LEAVES = VALUE_LEAVES + FLAG_LEAVES
EPHEMERAL = ("instances/a", "instances/b", "leader/election/instance")
SUBTREES = ("sharding", "sharding/0", "sharding/2", "leader", "servers", "instances", "")
VALUES = (b"", b"a", b"b", b"c" * 40)
BARRIER = "/barrier"
DEADLINE = 20.0  # seconds: for a change to reach a cache, or a session to come back


def skip_data(root: str) -> Callable[[str], bool]:
    """The skip_data of a job cache rooted at ``root``: flags are tracked for existence."""

    def skip(path: str) -> bool:
        return not (path == root or path.endswith(("/instance", "/config")) or "/servers/" in path)

    return skip


def rel_parent(path: str) -> str:
    return path.rpartition("/")[0]


@dataclass(frozen=True)
class Step:
    """One thing done to the registry. ``who`` writes: the writer, or the reader itself
    (the session whose cache is watched: coordination writes through its own session)."""

    kind: str
    who: str = "writer"
    path: str = ""
    data: bytes = b""
    ops: tuple[Op, ...] = ()
    burst: tuple[tuple[Op, ...], ...] = ()
    inner: tuple[Step, ...] = ()  # a cut's steps while the reader is away
    after: tuple[Step, ...] = ()  # and those sent as it comes back
    how: str = ""  # how a session ends: "close" or "expire"

    @property
    def op_count(self) -> int:
        if self.kind == "txn":
            return len(self.ops)
        if self.kind == "burst":
            return sum(len(ops) for ops in self.burst)
        if self.kind == "cut":
            return sum(step.op_count for step in self.inner + self.after)
        return 1


class Model:
    """What a step expects the tree to hold (relative names), to draw mostly valid ops.
    A guess that turns out wrong makes a failing op, whose answer is compared too."""

    def __init__(self, nodes: dict[str, bytes]) -> None:
        self.nodes = dict(nodes)

    def has_children(self, path: str) -> bool:
        prefix = f"{path}/" if path else ""
        return any(p.startswith(prefix) and p != path for p in self.nodes)

    def parent_exists(self, path: str) -> bool:
        return path == "" or rel_parent(path) in self.nodes

    def make(self, path: str, data: bytes) -> None:
        """A create that makes missing parents (Registry.create, put)."""
        if path and rel_parent(path) not in self.nodes:
            self.make(rel_parent(path), b"")
        self.nodes.setdefault(path, data)

    def apply(self, op: Op) -> None:
        exists = op.path in self.nodes
        if isinstance(op, Delete):
            if exists and not self.has_children(op.path):
                del self.nodes[op.path]
        elif isinstance(op, Create | SetData):
            valid = (
                exists if isinstance(op, SetData) else not exists and self.parent_exists(op.path)
            )
            if valid:
                self.nodes[op.path] = op.data

    def drop(self, path: str) -> None:
        for p in [p for p in self.nodes if p == path or p.startswith(f"{path}/") or not path]:
            del self.nodes[p]


class Draw:
    """Draws the steps of one sequence from ``rng``."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def step(self, model: Model, cut: bool = False) -> Step:
        rng = self.rng
        kinds = ["put", "create", "delete", "rdelete", "txn", "burst", "ephemeral", "end"]
        weights = [18, 10, 10, 4, 16, 10, 10, 4]
        if not cut:
            kinds.append("cut")
            weights.append(3)
        kind = rng.choices(kinds, weights)[0]
        who = "writer" if cut or rng.random() < 0.7 else "reader"
        if kind == "put":
            return Step("put", who, rng.choice(LEAVES + SUBTREES[:-1]), rng.choice(VALUES))
        if kind == "create":
            return Step("create", who, self.leaf(model, present=False), rng.choice(VALUES))
        if kind == "delete":
            return Step("delete", who, self.leaf(model, present=True))
        if kind == "rdelete":
            return Step("rdelete", who, rng.choice(SUBTREES))
        if kind == "txn":
            return Step("txn", who, ops=self.transaction(model, rng.randint(2, 4)))
        if kind == "burst":
            return Step("burst", burst=self.burst(model))
        if kind == "ephemeral":
            path = rng.choice(EPHEMERAL)
            return Step("ephemeral", "eph" if who == "writer" else who, path, rng.choice(VALUES))
        if kind == "end":
            if who == "reader":  # the reader's own session expires while it is connected
                return Step("end", "reader", how="expire")
            return Step("end", "eph", how=rng.choice(("close", "expire")))
        steps = []
        for _ in range(rng.randint(1, 5)):
            steps.append(self.step(model, cut=True))
            self.guess(model, steps[-1])
        split = len(steps) - rng.randint(0, min(2, len(steps) - 1))
        how = "expire" if rng.random() < 0.3 else ""
        return Step("cut", inner=tuple(steps[:split]), after=tuple(steps[split:]), how=how)

    def leaf(self, model: Model, present: bool) -> str:
        matching = [p for p in LEAVES if (p in model.nodes) == present]
        return self.rng.choice(matching if matching and self.rng.random() < 0.8 else LEAVES)

    def op(self, model: Model) -> Op:
        """One op of a transaction, valid against ``model`` most of the time."""
        rng = self.rng
        path = rng.choice(LEAVES + SUBTREES[:-1])
        data = rng.choice(VALUES)
        if rng.random() < 0.1:  # a guess bound to fail: the whole transaction rolls back
            bound_to_fail: list[Op] = [Check(path, 99)]
            bound_to_fail.append(Create(path) if path in model.nodes else Delete(path))
            return rng.choice(bound_to_fail)
        if path not in model.nodes:
            while not model.parent_exists(path):
                path = rel_parent(path)
            return Create(path, data)
        if not model.has_children(path) and rng.random() < 0.4:
            return Delete(path)
        kept: list[Op] = [SetData(path, data), Check(path), SetData(path, data)]
        return rng.choice(kept)

    def transaction(self, model: Model, count: int) -> tuple[Op, ...]:
        ops = []
        for _ in range(count):
            ops.append(self.op(model))
            model.apply(ops[-1])
        return tuple(ops)

    def burst(self, model: Model) -> tuple[tuple[Op, ...], ...]:
        """Single-op transactions on two or three nodes, each flipping between states
        faster than a cache can read the values: created, changed, deleted, created."""
        rng = self.rng
        focus = rng.sample(LEAVES, rng.randint(1, 3))
        sent: list[tuple[Op, ...]] = []
        for _ in range(rng.randint(4, 12)):
            path = rng.choice(focus)
            if path not in model.nodes:
                ops: list[Op] = []
                missing = path
                while not model.parent_exists(missing):
                    missing = rel_parent(missing)
                    ops.insert(0, Create(missing))
                ops.append(Create(path, rng.choice(VALUES)))
            elif rng.random() < 0.35:
                ops = [Delete(path)]
            else:
                ops = [SetData(path, rng.choice(VALUES))]
            for op in ops:
                model.apply(op)
            sent.append(tuple(ops))
        return tuple(sent)

    @staticmethod
    def guess(model: Model, step: Step) -> None:
        """What ``step`` does to ``model`` (a cut's later steps are drawn from it)."""
        if step.kind in ("put", "create", "ephemeral"):
            model.make(step.path, step.data)
        elif step.kind == "delete" and not model.has_children(step.path):
            model.nodes.pop(step.path, None)
        elif step.kind == "rdelete":
            model.drop(step.path)
        elif step.kind == "end":
            for path in EPHEMERAL:
                model.nodes.pop(path, None)


def describe(exc: RegistryError) -> str:
    if isinstance(exc, TransactionError):
        return f"TransactionError at op {exc.index}: {type(exc.cause).__name__}"
    return type(exc).__name__


def attempt(fn: Callable[[], object]) -> str:
    try:
        fn()
    except RegistryError as exc:
        return describe(exc)
    return "ok"


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
            return self.send_burst(step.burst)
        if step.kind == "ephemeral":
            return [attempt(lambda: session.create(step.path, step.data, ephemeral=True))]
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

    def send_burst(self, burst: Sequence[tuple[Op, ...]]) -> list[str]:
        return self.send(burst)()

    def send(self, burst: Sequence[tuple[Op, ...]]) -> Callable[[], list[str]]:
        """Send ``burst``'s transactions from the writer without waiting; returns what
        waits for their answers."""
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
            self.writer.send_transaction(ops, lambda a, n=n: answered(n, a))  # type: ignore[misc]
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


def placed(step: Step, root: str) -> Step:
    """``step`` with its names (relative to a job's root) made paths below ``root``."""

    def full(name: str) -> str:
        return f"{root}/{name}" if name else root

    def moved(ops: tuple[Op, ...]) -> tuple[Op, ...]:
        return tuple(replace(op, path=full(op.path)) for op in ops)

    return replace(
        step,
        path=full(step.path),
        ops=moved(step.ops),
        burst=tuple(moved(ops) for ops in step.burst),
        inner=tuple(placed(inner, root) for inner in step.inner),
        after=tuple(placed(after, root) for after in step.after),
    )


def relative(nodes: dict[str, bytes], root: str) -> dict[str, bytes]:
    return {path[len(root) + 1 :]: data for path, data in nodes.items()}


def universe(root: str) -> set[str]:
    """Every path a sequence below ``root`` may make."""
    found = {root}
    for name in LEAVES:
        parts = name.split("/")
        found |= {f"{root}/{'/'.join(parts[: n + 1])}" for n in range(len(parts))}
    return found
