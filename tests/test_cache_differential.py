"""The embedded registry's tree cache against the ZooKeeper backend's, on recorded sequences.

The simulation runs coordination on the embedded registry; production runs it on
ZooKeeper, whose cache works differently (persistent watches, values read after the
event, a resync level by level after a reconnect). Each seeded sequence (see
:mod:`tests.cachediff`) is applied to both (:mod:`tests.cachesides`); at each quiescent point, on each backend, the
cache must hold exactly what the registry holds, the cache listener's events must add up
to it (the last value seen per path, a removal for every node gone, no value for a
``skip_data`` path), and the version counters must move as the TreeCache contract says.
The registries' answers and contents must also agree between the backends.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from shardcron.registry.cache import LocalTree, is_below, parent_of
from shardcron.registry.contract import CacheSpec, EventType, NodeEvent, TreeCache
from shardcron.registry.zkcache import ZooKeeperCaches
from shardcron.testing.zookeeper import ZooKeeperServer, unique_namespace
from tests.cachediff import Draw, Model, Step, placed, relative, skip_data, universe
from tests.cachesides import MemorySide, Side, ZooKeeperSide
from tests.conftest import FIGURES

SEQUENCES = 200
OPS_PER_SEQUENCE = 30


@dataclass
class Figures:
    sequences: int = 0
    ops: int = 0
    points: int = 0
    events: dict[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        heard = ", ".join(f"{n} events on {name}" for name, n in self.events.items())
        return (
            f"tree caches compared on {self.sequences} sequences, {self.ops} ops, "
            f"{self.points} quiescent points: {heard}"
        )


class Diverged(AssertionError):
    pass


def differences(want: dict[str, bytes], got: dict[str, bytes | None]) -> str:
    paths = sorted(p for p in want.keys() | got.keys() if want.get(p) != got.get(p))
    return "; ".join(f"{p}: registry {want.get(p)!r}, seen {got.get(p)!r}" for p in paths)


class Watched:
    """A cache on a side's reader, and what its listener said so far."""

    def __init__(
        self, side: Side, root: str, skip: Callable[[str], bool] | None, paths: set[str]
    ) -> None:
        """``paths``: every path the sequence may make, in the cache's subtree or not."""
        self.side, self.root, self.skip = side, root, skip or (lambda _path: False)
        self.paths = paths
        self._lock = threading.Lock()
        self._events: list[NodeEvent] = []
        self._unseen: list[NodeEvent] = []  # told before the cache showed them
        self.cache: TreeCache | None = None
        self.levels: dict[str, bytes] = {}  # the last value the listener saw, per path
        self.contents: dict[str, bytes] = {}  # what the cache held at the last point
        self.version = self.values_version = 0  # a new cache starts at 0
        self.heard = 0
        self.spec: CacheSpec = (root, self._heard, skip)

    def _heard(self, event: NodeEvent) -> None:
        """A listener may read the cache (coordination does): it shows the change told.
        (The initial load's events come before tree_cache returns the cache.)"""
        cache = self.cache
        if cache is not None and cache.get(event.path) != (
            None if event.type is EventType.REMOVED else event.data
        ):
            self._unseen.append(event)
        with self._lock:
            self._events.append(event)

    def take(self) -> list[NodeEvent]:
        with self._lock:
            events, self._events = self._events, []
        self.heard += len(events)
        return events

    def shown(self, cache: TreeCache) -> dict[str, bytes | None]:
        """The cache's tree, walked from the root by its children lists."""
        found: dict[str, bytes | None] = {}
        below = [self.root] if cache.exists(self.root) else []
        while below:
            path = below.pop()
            found[path] = cache.get(path)
            below += [f"{path}/{name}" for name in cache.children(path)]
        return found

    def check(self, truth: dict[str, bytes]) -> None:
        """At a quiescent point: the cache and the listener's levels against ``truth``
        (the registry's nodes at or below the cache's root, and maybe others)."""
        cache = self.cache
        assert cache is not None
        want = {p: b"" if self.skip(p) else v for p, v in truth.items() if is_below(p, self.root)}
        shown = self.shown(cache)
        if shown != want:
            raise Diverged(f"the cache differs from the registry: {differences(want, shown)}")
        stray = [p for p in self.paths - want.keys() if cache.exists(p) or cache.get(p)]
        if stray:
            raise Diverged(f"the cache holds nodes not in the registry: {sorted(stray)}")
        if self._unseen:
            raise Diverged(
                f"the listener was told of changes the cache did not show: {self._unseen}"
            )
        events = self.take()
        values_moved = self.replay(events)
        if self.levels != want:
            raise Diverged(f"the listener's levels differ: {differences(want, dict(self.levels))}")
        self.check_versions(want, bool(events), values_moved)

    def replay(self, events: list[NodeEvent]) -> bool:
        """Apply ``events`` to the levels, each checked against the tree so far; whether a
        non-empty value appeared, changed or went (what values_version follows)."""
        values_moved = False
        for event in events:
            path, data, old = event.path, event.data, self.levels.get(event.path)
            if data and self.skip(path):
                raise Diverged(f"{event}: a value for a path tracked for existence only")
            if event.type is EventType.ADDED:
                if old is not None or (path != self.root and parent_of(path) not in self.levels):
                    raise Diverged(f"{event}: added twice, or under no parent")
                self.levels[path] = data
            elif event.type is EventType.UPDATED:
                if old is None or old == data:
                    raise Diverged(f"{event}: an update of an absent or equal node")
                self.levels[path] = data
            else:
                if old is None or any(p.startswith(f"{path}/") for p in self.levels):
                    raise Diverged(f"{event}: removed while absent, or before its children")
                del self.levels[path]
            values_moved |= bool(data or old)
        return values_moved

    def check_versions(self, want: dict[str, bytes], moved: bool, values_moved: bool) -> None:
        """TreeCache.version: an equal version, equal contents (the healer's sweep skips
        an unchanged cache). values_version: it moves when a non-empty value appears,
        changes or goes, and flags leave it alone (an item's owners are read again only
        then)."""
        assert self.cache is not None
        version, values_version = self.cache.version, self.cache.values_version
        if version < self.version or values_version < self.values_version:
            raise Diverged("a version went back")
        if (version != self.version) != moved or (
            want != self.contents and version == self.version
        ):
            raise Diverged(f"version {self.version} -> {version} does not follow the changes")

        def values(tree: dict[str, bytes]) -> dict[str, bytes]:
            return {p: data for p, data in tree.items() if data}

        if (values_version != self.values_version) != values_moved or (
            values(want) != values(self.contents) and values_version == self.values_version
        ):
            raise Diverged(
                f"values_version {self.values_version} -> {values_version} does not follow "
                "the values"
            )
        self.version, self.values_version, self.contents = version, values_version, want


Caches = list[tuple[Watched, Watched]]  # per side: a job's cache, and its parent's


def run_sequence(seed: int, sides: list[Side], figures: Figures) -> None:
    """Draw sequence ``seed`` step by step from the first side's registry, apply each
    step to every side, and compare at the quiescent points."""
    rng = random.Random(seed)
    draw = Draw(rng)
    base = f"/seq{seed}"
    root = f"{base}/job"
    for side in sides:  # sometimes a job is there before the caches load
        side.writer.put(base, b"")
        if seed % 3 == 0:
            side.writer.put(f"{root}/config", b"a")
            side.writer.put(f"{root}/sharding/0/running", b"")
    # A job's cache, and a cache of everything above it keeping every value (an operator's,
    # as the console keeps), on the same session: a change reaches both.
    paths = universe(root) | {base}
    watched = [
        (Watched(side, root, skip_data(root), paths), Watched(side, base, None, paths))
        for side in sides
    ]
    # Half the time the caches load (together, as a group of jobs registers) while the
    # writer's transactions are on their way: the load races them.
    racing = Step("burst")
    if seed % 2:
        racing = placed(Step("burst", burst=draw.burst(model_of(sides[0], root))), root)
    history = [racing]
    try:
        answers = [load(side, caches, racing) for side, caches in zip(sides, watched, strict=True)]
        agree(seed, racing, answers)
        ops = racing.op_count if racing.burst else 0
        while ops < OPS_PER_SEQUENCE:
            step = placed(draw.step(model_of(sides[0], root)), root)
            history.append(step)
            agree(seed, step, [side.apply(step) for side in sides])
            ops += step.op_count
            if step.kind in ("cut", "end") or ops >= OPS_PER_SEQUENCE or rng.random() < 0.4:
                compare(f"seed {seed}, after {history[-3:]}", sides, watched, base)
                figures.points += 1
    finally:
        for cache in (cache for caches in watched for cache in caches):
            if cache.cache is not None:
                cache.cache.close()
    figures.sequences += 1
    figures.ops += ops
    for side, caches in zip(sides, watched, strict=True):
        heard = sum(cache.heard for cache in caches)
        figures.events[side.name] = figures.events.get(side.name, 0) + heard


def model_of(side: Side, root: str) -> Model:
    return Model(relative(side.truth(root), root))


def load(side: Side, caches: tuple[Watched, Watched], racing: Step) -> list[str]:
    """Load ``caches`` together while the writer's ``racing`` transactions go out."""
    answered = side.send(racing.burst)
    loaded = side.reader.tree_caches([cache.spec for cache in caches])
    for cache, tree_cache in zip(caches, loaded, strict=True):
        cache.cache = tree_cache
    return answered()


def agree(seed: int, step: Step, answers: list[list[str]]) -> None:
    if any(answer != answers[0] for answer in answers):
        raise Diverged(f"seed {seed}: the registries answered {step} with {answers}")


def compare(where: str, sides: list[Side], watched: Caches, base: str) -> None:
    """A quiescent point: every cache against its registry, and the registries together."""
    truths = []
    for side, caches in zip(sides, watched, strict=True):
        side.sync()
        truths.append(side.truth(base))
        for cache in caches:
            try:
                cache.check(truths[-1])
            except Diverged as exc:
                raise Diverged(f"{where}: {side.name}, cache of {cache.root}: {exc}") from None
    for side, truth in zip(sides[1:], truths[1:], strict=True):
        if truth != truths[0]:
            found = differences(truths[0], dict(truth))
            raise Diverged(f"{where}: {side.name}'s registry differs: {found}")


@pytest.fixture
def memory_and_zookeeper(zookeeper: ZooKeeperServer) -> Iterator[list[Side]]:
    sides: list[Side] = [MemorySide(), ZooKeeperSide(zookeeper, unique_namespace("diff"))]
    for side in sides:
        side.start()
    yield sides
    for side in sides:
        side.close()


def test_the_embedded_cache_agrees_with_the_zookeeper_cache_on_recorded_sequences(
    memory_and_zookeeper: list[Side],
) -> None:
    figures = Figures()
    started = time.monotonic()
    for seed in range(SEQUENCES):
        run_sequence(seed, memory_and_zookeeper, figures)
    took = time.monotonic() - started
    FIGURES.append(f"{figures} ({took:.0f} s)")
    print(f"\n{figures} ({took:.1f} s)")
    assert figures.sequences == SEQUENCES
    assert figures.ops >= SEQUENCES * OPS_PER_SEQUENCE
    assert figures.points > 2 * SEQUENCES


@pytest.fixture
def two_embedded() -> Iterator[list[Side]]:
    sides: list[Side] = [MemorySide(), MemorySide()]
    for side in sides:
        side.start()
    yield sides
    for side in sides:
        side.close()


def _stale_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache that keeps the old value when a node's value changes to b"b"."""
    put = LocalTree.put

    def stale(tree: LocalTree, path: str, data: bytes) -> None:
        if data != b"b" or tree.get(path) is None:
            put(tree, path, data)

    monkeypatch.setattr(LocalTree, "put", stale)


def _silent_removal(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache that drops the node but tells its listener nothing of a claim's end."""
    emit = LocalTree._emit_one

    def silent(tree: LocalTree, event: NodeEvent) -> None:
        if event.type is not EventType.REMOVED or not event.path.endswith("/running"):
            emit(tree, event)

    monkeypatch.setattr(LocalTree, "_emit_one", silent)


def _removal_keeps_values_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache whose values_version stays when a node with a value goes."""
    remove = LocalTree.remove

    def kept(tree: LocalTree, path: str) -> None:
        before = tree.values_version
        remove(tree, path)
        tree.values_version = before

    monkeypatch.setattr(LocalTree, "remove", kept)


def _one_registry_drops_recursive_deletes(sides: list[Side]) -> None:
    """The second registry ignores recursive deletes: the two backends part ways."""
    apply = sides[1].apply

    def dropped(step: Step) -> list[str]:
        return ["ok"] if step.kind == "rdelete" else apply(step)

    sides[1].apply = dropped  # type: ignore[method-assign]


PLANTED: dict[str, tuple[Callable[[pytest.MonkeyPatch], None] | None, str]] = {
    "stale value": (_stale_value, "the cache differs from the registry"),
    "silent removal": (_silent_removal, "the listener's levels differ|added twice"),
    "values_version": (_removal_keeps_values_version, "values_version"),
    "registries part": (None, "registry differs|registries answered"),
}


@pytest.mark.parametrize("planted", PLANTED)
def test_the_comparison_catches_a_planted_divergence(
    planted: str, two_embedded: list[Side], monkeypatch: pytest.MonkeyPatch
) -> None:
    plant, message = PLANTED[planted]
    if plant is None:
        _one_registry_drops_recursive_deletes(two_embedded)
    else:
        plant(monkeypatch)
    figures = Figures()
    with pytest.raises(Diverged, match=message):
        for seed in range(50):
            run_sequence(seed, two_embedded, figures)


def test_two_embedded_registries_agree_with_nothing_planted(two_embedded: list[Side]) -> None:
    """The planted divergences above are caught for what they plant, not by chance."""
    figures = Figures()
    for seed in range(50):
        run_sequence(seed, two_embedded, figures)
    assert figures.sequences == 50


def test_the_comparison_catches_a_zookeeper_cache_that_misses_its_resync(
    memory_and_zookeeper: list[Side], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What changed while the reader was cut off reaches its cache only by the resync:
    here a resync that adds and updates, but forgets the nodes gone meanwhile."""

    def resync_without_removals(caches: ZooKeeperCaches) -> None:
        live = caches.index.all()
        for cache, snapshot in zip(live, caches._read_trees(live), strict=True):
            for path in sorted(snapshot, key=lambda p: p.count("/")):
                cache.tree.upsert(path, snapshot[path])

    monkeypatch.setattr(ZooKeeperCaches, "resync", resync_without_removals)
    figures = Figures()
    with pytest.raises(Diverged, match=r"zookeeper, cache of .*: the cache differs from"):
        for seed in range(50):
            run_sequence(seed, memory_and_zookeeper, figures)
