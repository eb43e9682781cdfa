"""A leader's repair applied late never undoes what changed since it read.

The leader reads what needs repair, then writes the repair; on a slow registry the write
arrives after other instances acted. Each test makes exactly that happen: the registry
below the leader lets another session change the item right before the repair's request
is applied. A repair that did not condition its write on what it read deletes the newer
state (a live claim), and the item then runs twice.

The leader is a real Scheduler on the embedded registry, with its own session; "another
instance" is a second session on the same server.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from shardcron.config.job import JobConfig
from shardcron.coordination.claims import claim_ops
from shardcron.coordination.paths import JobPaths
from shardcron.errors import TransactionError
from shardcron.registry import Delete, Op, OpResult
from shardcron.registry.memory import MemoryRegistry
from shardcron.registry.memoryserver import MemoryServer
from shardcron.scheduler.process import Scheduler
from tests.helpers import wait_until

A, B = "127.0.0.1@-@101", "127.0.0.2@-@102"
NAMESPACE = "late"


class LateRegistry(MemoryRegistry):
    """Runs ``meanwhile`` right before the first request that deletes a path ``deletes``
    picks, then applies that request, and records how it ended."""

    def __init__(
        self, server: MemoryServer, deletes: Callable[[str], bool], meanwhile: Callable[[], None]
    ) -> None:
        super().__init__(server, NAMESPACE)
        self.deletes = deletes
        self.meanwhile: Callable[[], None] | None = meanwhile
        self.outcome: list[str] = []
        self.applied = threading.Event()

    def _late(self, paths: Sequence[str], request: Callable[[], object]) -> object:
        meanwhile = self.meanwhile
        if meanwhile is None or not any(self.deletes(p) for p in paths):
            return request()
        self.meanwhile = None
        meanwhile()
        try:
            result = request()
        except TransactionError as exc:
            self.outcome.append(f"refused: {exc}")
            raise
        finally:
            self.applied.set()
        self.outcome.append("applied")
        return result

    def transaction(self, ops: Sequence[Op]) -> list[OpResult]:
        deleted = [op.path for op in ops if isinstance(op, Delete)]
        applied = self._late(deleted, lambda: super(LateRegistry, self).transaction(ops))
        return applied  # type: ignore[return-value]

    def delete(self, path: str, *, recursive: bool = False) -> None:
        self._late([path], lambda: super(LateRegistry, self).delete(path, recursive=recursive))


@contextmanager
def late_repair(
    config: JobConfig,
    plant: Callable[[MemoryRegistry], None],
    deletes: Callable[[str], bool],
    meanwhile: Callable[[MemoryRegistry], None],
) -> Iterator[tuple[list[str], MemoryRegistry]]:
    """Leader A on a LateRegistry, once ``plant`` (through another session, B's) wrote the
    state it will repair; ``meanwhile`` is what B does right before the repair applies.
    Yields how the repair ended and B's session."""
    server = MemoryServer()
    other = MemoryRegistry(server, NAMESPACE)
    other.start()
    plant(other)
    registry = LateRegistry(server, deletes, lambda: meanwhile(other))
    scheduler = Scheduler(registry, instance_id=A)
    scheduler.add_job(config, lambda ctx: None)
    scheduler.start()
    try:
        wait_until(registry.applied.is_set, timeout=10, what="the late repair")
        yield registry.outcome, other
    finally:
        scheduler.stop(grace=5)
        other.close()


def test_a_late_stale_claim_repair_leaves_the_claim_made_since_alone() -> None:
    """Issue 55 case 7: the leader finds item 0 held by a dead instance and fails it over;
    meanwhile the item was failed over and claimed anew by B, alive. The repair must not
    delete B's claim (the item would run again while B runs it)."""
    config = JobConfig(job_name="late", sharding_total_count=1, failover=True)  # no cron
    paths = JobPaths("late")

    def plant(other: MemoryRegistry) -> None:
        other.put(paths.config, config.to_yaml().encode())
        other.put(paths.item_instance(0), A.encode())
        other.put(paths.running(0), b"127.0.0.9@-@109")  # its holder died: no lease

    def claimed_anew_by_b(other: MemoryRegistry) -> None:
        other.create(paths.lease(B), ephemeral=True)
        other.transaction([Delete(paths.running(0)), *claim_ops(paths, 0, B)])

    with late_repair(config, plant, lambda p: p == paths.running(0), claimed_anew_by_b) as (
        outcome,
        other,
    ):
        assert outcome[0].startswith("refused"), outcome
        assert other.get(paths.running(0)) == B.encode()


def test_dropping_an_item_beyond_the_count_spares_a_claim_the_cache_did_not_show() -> None:
    """Issue 55 case 6: the count went down to 1; the leader drops item 1, whose node its
    cache shows with no claim, while B has just claimed it. B's ``running`` must stay: a
    later claim of the item elsewhere would run it while B does."""
    config = JobConfig(job_name="late", sharding_total_count=1)  # no cron
    paths = JobPaths("late")

    def plant(other: MemoryRegistry) -> None:
        other.put(paths.config, config.to_yaml().encode())
        other.put(paths.item_instance(0), A.encode())
        other.put(paths.item_instance(1), B.encode())  # left from a count of 2

    def claimed_by_b(other: MemoryRegistry) -> None:
        other.create(paths.lease(B), ephemeral=True)
        other.transaction(claim_ops(paths, 1, B))

    item_1 = (paths.item(1), paths.item_instance(1))
    with late_repair(config, plant, lambda p: p in item_1, claimed_by_b) as (outcome, other):
        assert outcome[0].startswith("refused"), outcome
        assert other.get(paths.running(1)) == B.encode()
