"""A worker's jobs register in groups (shardcron.coordination.registration): one transaction per group,
and a group the registry refuses, or whose answer is lost, still registers every job."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import pytest

from shardcron.config.job import JobConfig
from shardcron.coordination.paths import JobPaths, job_of
from shardcron.coordination.runtime import needs_value
from shardcron.errors import ConnectionLostError
from shardcron.registry import Create, Op, OpResult
from shardcron.registry.memory import MemoryRegistry
from shardcron.registry.memoryserver import MemoryServer
from shardcron.scheduler.process import Scheduler
from tests.helpers import wait_until

A, B = "127.0.0.1@-@1", "127.0.0.2@-@2"
JOBS = 30
EVERY_SECOND = "* * * * * ?"


class Recording(MemoryRegistry):
    """Counts the transactions that register many jobs; ``before_group`` runs ahead of
    the first one (another worker racing, a lost answer)."""

    def __init__(self, server: MemoryServer) -> None:
        super().__init__(server)
        self.groups: list[int] = []  # ops of each many-job transaction
        self.before_group: Callable[[Sequence[Op]], list[OpResult] | None] | None = None

    def transaction(self, ops: Sequence[Op]) -> list[OpResult]:
        registering = {
            job_of(op.path) for op in ops if isinstance(op, Create) and "/instances/" in op.path
        }  # not a stop's, which deletes them
        if len(registering) > 1:
            self.groups.append(len(ops))
            hook, self.before_group = self.before_group, None
            if hook is not None:
                result = hook(ops)
                if result is not None:
                    return result
        return super().transaction(ops)


def _worker(registry: MemoryRegistry, instance: str, ran: set[str]) -> Scheduler:
    scheduler = Scheduler(registry, instance_id=instance)
    for n in range(JOBS):
        name = f"job{n}"
        config = JobConfig(job_name=name, cron=EVERY_SECOND, sharding_total_count=1)
        scheduler.add_job(config, lambda ctx, name=name: ran.add(name))
    return scheduler


def _registered(registry: MemoryRegistry, instance: str) -> bool:
    return all(registry.stat(JobPaths(f"job{n}").instance(instance)) for n in range(JOBS))


def _run(registry: Recording) -> set[str]:
    ran: set[str] = set()
    scheduler = _worker(registry, A, ran)
    scheduler.start()
    try:
        assert not scheduler.failed
        assert _registered(registry, A)
        wait_until(lambda: len(ran) == JOBS, timeout=15, what="every job's first fire")
    finally:
        scheduler.stop(grace=5)
    return ran


def test_a_worker_registers_its_jobs_in_one_transaction_per_group() -> None:
    registry = Recording(MemoryServer())
    _run(registry)
    assert len(registry.groups) == 1  # 30 jobs: one group


def test_a_group_refused_for_one_raced_job_registers_it_alone_and_the_rest_together() -> None:
    server = MemoryServer()
    registry = Recording(server)
    other = MemoryRegistry(server)
    other.start()
    stored = JobConfig(job_name="job7", cron=EVERY_SECOND, sharding_total_count=1)

    def race(ops: Sequence[Op]) -> None:
        # Another worker writes job7 after this worker's caches loaded.
        other.put(JobPaths("job7").root, stored.node_value.encode())
        other.put(JobPaths("job7").config, stored.to_yaml().encode())

    registry.before_group = race
    _run(registry)
    # The refused one, then the other 29 together: not 29 transactions of their own.
    assert len(registry.groups) == 2
    assert registry.groups[1] < registry.groups[0]


def test_a_group_whose_answer_is_lost_registers_every_job() -> None:
    registry = Recording(MemoryServer())

    def applied_then_lost(ops: Sequence[Op]) -> list[OpResult]:
        MemoryRegistry.transaction(registry, ops)
        raise ConnectionLostError("the answer was lost")

    registry.before_group = applied_then_lost
    _run(registry)
    assert len(registry.groups) == 1


def test_two_workers_starting_the_same_jobs_together_both_register() -> None:
    server = MemoryServer()
    first, second = Recording(server), Recording(server)
    ran: set[str] = set()
    workers = [_worker(first, A, ran), _worker(second, B, ran)]
    starters = [threading.Thread(target=worker.start) for worker in workers]
    try:
        for starter in starters:
            starter.start()
        for starter in starters:
            starter.join(30)
        assert not workers[0].failed and not workers[1].failed
        assert _registered(first, A) and _registered(first, B)
    finally:
        for worker in workers:
            worker.stop(grace=5)


def test_groups_stay_below_the_transaction_size_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shardcron.registry.contract.MAX_TRANSACTION_BYTES", 8 * 1024)
    registry = Recording(MemoryServer())
    _run(registry)
    assert len(registry.groups) > 2  # cut by size, every job registered all the same


def test_a_job_cache_fetches_the_values_it_reads_and_tracks_flags_for_existence() -> None:
    """Every notification asks this; a flag's value would cost a read per claim."""
    paths = JobPaths("instance")  # a job whose name is a leaf name of the layout
    valued = [
        paths.root,
        paths.config,
        paths.server("10.0.0.1"),
        paths.election_instance,
        paths.item_instance(7),
    ]
    flags = [
        paths.running(7),
        paths.lease("10.0.0.1@-@1"),
        paths.misfire(7),
        paths.item(7),
        paths.instance("10.0.0.1@-@1"),
        paths.sharding_necessary,
        paths.servers,
    ]
    assert [p for p in valued if not needs_value(paths, p)] == []
    assert [p for p in flags if needs_value(paths, p)] == []
