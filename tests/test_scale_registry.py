"""Registration and layout reads at scale: many jobs in one process, big layouts.

What users rely on: a process with many jobs registers all of them, in a few round
trips each; a cache shows exactly the registry's layout after a resharding of thousands
of items, learnt in a few reads rather than one per changed node; the leader writes a
big layout in few transactions, each under ZooKeeper's request size limit.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from shardcron.config.job import JobConfig
from shardcron.coordination import claims, healing, sharding
from shardcron.coordination.paths import JobPaths
from shardcron.coordination.strategies import avg_allocation
from shardcron.model import ShardingContext
from shardcron.registry import (
    MAX_TRANSACTION_BYTES,
    Create,
    Node,
    Op,
    OpResult,
    SetData,
    TreeCache,
    op_bytes,
    prefix_bytes,
)
from shardcron.registry.cache import CacheIndex, is_below
from shardcron.registry.memory import MemoryRegistry
from shardcron.registry.zkwire import MultiRead
from shardcron.registry.zookeeper import ZooKeeperRegistry
from shardcron.scheduler.process import Scheduler
from shardcron.simulation.cluster import Cluster, JobSpec
from shardcron.simulation.world import EPOCH
from shardcron.testing.zookeeper import ZooKeeperServer, unique_namespace
from tests.conftest import Backend, zk_config
from tests.helpers import wait_until

A, B, C = (f"127.0.0.{n}@-@{2000 + n}" for n in range(1, 4))
NEVER = "0 0 0 1 1 ? 2099"


def noop(ctx: ShardingContext) -> None:
    pass


def _jobs(scheduler: Scheduler, count: int) -> None:
    for n in range(count):
        config = JobConfig(job_name=f"job{n}", cron=NEVER, sharding_total_count=2)
        scheduler.add_job(config, noop)


def _registered(zk: Scheduler, instance: str, count: int) -> bool:
    registry = zk.registry
    return all(
        registry.stat(JobPaths(f"job{n}").instance(instance)) is not None for n in range(count)
    )


def test_many_jobs_register_in_a_few_round_trips_each(zookeeper: ZooKeeperServer) -> None:
    jobs = 300
    url = f"zk://{zookeeper.connect_string}/{unique_namespace()}"
    scheduler = Scheduler(url, instance_id=A)
    _jobs(scheduler, jobs)
    try:
        began = time.monotonic()
        scheduler.start()
        took = time.monotonic() - began
        assert not scheduler.failed
        assert len(scheduler.runtimes) == jobs
        # Per job: the cache's watch; per group of jobs, the caches' reads level by level
        # and one transaction for config, server, instance, election and resharding flag
        # (34 requests per job when each write was a chain of round trips, 4 when each job
        # registered on its own).
        assert scheduler.registry.request_count / jobs < 2
        assert took < 60  # seconds: a generous bound for a shared CI machine
        assert _registered(scheduler, A, jobs)

        def cached(n: int) -> bool:
            paths, cache = JobPaths(f"job{n}"), scheduler.runtimes[f"job{n}"].cache
            return (
                cache.exists(paths.instance(A))
                and cache.get(paths.server("127.0.0.1")) == b"ENABLED"
                and cache.get(paths.config) is not None
            )

        wait_until(lambda: all(cached(n) for n in range(jobs)), what="every cache to follow")
        wait_until(
            lambda: all(rt.is_leader() for rt in scheduler.runtimes.values()),
            timeout=60,
            what="every job to elect its leader",
        )
    finally:
        scheduler.stop(grace=2)


def test_two_processes_registering_the_same_jobs_at_once_both_register(
    zookeeper: ZooKeeperServer,
) -> None:
    """Their caches race (each plans creates the other makes first): nobody fails."""
    jobs = 40
    url = f"zk://{zookeeper.connect_string}/{unique_namespace()}"
    first, second = Scheduler(url, instance_id=A), Scheduler(url, instance_id=B)
    for scheduler in (first, second):
        _jobs(scheduler, jobs)
    starters = [threading.Thread(target=s.start) for s in (first, second)]
    try:
        for starter in starters:
            starter.start()
        for starter in starters:
            starter.join(60)
        assert not first.failed and not second.failed
        assert _registered(first, A, jobs) and _registered(first, B, jobs)
    finally:
        first.stop(grace=2)
        second.stop(grace=2)


@pytest.mark.parametrize("total", [5000])
def test_a_cache_equals_the_registry_after_a_big_resharding(backend: Backend, total: int) -> None:
    leader, follower = backend.session(), backend.session()
    paths = JobPaths("big")
    leader.put(paths.config, b"x")
    leader_cache = leader.tree_cache(paths.root)
    cache = follower.tree_cache(paths.root)

    def reshard(instances: list[str]) -> dict[str, list[int]] | None:
        sharding.set_flag(leader, paths)
        wait_until(lambda: leader_cache.exists(paths.sharding_necessary), what="the flag")
        return sharding.reshard(leader, leader_cache, paths, total, instances, avg_allocation)

    def shows(assignment: dict[str, list[int]], seen: TreeCache = cache) -> bool:
        return not seen.exists(paths.sharding_necessary) and all(
            seen.get(paths.item_instance(i)) == owner.encode()
            for owner, items in assignment.items()
            for i in items
        )

    first = reshard([A, B])
    assert first is not None
    wait_until(lambda: shows(first), timeout=60, what="the first layout")
    # The leader plans the next layout from its cache: it must show the whole first one.
    wait_until(lambda: shows(first, leader_cache), timeout=60, what="the leader's cache")
    before = follower.request_count
    second = reshard([A, B, C])  # half of the owners move
    assert second is not None
    wait_until(lambda: shows(second), timeout=60, what="the new layout")
    for i in range(total):  # the cache holds what the registry holds, item by item
        assert cache.get(paths.item_instance(i)) == follower.get(paths.item_instance(i))
    assert sorted(cache.children(paths.sharding), key=int) == [str(i) for i in range(total)]
    # Watching the burst cost the follower a few batched reads, not one per change.
    moved = sum(1 for i in range(total) if first_owner(first, i) != first_owner(second, i))
    assert moved >= total / 2
    assert follower.request_count - before - total < moved / 20


def test_a_big_layout_costs_the_coordinator_no_work_per_item() -> None:
    """Each instance's coordinator also decides every fire: a layout of thousands of
    item nodes must not queue a reaction per node in front of them."""
    total = 3000
    scheduler = Scheduler(MemoryRegistry(namespace=unique_namespace("layout")), instance_id=A)
    queued: list[object] = []
    coordinate = scheduler.coordinate

    def counted(fn: Any) -> None:
        queued.append(fn)
        coordinate(fn)

    scheduler.coordinate = counted  # type: ignore[method-assign]
    config = JobConfig(
        job_name="big", cron=NEVER, sharding_total_count=total, monitor_execution=False
    )
    scheduler.add_job(config, noop)
    scheduler.start()
    try:
        scheduler.trigger("big")  # the first fire writes the layout
        cache = scheduler.runtimes["big"].cache
        paths = JobPaths("big")
        wait_until(
            lambda: all(cache.get(paths.item_instance(i)) == A.encode() for i in range(total)),
            timeout=30,
            what="the layout",
        )
        assert len(queued) < total / 10  # it was one per item node
    finally:
        scheduler.stop(grace=2)


def test_a_clean_stop_of_a_big_job_costs_a_few_requests(zookeeper: ZooKeeperServer) -> None:
    """A stop records itself in the job's ``stopped`` list, kept to the item owners; read
    from the registry, those owners cost the stop a round trip per item."""
    total, namespace = 3000, unique_namespace("stop")
    registry = ZooKeeperRegistry(zk_config(zookeeper, namespace))
    scheduler = Scheduler(registry, instance_id=A)
    config = JobConfig(
        job_name="big", cron=NEVER, sharding_total_count=total, monitor_execution=False
    )
    scheduler.add_job(config, noop)
    scheduler.start()
    paths = JobPaths("big")
    try:
        scheduler.trigger("big")  # the first fire writes the layout
        cache = scheduler.runtimes["big"].cache
        wait_until(lambda: cache.get(paths.item_instance(total - 1)) == A.encode(), timeout=30)
    finally:
        before = registry.request_count
        scheduler.stop(grace=5)
    assert registry.request_count - before < 20  # was over 3,000
    reader = ZooKeeperRegistry(zk_config(zookeeper, namespace))
    reader.start()
    try:
        assert reader.get(paths.stopped) == A.encode()
    finally:
        reader.close()


def test_a_worker_of_many_jobs_deregisters_them_in_a_few_requests(
    zookeeper: ZooKeeperServer,
) -> None:
    """A stop removes each job's instance node and leadership and records the clean stop:
    read for every job at once and written in a few transactions, not a chain of round
    trips per job (a worker of 5,000 jobs took 35 s to stop)."""
    jobs, namespace = 300, unique_namespace("stops")
    registry = ZooKeeperRegistry(zk_config(zookeeper, namespace))
    scheduler = Scheduler(registry, instance_id=A)
    _jobs(scheduler, jobs)
    scheduler.start()
    runtimes = list(scheduler.runtimes.values())
    wait_until(lambda: all(rt.is_leader() for rt in runtimes), timeout=60, what="the elections")
    before = registry.request_count
    scheduler.stop(grace=5)
    assert registry.request_count - before < 10  # was 9 per job
    reader = ZooKeeperRegistry(zk_config(zookeeper, namespace))
    reader.start()
    try:
        for n in range(jobs):
            paths = JobPaths(f"job{n}")
            found = reader.get_with_stats([paths.instance(A), paths.election_instance])
            assert found == [None, None]
            assert reader.get(paths.stopped) == A.encode()
    finally:
        reader.close()


def test_two_workers_stopping_the_same_jobs_at_once_both_record_their_clean_stop(
    zookeeper: ZooKeeperServer,
) -> None:
    """Both read every job's ``stopped`` list before either writes it: each writes at the
    version it read, the one refused reads again, so that no job shows CRASHED after a
    clean stop of all."""
    jobs, namespace = 30, unique_namespace("stops")
    both_read = threading.Barrier(2, timeout=20)

    class ReadTogether(ZooKeeperRegistry):
        waited = False

        def get_with_stats(self, paths: Sequence[str]) -> list[Node | None]:
            found = super().get_with_stats(paths)
            # The first read of its stop: the one with the ``stopped`` lists (a fire of
            # items gained from the other instance reads their nodes too).
            if not self.waited and any(p.endswith("/stopped") for p in paths):
                self.waited = True
                both_read.wait()
            return found

    first, second = (
        Scheduler(ReadTogether(zk_config(zookeeper, namespace)), instance_id=instance)
        for instance in (A, B)
    )
    for scheduler in (first, second):
        _jobs(scheduler, jobs)
        scheduler.start()
    fired: dict[int, float] = {}

    def laid_out_for_both() -> bool:
        """A fire of the leader (``first``, registered first) writes a job's layout, one
        with both owners once its cache has seen ``second`` join: fire (once a second)
        until it has."""
        missing = [
            n
            for n in range(jobs)
            if {
                first.runtimes[f"job{n}"].cache.get(JobPaths(f"job{n}").item_instance(i))
                for i in (0, 1)
            }
            != {A.encode(), B.encode()}
        ]
        for n in missing:
            if time.monotonic() - fired.get(n, 0.0) > 1.0:
                fired[n] = time.monotonic()
                first.trigger(f"job{n}")
        return not missing

    try:
        wait_until(laid_out_for_both, timeout=30, what="every layout")
        for n in range(jobs):  # left by an earlier stop of C, which owns no item any more
            first.registry.put(JobPaths(f"job{n}").stopped, C.encode())
        stoppers = [threading.Thread(target=s.stop, kwargs={"grace": 5}) for s in (first, second)]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join(60)
    finally:
        first.stop(grace=0)  # returns at once if stopped already
        second.stop(grace=0)
    reader = ZooKeeperRegistry(zk_config(zookeeper, namespace))
    reader.start()
    try:
        stopped = [reader.get(JobPaths(f"job{n}").stopped) for n in range(jobs)]
    finally:
        reader.close()
    assert stopped == [b",".join(sorted([A.encode(), B.encode()]))] * jobs


def test_instances_starting_together_share_one_first_layout() -> None:
    """Four instances start 0.3 s apart across a fire's second. Written at that second,
    the first layout would leave out the last one and be rewritten at the next fire
    (for a big job: every item node written twice, each write pushed to every instance,
    while instances still registering load the whole layout)."""
    jobs = [JobSpec("big", items=40, period=1, failover=False, misfire=True)]
    cluster = Cluster(jobs, instances=4, session_timeout=5.0, rng=random.Random(1))
    for n, member in enumerate(cluster.members):
        cluster.world.at(EPOCH + 0.3 * (n + 1), lambda m=member: cluster.start(m))  # type: ignore[misc]
    cluster.world.run_until(EPOCH + 6)
    paths = JobPaths("big")
    stats = [cluster.admin.stat(paths.item_instance(i)) for i in range(40)]
    assert all(stat is not None and stat.version == 0 for stat in stats)  # written once
    owners = {cluster.peek(paths.item_instance(i)) for i in range(40)}
    assert owners == {member.name.encode() for member in cluster.members}
    assert len({run.item for run in cluster.ledger.runs}) == 40  # and the items ran


def test_a_lone_instance_runs_its_first_fire_on_its_second() -> None:
    """Nobody else joins: the first layout does not wait."""
    jobs = [JobSpec("solo", items=2, period=1, failover=False, misfire=True)]
    cluster = Cluster(jobs, instances=1, session_timeout=5.0, rng=random.Random(1))
    cluster.world.at(EPOCH + 0.3, lambda: cluster.start(cluster.members[0]))
    cluster.world.run_until(EPOCH + 1.5)
    assert sorted(run.start for run in cluster.ledger.runs) == [EPOCH + 1] * 2


def test_a_big_job_gets_its_first_layout_before_its_first_fire(
    zookeeper: ZooKeeperServer,
) -> None:
    """A first layout too big for one transaction goes out once the instances starting
    with the leader have joined, not at the first fire (a 10,000-item job's first fire
    waited the seconds the layout takes to write, or missed its second; a rare job showed
    no layout in the console until it fired)."""
    namespace, total = unique_namespace("eager"), 10_000
    big = JobConfig(job_name="big", cron=NEVER, sharding_total_count=total)
    registries = [ZooKeeperRegistry(zk_config(zookeeper, namespace)) for _ in (A, B)]
    paths = JobPaths("big")
    assert not sharding.first_layout_fits(registries[0], paths, total, A)  # too big for one
    schedulers = [Scheduler(r, instance_id=i) for r, i in zip(registries, (A, B), strict=True)]
    for scheduler in schedulers:
        scheduler.add_job(big, noop)
    for scheduler in schedulers:
        scheduler.start()
    cache = schedulers[0].runtimes["big"].cache
    try:
        wait_until(
            lambda: (
                cache.exists(paths.item_instance(total - 1))
                and not cache.exists(paths.sharding_necessary)
            ),
            30,
            "the first layout",
        )
        owners = {cache.get(paths.item_instance(i)) for i in range(total)}
        assert owners == {A.encode(), B.encode()}  # over both: it waited for the second
        stat = schedulers[0].registry.stat(paths.item_instance(total - 1))
        assert stat is not None and stat.version == 0  # written once
    finally:
        for scheduler in schedulers:
            scheduler.stop(grace=1)


class _CountingCache:
    def __init__(self, cache: TreeCache) -> None:
        self.cache, self.reads = cache, 0

    def get(self, path: str) -> bytes | None:
        self.reads += 1
        return self.cache.get(path)

    def exists(self, path: str) -> bool:
        self.reads += 1
        return self.cache.exists(path)

    def children(self, path: str) -> list[str]:
        self.reads += 1
        return self.cache.children(path)

    def close(self) -> None:
        self.cache.close()

    @property
    def version(self) -> int:
        return self.cache.version

    @property
    def values_version(self) -> int:
        return self.cache.values_version


def test_instances_joining_a_big_job_without_a_layout_walk_none_of_its_items() -> None:
    """Every join heals every instance: with a walk over all items in each heal, 100
    instances joining a job of 100,000 items spent minutes of CPU before its first
    layout (they registered in 60-70 s, now in about 3 s)."""
    registry = MemoryRegistry(namespace=unique_namespace("walk"))
    registry.start()
    paths = JobPaths("big")
    registry.put(paths.config, b"x")
    registry.put(paths.instance(A), b"")
    cache = _CountingCache(registry.tree_cache(paths.root))
    found = healing.sweep(cache, paths, 100_000, {A}, failover_on=True)
    assert not found and sharding.local_items(cache, paths, A, 100_000) == []
    assert cache.reads < 20


def first_owner(assignment: dict[str, list[int]], item: int) -> str:
    return next(owner for owner, items in assignment.items() if item in items)


class _Recording(MemoryRegistry):
    def __init__(self) -> None:
        super().__init__(namespace="a-namespace")
        self.transactions: list[list[Op]] = []

    def transaction(self, ops: Sequence[Op]) -> list[OpResult]:
        self.transactions.append(list(ops))
        return super().transaction(ops)


def test_a_big_layout_is_written_in_few_transactions_under_the_size_limit() -> None:
    registry = _Recording()
    registry.start()
    paths = JobPaths("big")
    registry.put(paths.config, b"x")
    cache = registry.tree_cache(paths.root)
    total = 30_000
    for instances in ([A, B], [A, B, C]):
        sharding.set_flag(registry, paths)
        wait_until(lambda: cache.exists(paths.sharding_necessary), what="the flag")
        registry.transactions.clear()
        assert sharding.reshard(registry, cache, paths, total, instances, avg_allocation)
        wait_until(lambda: not cache.exists(paths.sharding_necessary), timeout=30, what="flag")
        prefix = len("/a-namespace")
        sizes = [sum(op_bytes(op, prefix) for op in t) for t in registry.transactions]
        assert all(size <= MAX_TRANSACTION_BYTES for size in sizes)
        ops = sum(len(t) for t in registry.transactions)
        # Each transaction but the last is nearly full; the flags go with the last one.
        assert len(sizes) <= 1 + sum(sizes) // (MAX_TRANSACTION_BYTES - 200)
        assert ops > 10_000
        last = registry.transactions[-1]
        assert [op.path for op in last[-2:]] == [
            paths.sharding_necessary,
            paths.sharding_processing,
        ]
        assert all(isinstance(op, Create | SetData) for t in registry.transactions[:-1] for op in t)
    registry.close()


def test_notifications_keep_flowing_while_a_read_waits_for_kazoos_thread(
    zookeeper: ZooKeeperServer,
) -> None:
    """A worker starting 10,000 jobs hung for good: a thread sending a batch's reads
    blocked on kazoo's wake-up pipe (full: kazoo's thread had not read it) while holding
    the lock kazoo's thread needed to queue its next notification. Here the send waits
    for that next notification instead of the pipe: it must arrive."""
    namespace = unique_namespace("wake")
    registry = ZooKeeperRegistry(zk_config(zookeeper, namespace))
    writer = ZooKeeperRegistry(zk_config(zookeeper, namespace))
    registry.start()
    writer.start()
    gate, queued, sending = threading.Event(), threading.Event(), threading.Event()
    caches = registry._caches
    original_queue, original_send = caches.queue_changes, caches._send_reads

    def queue_changes(changes: list[tuple[Any, str, int]]) -> None:
        original_queue(changes)
        if any(path == "/t/b" for _, path, _ in changes):
            queued.set()

    def hold() -> None:
        gate.wait(20)

    def send_reads(reads: list[tuple[int, str]], request: type[MultiRead] = MultiRead) -> list[Any]:
        sending.set()
        queued.wait(20)  # as kazoo's pipe: free once kazoo's thread moves on
        return original_send(reads, request)

    try:
        writer.create("/t")
        registry.tree_cache("/t")
        caches.queue_changes = queue_changes  # type: ignore[method-assign]
        caches.events.submit(hold)  # batches queue behind it
        writer.create("/t/a", b"1")
        wait_until(lambda: caches._batch is not None, 10, "the notification of /t/a")
        caches._send_reads = send_reads  # type: ignore[method-assign]
        closer = threading.Thread(target=caches.submit, args=(lambda: None,), daemon=True)
        closer.start()
        assert sending.wait(10)
        writer.create("/t/b", b"2")
        assert queued.wait(10), "kazoo's thread could not queue a notification"
    finally:
        gate.set()
        queued.set()
        registry.close()
        writer.close()


def test_a_change_reaches_exactly_the_caches_whose_root_covers_it() -> None:
    """The index that routes each change (thousands a second) to the caches above it:
    checked against the plain walk up the path, over random roots, removals and paths."""
    rnd = random.Random(14)
    names = ["a", "b", "job", "x1"]

    def path(depth: int) -> str:
        return "/" + "/".join(rnd.choice(names) for _ in range(depth))

    for _ in range(2000):
        index: CacheIndex[int] = CacheIndex()
        roots: list[tuple[str, int]] = []
        for cache in range(rnd.randint(0, 5)):
            roots.append((path(rnd.randint(0, 4)), cache))
            index.add(*roots[-1])
        if roots and rnd.random() < 0.3:
            index.remove(*roots.pop(rnd.randrange(len(roots))))
        for _ in range(10):
            changed = path(rnd.randint(0, 5))
            expected = [cache for root, cache in roots if is_below(changed, root)]
            assert sorted(index.covering(changed)) == sorted(expected), (roots, changed)


def test_one_instance_claims_a_fire_of_thousands_of_items_in_parts_zookeeper_accepts(
    zookeeper: ZooKeeperServer,
) -> None:
    """A claim is cut into parts that each fit one transaction. Sent whole, the claim of
    9,000 items on one instance was over ZooKeeper's 1 MiB: the server dropped the
    connection, the worker sent it again after every reconnect, and no item ever ran."""
    total = 9000
    registry = ZooKeeperRegistry(zk_config(zookeeper, unique_namespace("claim")))
    scheduler = Scheduler(registry, instance_id=A)
    ran: list[tuple[int, int]] = []  # (item, fencing token)
    config = JobConfig(job_name="big", cron=NEVER, sharding_total_count=total, misfire=False)
    scheduler.add_job(config, lambda ctx: ran.append((ctx.sharding_item, ctx.fencing_token)))
    scheduler.start()
    try:
        session = registry.session_id
        scheduler.trigger("big")
        wait_until(lambda: len(ran) >= total, timeout=60, what="every item")
        cache, paths = scheduler.runtimes["big"].cache, JobPaths("big")
        wait_until(
            lambda: not any(cache.exists(paths.running(i)) for i in range(total)),
            timeout=30,
            what="every claim removed",
        )
        assert registry.session_id == session  # never dropped
    finally:
        scheduler.stop(grace=5)
    assert sorted(item for item, _ in ran) == list(range(total))  # each item once
    tokens = {token for _, token in ran}
    assert len(tokens) == 3  # 3 claims of up to about 3,500 items, each its own token


def test_misfire_flags_of_thousands_of_items_go_in_parts() -> None:
    registry = MemoryRegistry(namespace=unique_namespace("parts"))
    paths, items = JobPaths("big"), list(range(20_000))
    parts = claims.in_parts(registry, items, lambda i: [Create(paths.misfire(i))])
    assert [i for part in parts for i in part] == items  # in order, each item once
    prefix = prefix_bytes(registry)
    for part in parts:
        ops = [Create(paths.misfire(i)) for i in part]
        assert sum(op_bytes(op, prefix) for op in ops) <= MAX_TRANSACTION_BYTES
    assert len(parts) == 4  # about 148 bytes an op by the bound: 5,300 a part


class Hiding:
    """A cache that does not show ``hidden`` yet (behind a concurrent change)."""

    def __init__(self, cache: TreeCache, hidden: str) -> None:
        self.cache, self.hidden = cache, hidden

    def exists(self, path: str) -> bool:
        return path != self.hidden and self.cache.exists(path)

    def get(self, path: str) -> bytes | None:
        return None if path == self.hidden else self.cache.get(path)

    def children(self, path: str) -> list[str]:
        return self.cache.children(path)


def test_a_big_layout_refused_in_its_second_chunk_keeps_the_flag_for_the_next_plan(
    backend: Backend,
) -> None:
    """The last chunk of a big layout, which clears the flags, goes out only once every
    other went through: a layout cut short by a concurrent change is planned again."""
    total, leader, paths = 12_000, backend.session(), JobPaths("big")
    leader.put(paths.config, b"x")
    cache = leader.tree_cache(paths.root)
    sharding.set_flag(leader, paths)
    wait_until(lambda: cache.exists(paths.sharding_necessary), what="the flag")
    leader.put(paths.item_instance(3000), B.encode())  # with its parents; in chunk 2
    wait_until(lambda: cache.exists(paths.item_instance(3000)), what="the node")
    stale = Hiding(cache, paths.item_instance(3000))
    assignment = {A: list(range(total))}
    assert sharding.write(leader, stale, paths, total, assignment) is None  # type: ignore[arg-type]
    assert leader.stat(paths.sharding_necessary) is not None  # the next plan reshards
    assert leader.stat(paths.sharding_processing) is None
    assert leader.get(paths.item_instance(0)) == A.encode()  # the first chunk went through
    assert leader.get(paths.item_instance(6000)) is None  # the third never went
    assert leader.get(paths.item_instance(total - 1)) is None  # nor the last
    # The next plan, from a cache that has caught up (until then it races, as any would).
    wait_until(lambda: sharding.write(leader, cache, paths, total, assignment), what="it")
    assert leader.stat(paths.sharding_necessary) is None
    assert all(leader.get(paths.item_instance(i)) == A.encode() for i in (0, 3000, total - 1))
