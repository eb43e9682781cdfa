"""Jobs leaving together (``shardcron.coordination.deregistration``), on the embedded registry.

What users rely on: a stopping instance removes its own nodes of every job and records its
clean stop, whatever else changes meanwhile; a job whose write keeps being refused does
not cost the other jobs their clean stop.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from shardcron.coordination import deregistration
from shardcron.coordination.deregistration import Leaving, remove
from shardcron.coordination.paths import JobPaths
from shardcron.coordination.stopmark import parse_stopped
from shardcron.registry import Op, OpResult, TreeCache
from shardcron.registry.memory import MemoryRegistry
from tests.helpers import wait_until

A, B = "10.0.0.1@-@1", "10.0.0.2@-@2"
JOBS = [JobPaths(f"job{n}") for n in range(40)]


def _registered(registry: MemoryRegistry) -> list[TreeCache]:
    """Every job with A's instance node and leadership, and A owning item 0; every other
    job has B, owner of item 1, stopped already."""
    caches: list[TreeCache] = []
    for n, paths in enumerate(JOBS):
        registry.put(paths.config, b"cron: 0 0 0 1 1 ? 2099")
        registry.put(paths.item_instance(0), A.encode())
        if n % 2:
            registry.put(paths.item_instance(1), B.encode())
            registry.put(paths.stopped, B.encode())
        registry.create(paths.instance(A), b"", ephemeral=True)
        registry.create(paths.election_instance, A.encode(), ephemeral=True)
        caches.append(registry.tree_cache(paths.root))
    wait_until(
        lambda: all(c.exists(p.election_instance) for p, c in zip(JOBS, caches, strict=True)),
        what="the caches",
    )
    return caches


def test_a_job_refused_again_and_again_goes_alone_and_the_others_leave(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another instance rewrites job7's ``stopped`` list just before each write of it:
    job7 gives up after the deadline, every other job leaves in the first rounds."""
    monkeypatch.setattr(deregistration, "DEADLINE_SECONDS", 0.3)
    stubborn = JOBS[7]

    class Racing(MemoryRegistry):
        writes = 0

        def transaction(self, ops: Sequence[Op]) -> list[OpResult]:
            if any(op.path == stubborn.stopped for op in ops):
                Racing.writes += 1
                self.put(stubborn.stopped, f"{B},{Racing.writes}".encode())
            return super().transaction(ops)

    registry = Racing(namespace="leave")
    registry.start()
    caches = _registered(registry)
    remove(
        registry,
        [
            Leaving(paths, A, cache, operator=False)
            for paths, cache in zip(JOBS, caches, strict=True)
        ],
    )
    for n, paths in enumerate(JOBS):
        if paths is stubborn:
            assert registry.stat(paths.instance(A)) is not None  # its ops go together
            continue
        assert registry.stat(paths.instance(A)) is None
        assert registry.stat(paths.election_instance) is None
        assert parse_stopped(registry.get(paths.stopped)) == ({A, B} if n % 2 else {A})
    assert Racing.writes > 2  # retried alone, not given up at the first refusal


def test_nodes_of_another_session_stay() -> None:
    """Leadership held by another session (or instance) is not this stop's to remove."""
    registry = MemoryRegistry(namespace="leave")
    registry.start()
    caches = _registered(registry)
    other = MemoryRegistry(namespace="leave", server=registry.server)
    other.start()
    paths = JOBS[0]
    registry.delete(paths.election_instance)
    other.create(paths.election_instance, B.encode(), ephemeral=True)
    remove(registry, [Leaving(paths, A, caches[0], operator=True)])
    assert registry.get(paths.election_instance) == B.encode()
    assert registry.stat(paths.instance(A)) is not None  # an operator's tool removes it
    assert parse_stopped(registry.get(paths.stopped)) == {A}
