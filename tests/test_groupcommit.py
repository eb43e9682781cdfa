"""Group commit: the claims of a process's jobs due in one tick cost one round trip, and
one job's contention or failure never costs the others their fire."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import pytest

from shardcron.coordination import groupcommit
from shardcron.coordination.claims import Claiming, Completing, claim_ops
from shardcron.coordination.groupcommit import GroupCommit
from shardcron.coordination.paths import JobPaths
from shardcron.errors import ConnectionLostError, RegistryError, TransactionError
from shardcron.model import ShardingContext
from shardcron.registry import Answer, Create, Delete, Op, Registry, TreeCache
from shardcron.registry.memory import MemoryRegistry
from shardcron.registry.memoryserver import MemoryServer
from shardcron.registry.zookeeper import ZooKeeperRegistry
from shardcron.scheduler.process import Scheduler
from shardcron.testing.zookeeper import ZooKeeperServer, unique_namespace
from tests.conftest import zk_config
from tests.helpers import wait_until

T = TypeVar("T")
ME = "10.0.0.1@-@1"


class Coordinator:
    """The coordinator queue of a host, run by hand."""

    def __init__(self) -> None:
        self.queue: list[Callable[[], None]] = []
        self.later: list[Callable[[], None]] = []  # whatever the delay: after the queue

    def now(self) -> float:
        return time.time()

    def released(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def released_monotonic(self) -> float:
        return time.monotonic()

    def coordinate(self, fn: Callable[[], None]) -> None:
        self.queue.append(fn)

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        self.later.append(fn)

    def call_at(self, when: float, fn: Callable[[], None]) -> None:
        self.later.append(fn)

    def execute(
        self,
        work: Callable[[], T],
        then: Callable[[T], None],
        returned: Callable[[T], None] | None = None,
    ) -> None:
        then(work())

    def execute_at(
        self,
        when: float,
        works: Sequence[Callable[[], T]],
        then: Callable[[T], None],
        next_claim: float | None,
        returned: Callable[[T], None] | None = None,
    ) -> None:
        self.later.extend(lambda work=work: then(work()) for work in works)  # type: ignore[misc]

    @property
    def chains_items(self) -> bool:
        return False

    def run(self) -> None:
        while self.queue or self.later:
            (self.queue or self.later).pop(0)()

    def run_until(self, done: Callable[[], bool]) -> None:
        """Run the queue, with the answers that reach it from ZooKeeper's thread, until
        ``done()``."""

        def ran_and_done() -> bool:
            self.run()
            return done()

        wait_until(ran_and_done, what="the answers")


class Outcomes:
    def __init__(self) -> None:
        self.errors: dict[str, RegistryError | None] = {}

    def then(self, name: str) -> Callable[[RegistryError | None], None]:
        return lambda error: self.errors.__setitem__(name, error)


@pytest.fixture
def registry() -> Iterator[MemoryRegistry]:
    registry = MemoryRegistry(MemoryServer())
    registry.start()
    yield registry
    registry.close()


def jobs(registry: Registry, names: str, items: int = 2) -> dict[str, tuple[JobPaths, TreeCache]]:
    """Jobs with ``items`` items each, registered by ``ME`` (its lease written)."""
    found = {}
    for name in names:
        paths = JobPaths(name)
        for item in range(items):
            registry.put(paths.item(item), b"")
        registry.create(paths.lease(ME), ephemeral=True)
        found[name] = (paths, registry.tree_cache(paths.root, lambda _e: None))
    return found


def claim_all(
    commits: GroupCommit, found: dict[str, tuple[JobPaths, TreeCache]], **kwargs: Any
) -> tuple[dict[str, Claiming], Outcomes]:
    outcomes, requests = Outcomes(), {}
    for name, (paths, cache) in found.items():
        requests[name] = Claiming(cache, paths, [0, 1], ME, **kwargs)
        commits.submit(requests[name], outcomes.then(name))
    return requests, outcomes


def test_the_jobs_due_in_one_tick_claim_and_complete_in_one_transaction_each(
    registry: MemoryRegistry,
) -> None:
    host = Coordinator()
    commits = GroupCommit(registry, host)
    found = jobs(registry, "abc")
    before = registry.request_count
    requests, outcomes = claim_all(commits, found)
    host.run()

    assert registry.request_count - before == 1
    assert outcomes.errors == {"a": None, "b": None, "c": None}
    for name, (paths, _) in found.items():
        assert requests[name].result.items == [0, 1]
        assert all(registry.get(paths.running(i)) == ME.encode() for i in (0, 1))

    before = registry.request_count
    completions = {n: Completing(found[n][0], r.result.versions) for n, r in requests.items()}
    for _ in completions:
        commits.claimed()
    for name, request in completions.items():
        commits.submit_completion(request, outcomes.then(name))
        assert (name == "c") == bool(host.queue)  # the last one ends the wait
    host.run()
    assert registry.request_count - before == 1
    for paths, _ in found.values():
        assert all(registry.stat(paths.running(i)) is None for i in (0, 1))


def test_the_coordinator_goes_on_while_a_group_commit_waits_for_its_answer(
    registry: MemoryRegistry,
) -> None:
    """A slow answer holds no other job's fire: the next tick's claims go out before the
    first tick's answer is back, and each answer reaches its own requests."""
    held: list[Callable[[], None]] = []

    class SlowAnswers:
        def __getattr__(self, name: str) -> object:
            return getattr(registry, name)

        def send_transaction(self, ops: list[Op], answer: Callable[[Answer], None]) -> None:
            result = registry.transaction(ops)  # applied now, answered when released
            held.append(lambda: answer(result))

    host = Coordinator()
    commits = GroupCommit(SlowAnswers(), host)  # type: ignore[arg-type]
    found = jobs(registry, "ab")
    first = Claiming(found["a"][1], found["a"][0], [0, 1], ME)
    second = Claiming(found["b"][1], found["b"][0], [0, 1], ME)
    outcomes = Outcomes()
    commits.submit(first, outcomes.then("a"))
    host.run()
    commits.submit(second, outcomes.then("b"))
    host.run()
    assert len(held) == 2 and outcomes.errors == {}  # both out, neither answered
    for release in held:
        release()
    host.run()
    assert outcomes.errors == {"a": None, "b": None}
    assert first.result.items == second.result.items == [0, 1]


def test_an_item_running_elsewhere_costs_only_its_own_job_that_item(
    registry: MemoryRegistry,
) -> None:
    host = Coordinator()
    commits = GroupCommit(registry, host)
    found = jobs(registry, "ab")
    other = MemoryRegistry(registry.server)
    other.start()
    b = found["b"][0]
    other.transaction(claim_ops(b, 1, "10.0.0.2@-@2"))  # b's item 1 runs there

    requests, outcomes = claim_all(commits, found, trust_cache=False)  # not seen yet
    host.run()

    assert outcomes.errors == {"a": None, "b": None}
    assert requests["a"].result.items == [0, 1]
    assert requests["b"].result.items == [0]
    assert requests["b"].result.contended == (1,)
    assert registry.get(b.running(1)) == b"10.0.0.2@-@2"  # the other's claim stands
    other.close()


def test_a_claim_without_the_instances_lease_claims_nothing_and_costs_the_others_nothing(
    registry: MemoryRegistry,
) -> None:
    """A ``running`` whose holder has no lease looks dead to the leader (once the holder's
    instance node is gone too): a claim sent before the lease exists (a new session not
    registered again yet) must not create one."""
    host = Coordinator()
    commits = GroupCommit(registry, host)
    found = jobs(registry, "ab")
    a = found["a"][0]
    registry.delete(a.lease(ME))

    requests, outcomes = claim_all(commits, found)
    host.run()

    assert outcomes.errors == {"a": None, "b": None}
    assert (requests["a"].result.items, requests["a"].result.unleased) == ([], (0, 1))
    assert [registry.stat(a.running(i)) for i in (0, 1)] == [None, None]
    assert requests["b"].result.items == [0, 1]


def test_a_request_that_cannot_go_on_gets_the_error_and_the_others_apply(
    registry: MemoryRegistry,
) -> None:
    host = Coordinator()
    commits = GroupCommit(registry, host)
    found = jobs(registry, "ab")
    a = found["a"][0]
    registry.put(a.failover(0), b"someone")  # a failover claim's extra op must fail

    outcomes = Outcomes()
    failing = Claiming(found["a"][1], a, [0], ME, extra=[Create(a.failover(0))])
    fine = Claiming(found["b"][1], found["b"][0], [0, 1], ME)
    commits.submit(failing, outcomes.then("a"))
    commits.submit(fine, outcomes.then("b"))
    host.run()

    assert isinstance(outcomes.errors["a"], TransactionError)
    assert outcomes.errors["b"] is None
    assert registry.stat(a.running(0)) is None  # nothing of the refused request applied
    assert fine.result.items == [0, 1]


def test_a_big_tick_is_cut_into_chunks_under_the_request_limit(
    registry: MemoryRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(groupcommit, "MAX_CHUNK_OPS", 15)
    host = Coordinator()
    commits = GroupCommit(registry, host)
    found = jobs(registry, "abcdefghij")  # 10 jobs x (2 items x 2 ops + a lease check): 50 ops
    before = registry.request_count
    requests, outcomes = claim_all(commits, found)
    # Full chunks go out while the tick is still being prepared; nobody is answered yet.
    assert registry.request_count - before == 3 and outcomes.errors == {}
    host.run()

    assert registry.request_count - before == 4  # 15 ops per chunk: whole requests only
    assert set(outcomes.errors.values()) == {None}
    assert all(r.result.items == [0, 1] for r in requests.values())


def test_a_lost_connection_reaches_every_request_of_the_chunk(registry: MemoryRegistry) -> None:
    class Down:
        def __getattr__(self, name: str) -> object:
            return getattr(registry, name)

        def send_transaction(self, ops: list[Op], answer: Callable[[Answer], None]) -> None:
            answer(ConnectionLostError("connection lost"))

    host = Coordinator()
    commits = GroupCommit(Down(), host)  # type: ignore[arg-type]
    _, outcomes = claim_all(commits, jobs(registry, "ab"))
    host.run()
    assert all(isinstance(e, ConnectionLostError) for e in outcomes.errors.values())
    assert len(outcomes.errors) == 2


def test_a_worker_with_many_jobs_makes_two_requests_a_tick_on_zookeeper(
    zookeeper: ZooKeeperServer,
) -> None:
    """20 every-second jobs, one item each: a tick claims all 20 in one request and
    completes them in one (instead of 20 each)."""
    registry = ZooKeeperRegistry(zk_config(zookeeper, unique_namespace()))
    scheduler = Scheduler(registry, instance_id="127.0.0.1@-@1")
    lock = threading.Lock()
    fired: Counter[int] = Counter()  # fires by second

    def record(ctx: ShardingContext) -> None:
        with lock:
            fired[int(time.time())] += 1

    for n in range(20):
        scheduler.job("* * * * * ?", name=f"job{n}", sharding_total_count=1)(record)
    scheduler.start()
    try:
        # Start-up (registration, the first resharding) is over once two ticks ran whole.
        wait_until(
            lambda: sum(n == 20 for n in list(fired.values())) >= 2,
            timeout=15,
            what="the jobs firing",
        )
        with lock:
            first = max(fired)
        begin = registry.request_count
        wait_until(lambda: max(fired) >= first + 4, timeout=15, what="four more ticks")
        wait_until(lambda: fired[max(fired)] == 20, timeout=5, what="the last tick complete")
        with lock:
            ticks = [s for s in fired if s > first]
            complete = all(fired[s] == 20 for s in ticks)
        used = registry.request_count - begin
    finally:
        scheduler.stop(grace=5)
    assert complete, f"some fires did not run: {dict(fired)}"
    # Two a tick (claims, completions; ``python -m bench`` measures it), not 40; slack for
    # the tick counting began in and a completion wait that ran out on a loaded machine.
    assert used <= 3 * len(ticks), f"{used} requests for {len(ticks)} ticks"


def test_new_jobs_reshard_together_with_the_group_commit_on_zookeeper(
    zookeeper: ZooKeeperServer,
) -> None:
    """20 new jobs each flag a resharding as they register; their first fires write all
    20 layouts in one transaction or two (the fires of one or two ticks), not two round
    trips per job, and leave no ``processing`` node behind."""
    registry = ZooKeeperRegistry(zk_config(zookeeper, unique_namespace()))
    commits: list[list[Op]] = []
    send = registry.send_transaction

    def recording(ops: Sequence[Op], answer: Callable[[Answer], None]) -> None:
        commits.append(list(ops))
        send(ops, answer)

    registry.send_transaction = recording  # type: ignore[method-assign]
    scheduler = Scheduler(registry, instance_id="127.0.0.1@-@1")
    ran: set[str] = set()
    for n in range(20):
        name = f"job{n}"
        scheduler.job("* * * * * ?", name=name, sharding_total_count=2)(
            lambda ctx, name=name: ran.add(name)
        )
    scheduler.start()
    try:
        wait_until(lambda: len(ran) == 20, timeout=15, what="every job's first fire")
        left = [n for n in range(20) if registry.stat(JobPaths(f"job{n}").sharding_processing)]
    finally:
        scheduler.stop(grace=5)
    assert left == []
    flags = {JobPaths(f"job{n}").sharding_necessary for n in range(20)}
    # A resharding deletes its job's flag (registration created it).
    cleared = [
        [op.path for op in ops if isinstance(op, Delete) and op.path in flags] for ops in commits
    ]
    resharding = [paths for paths in cleared if paths]
    resharded = {path for paths in resharding for path in paths}
    assert resharded == flags
    assert len(resharding) <= 3, f"{len(resharding)} transactions for 20 reshardings"


def test_a_tick_of_thousands_of_items_fits_few_requests_that_zookeeper_accepts(
    zookeeper: ZooKeeperServer,
) -> None:
    """Chunks are cut by an upper bound of each op's bytes in ZooKeeper's own encoding, so
    they can be big (a herd of 10,000 one-item jobs costs 11 to 13 requests a tick where it
    cost 21 to 24) and ZooKeeper, whose default limit is 1 MiB a request, still takes each
    of them. Long names make the bytes, not the op count, the limit here."""
    registry = ZooKeeperRegistry(zk_config(zookeeper, unique_namespace("a-long-namespace")))
    registry.start()
    sent: list[int] = []
    send = registry.send_transaction

    def counting(ops: Sequence[Op], answer: Callable[[Answer], None]) -> None:
        sent.append(len(ops))
        send(ops, answer)

    instance = "10.123.234.111@-@" + "7" * 40
    try:
        found = {}
        for n in range(20):
            paths = JobPaths(f"a-job-with-a-rather-long-descriptive-name-{n:02d}-" + "x" * 50)
            registry.put(paths.item(0), b"")  # with its parents
            registry.transaction([Create(paths.item(i), b"") for i in range(1, 100)])
            registry.create(paths.lease(instance), ephemeral=True)
            found[n] = paths
        cache = registry.tree_cache("/", lambda _e: None)
        registry.send_transaction = counting  # type: ignore[method-assign]
        host = Coordinator()
        commits = GroupCommit(registry, host)
        outcomes = Outcomes()
        claims = {}
        for n, paths in found.items():
            claims[n] = Claiming(cache, paths, list(range(100)), instance)
            commits.submit(claims[n], outcomes.then(f"claim{n}"))
        host.run_until(lambda: len(outcomes.errors) == 20)
        claimed, sent[:] = len(sent), []
        for n, paths in found.items():
            commits.submit(Completing(paths, claims[n].result.versions), outcomes.then(f"{n}"))
        host.run_until(lambda: len(outcomes.errors) == 40)
        completed = len(sent)
        left = [registry.stat(paths.running(0)) for paths in found.values()]
    finally:
        registry.close()
    assert set(outcomes.errors.values()) == {None}
    assert all(len(c.result.items) == 100 for c in claims.values())
    assert left == [None] * 20
    # 2,000 items x 2 ops: about 0.94 MB of claims by the bound, 0.65 MB of completions.
    assert (claimed, completed) == (2, 1)
