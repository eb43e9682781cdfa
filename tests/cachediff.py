"""Sequences of registry operations on a small job-like tree, drawn from a seed (the
sides they are applied to are in :mod:`tests.cachesides`).

A sequence is drawn step by step, each step from what the registry holds after the one
before, and each step is applied to every side in turn, so the sides go through the same
history. Steps cover what coordination does to a job's tree: single writes, multi-op
transactions (some failing as a whole), recursive deletes, ephemeral nodes of a second
session that then closes or expires, sequential nodes, bursts of transactions sent
without waiting, and a reader cut off from the registry while others write, then back (on
the same session, or on a new one when its session expired meanwhile) while others go on
writing.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace

from shardcron.registry.contract import Check, Create, Delete, Op, SetData

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
        kinds = ["put", "create", "delete", "rdelete", "txn", "burst", "ephemeral", "end", "seq"]
        weights = [18, 10, 10, 4, 16, 10, 10, 4, 4]
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
            return Step("burst", who, burst=self.burst(model))  # the reader's: a group commit
        if kind == "seq":  # named by the registry, beside nodes named by their creator
            how = rng.choice(("ephemeral", ""))
            return Step("seq", "eph" if how else who, "instances/n-", rng.choice(VALUES), how=how)
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
