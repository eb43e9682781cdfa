"""The registry contract: every backend must pass all of it (memory and real ZooKeeper)."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from shardcron.errors import NodeExistsError, NotEmptyError, RegistryError, TransactionError
from shardcron.registry import (
    Answer,
    Check,
    Create,
    Delete,
    EventType,
    NodeEvent,
    Op,
    SessionState,
    SetData,
    Stat,
)
from shardcron.registry.memory import MemoryRegistry, MemoryServer
from shardcron.registry.zookeeper import ZooKeeperRegistry
from shardcron.testing.zookeeper import ZooKeeperServer, unique_namespace
from tests.conftest import Backend, zk_config
from tests.helpers import wait_until


def test_put_get_stat_and_children(backend: Backend) -> None:
    reg = backend.session()
    assert reg.get("/job/config") is None
    assert reg.stat("/job/config") is None
    reg.put("/job/config", b"a: 1")
    reg.put("/job/config", b"a: 2")
    reg.put("/job/servers/10.0.0.2", b"ENABLED")
    reg.put("/job/servers/10.0.0.1", b"ENABLED")
    assert reg.get("/job/config") == b"a: 2"
    stat = reg.stat("/job/config")
    assert stat is not None and stat.version == 1 and stat.ephemeral_owner == 0
    assert reg.children("/job/servers") == ["10.0.0.1", "10.0.0.2"]
    assert reg.children("/missing") == []


def test_create_kinds(backend: Backend) -> None:
    reg = backend.session()
    assert reg.create("/job/instances/a", b"x", ephemeral=True) == "/job/instances/a"
    stat = reg.stat("/job/instances/a")
    assert stat is not None and stat.ephemeral_owner == reg.session_id != 0
    with pytest.raises(NodeExistsError):
        reg.create("/job/instances/a")
    first = reg.create("/job/latch/n-", sequential=True)
    second = reg.create("/job/latch/n-", sequential=True)
    assert first.startswith("/job/latch/n-") and second > first
    a, b = reg.stat(first), reg.stat(second)
    assert a is not None and b is not None and b.czxid > a.czxid


def test_a_sequential_name_counts_every_child_created_before_it(backend: Backend) -> None:
    """ZooKeeper's suffix is the parent's count of children created so far (deleted ones
    too; failed and rolled-back creates not): the embedded registry names them alike."""
    reg = backend.session()
    reg.put("/job/latch/a", b"")
    reg.put("/job/latch/b", b"")
    reg.delete("/job/latch/a")
    with pytest.raises(NodeExistsError):
        reg.create("/job/latch/b")
    with pytest.raises(TransactionError):
        reg.transaction([Create("/job/latch/c"), Create("/job/latch/c")])
    assert reg.create("/job/latch/n-", sequential=True) == "/job/latch/n-0000000002"
    assert reg.transaction([Create("/job/latch/n-", sequential=True)]) == [
        "/job/latch/n-0000000003"
    ]


def test_create_makes_the_parents_a_lagging_cache_still_shows(backend: Backend) -> None:
    """A session's cache may still show a parent that another session just deleted (its
    event thread is busy with an earlier change): a create makes that parent again."""
    writer, reader = backend.session(), backend.session()
    writer.put("/job/leader/sharding/necessary", b"")
    writer.put("/job/gate", b"")
    busy, release = threading.Event(), threading.Event()

    def slow(event: NodeEvent) -> None:
        if event.path == "/job/gate" and event.type is EventType.UPDATED:
            busy.set()
            release.wait(10)

    cache = reader.tree_cache("/job", slow)
    try:
        writer.put("/job/gate", b"hold")
        assert busy.wait(10)
        writer.delete("/job/leader", recursive=True)
        assert cache.exists("/job/leader")  # the change waits behind the busy listener
        created = reader.create("/job/leader/election/instance", b"a", ephemeral=True)
        assert created == "/job/leader/election/instance"
        assert writer.get(created) == b"a"
    finally:
        release.set()
    wait_until(lambda: cache.get("/job/leader/election/instance") == b"a", what="the cache")


def test_delete_recursive_and_missing(backend: Backend) -> None:
    reg = backend.session()
    reg.put("/job/sharding/0/instance", b"i")
    with pytest.raises(NotEmptyError):
        reg.delete("/job/sharding")
    reg.delete("/job/sharding", recursive=True)
    assert reg.stat("/job/sharding") is None
    reg.delete("/job/sharding")  # missing is fine


def test_transaction_commits_all(backend: Backend) -> None:
    reg = backend.session()
    reg.put("/job/leader/sharding/necessary", b"")
    reg.put("/job/sharding/0", b"")
    results = reg.transaction(
        [
            Check("/job"),
            Create("/job/sharding/0/instance", b"me"),
            SetData("/job/sharding/0", b""),
            Delete("/job/leader/sharding/necessary"),
        ]
    )
    assert results[1] == "/job/sharding/0/instance"
    assert isinstance(results[2], Stat) and results[2].version == 1
    assert reg.get("/job/sharding/0/instance") == b"me"
    assert reg.stat("/job/leader/sharding/necessary") is None


def test_transaction_with_failing_op_changes_nothing(backend: Backend) -> None:
    reg = backend.session()
    reg.put("/job/sharding/0/running", b"other")
    reg.put("/job/sharding/1", b"")
    ops: list[Op] = [
        Create("/job/sharding/1/running", b"me"),
        Create("/job/sharding/0/running", b"me"),
        Delete("/job/sharding/1"),
    ]
    with pytest.raises(TransactionError) as caught:
        reg.transaction(ops)
    assert caught.value.index == 1
    assert caught.value.op == ops[1]
    assert isinstance(caught.value.cause, NodeExistsError)
    assert reg.stat("/job/sharding/1/running") is None
    assert reg.get("/job/sharding/0/running") == b"other"
    assert reg.stat("/job/sharding/1") is not None


def test_transactions_sent_without_waiting_apply_in_order_and_each_answers(
    backend: Backend,
) -> None:
    reg = backend.session()
    reg.put("/job/sharding/0", b"")
    reg.put("/job/sharding/1", b"")
    answers: list[Answer] = []
    sent: list[list[Op]] = [
        [Create("/job/sharding/0/running", b"me")],
        [Create("/job/sharding/1/running", b"me"), Create("/job/sharding/0/running", b"me")],
        [SetData("/job/sharding/0/running", b"again")],
    ]
    for ops in sent:
        reg.send_transaction(ops, answers.append)
    wait_until(lambda: len(answers) == 3, what="three answers")
    first, refused, third = answers
    assert first == ["/job/sharding/0/running"]
    assert isinstance(refused, TransactionError) and refused.index == 1
    assert isinstance(refused.cause, NodeExistsError)
    assert isinstance(third, list) and isinstance(third[0], Stat) and third[0].version == 1
    assert reg.stat("/job/sharding/1/running") is None  # the refused one applied nothing
    assert reg.get("/job/sharding/0/running") == b"again"


def test_a_transaction_sent_on_a_closed_session_answers_with_an_error(backend: Backend) -> None:
    reg = backend.session()
    reg.close()
    answers: list[Answer] = []
    reg.send_transaction([Create("/job/x")], answers.append)
    wait_until(lambda: answers, what="an answer")
    assert isinstance(answers[0], RegistryError)


def test_ephemeral_nodes_vanish_when_session_closes(backend: Backend) -> None:
    owner, other = backend.session(), backend.session()
    owner.create("/job/instances/a", b"", ephemeral=True)
    assert other.stat("/job/instances/a") is not None
    owner.close()
    wait_until(lambda: other.stat("/job/instances/a") is None, what="ephemeral node to vanish")


def test_expired_session_loses_ephemerals_and_recovers(backend: Backend) -> None:
    victim, other = backend.session(), backend.session()
    states: list[SessionState] = []
    victim.add_session_listener(states.append)
    old_session = victim.session_id
    victim.create("/job/instances/v", b"", ephemeral=True)
    backend.expire(victim)
    wait_until(lambda: SessionState.EXPIRED in states, what="EXPIRED event")
    assert other.stat("/job/instances/v") is None
    wait_until(lambda: states[-1] == SessionState.CONNECTED, what="a new session")
    assert victim.session_id != old_session
    victim.create("/job/instances/v", b"", ephemeral=True)  # usable again
    assert other.stat("/job/instances/v") is not None


def test_dropped_connection_suspends_then_reconnects_same_session(backend: Backend) -> None:
    reg = backend.session()
    states: list[SessionState] = []
    reg.add_session_listener(states.append)
    reg.create("/job/instances/d", b"", ephemeral=True)
    session = reg.session_id
    backend.drop(reg)
    wait_until(lambda: SessionState.RECONNECTED in states, what="RECONNECTED")
    assert states[:2] == [SessionState.SUSPENDED, SessionState.RECONNECTED]
    assert reg.session_id == session
    assert reg.stat("/job/instances/d") is not None


def test_tree_cache_loads_and_follows_changes(backend: Backend) -> None:
    writer, reader = backend.session(), backend.session()
    writer.put("/job/config", b"v1")
    writer.put("/job/sharding/0/instance", b"a")
    events: list[NodeEvent] = []
    cache = reader.tree_cache("/job", events.append, skip_data=lambda p: p.endswith("/running"))
    assert cache.get("/job/config") == b"v1"
    assert cache.children("/job/sharding/0") == ["instance"]
    assert NodeEvent(EventType.ADDED, "/job/config", b"v1") in events
    events.clear()

    writer.put("/job/config", b"v2")
    writer.transaction([Create("/job/sharding/0/running", b"a")])
    writer.delete("/job/sharding/0/instance")
    wait_until(lambda: len(events) >= 3, what="three cache events")
    assert events == [
        NodeEvent(EventType.UPDATED, "/job/config", b"v2"),
        NodeEvent(EventType.ADDED, "/job/sharding/0/running", b""),
        NodeEvent(EventType.REMOVED, "/job/sharding/0/instance", b""),
    ]
    before = reader.request_count
    assert cache.get("/job/config") == b"v2"
    assert cache.exists("/job/sharding/0/running")
    assert cache.get("/job/sharding/0/instance") is None
    assert cache.children("/job/sharding/0") == ["running"]
    assert reader.request_count == before  # served locally
    cache.close()


def test_a_caches_children_follow_a_node_from_one_child_to_two_and_back_to_none(
    backend: Backend,
) -> None:
    """A node with one child is kept apart from one with several (to save memory in big
    layouts); whatever the count, the cache lists what the registry holds."""
    writer, reader = backend.session(), backend.session()
    writer.put("/job/sharding/0/instance", b"a")
    writer.put("/job/sharding/1/instance", b"a")
    cache = reader.tree_cache("/job")
    item = "/job/sharding/0"
    steps: list[tuple[Op, list[str]]] = [
        (Create(f"{item}/misfire"), ["instance", "misfire"]),
        (Delete(f"{item}/instance"), ["misfire"]),
        (Create(f"{item}/instance", b"b"), ["instance", "misfire"]),
        (Delete(f"{item}/misfire"), ["instance"]),
        (Delete(f"{item}/instance"), []),
        (Create(f"{item}/running"), ["running"]),
    ]
    for op, names in steps:
        writer.transaction([op])

        def shown(names: list[str] = names) -> bool:
            return cache.children(item) == names

        wait_until(shown, what=f"{names} after {op}")
    assert cache.get("/job/sharding/1/instance") == b"a"
    writer.delete("/job/sharding", recursive=True)
    wait_until(lambda: not cache.exists("/job/sharding"), what="the layout gone")
    assert cache.children("/job") == []
    assert cache.children(item) == []
    cache.close()


def test_a_caches_values_version_moves_with_values_not_flags(backend: Backend) -> None:
    """What is read from values alone (the items' owners, on every fire) is kept while
    the values' version stands: the claims of every fire, empty flags, leave it alone."""
    writer, reader = backend.session(), backend.session()
    writer.put("/job/sharding/0/instance", b"a")
    events: list[NodeEvent] = []
    cache = reader.tree_cache("/job", events.append, skip_data=lambda p: p.endswith("/running"))
    owners = cache.values_version
    writer.transaction([Create("/job/sharding/0/running", b"a")])
    writer.delete("/job/sharding/0/running")
    writer.put("/job/sharding/1", b"")
    wait_until(lambda: len(events) >= 3, what="the flags' events")
    assert cache.values_version == owners
    writer.put("/job/sharding/0/instance", b"b")
    wait_until(lambda: cache.get("/job/sharding/0/instance") == b"b", what="the new owner")
    assert cache.values_version != owners
    owners = cache.values_version
    writer.delete("/job/sharding/0", recursive=True)
    wait_until(lambda: not cache.exists("/job/sharding/0"), what="the item gone")
    assert cache.values_version != owners
    cache.close()


def test_caches_loaded_together_each_hold_and_follow_their_own_subtree(
    backend: Backend,
) -> None:
    writer, reader = backend.session(), backend.session()
    for n in range(30):
        writer.put(f"/job{n}/config", f"v{n}".encode())
        writer.put(f"/job{n}/sharding/0/instance", b"a")
    writer.put("/other/config", b"not watched")
    events: dict[int, list[NodeEvent]] = {n: [] for n in range(30)}
    before = reader.request_count
    caches = reader.tree_caches([(f"/job{n}", events[n].append, None) for n in range(30)])
    # On ZooKeeper one watch per cache and one read per level, not a chain per cache.
    assert reader.request_count - before <= 30 + 8
    for n, cache in enumerate(caches):
        assert cache.get(f"/job{n}/config") == f"v{n}".encode()
        assert cache.children(f"/job{n}/sharding/0") == ["instance"]
        assert cache.get("/other/config") is None
        assert NodeEvent(EventType.ADDED, f"/job{n}/config", f"v{n}".encode()) in events[n]
    writer.put("/job7/config", b"changed")
    wait_until(lambda: caches[7].get("/job7/config") == b"changed", what="the change")
    assert NodeEvent(EventType.UPDATED, "/job7/config", b"changed") in events[7]
    assert not [e for n in range(30) if n != 7 for e in events[n] if e.type is EventType.UPDATED]
    for cache in caches:
        cache.close()


def test_a_burst_of_own_writes_and_the_next_write_reach_the_cache(backend: Backend) -> None:
    # A group commit pushes thousands of watch events ahead of its own answer; they are
    # read in big chunks, and the change after them must not wait in a buffer.
    session = backend.session()
    session.put("/job/sharding", b"")
    events: list[NodeEvent] = []
    cache = session.tree_cache("/job", events.append)
    events.clear()
    session.transaction([Create(f"/job/sharding/{i}", b"x") for i in range(3000)])
    wait_until(lambda: len(cache.children("/job/sharding")) == 3000, what="the burst")
    session.put("/job/config", b"after")
    wait_until(lambda: cache.get("/job/config") == b"after", what="the write after it")
    added = [e.path for e in events if e.type is EventType.ADDED]
    assert added == [f"/job/sharding/{i}" for i in range(3000)] + ["/job/config"]


def test_watching_others_costs_no_requests(backend: Backend) -> None:
    writer, reader = backend.session(), backend.session()
    writer.put("/job/sharding/0", b"")
    seen: list[NodeEvent] = []
    reader.tree_cache("/job", seen.append, skip_data=lambda p: p.endswith("/running"))
    before = reader.request_count
    for _ in range(5):
        writer.transaction([Create("/job/sharding/0/running", b"w")])
        writer.transaction([Delete("/job/sharding/0/running")])
    wait_until(lambda: len([e for e in seen if e.type == EventType.REMOVED]) == 5, what="events")
    assert reader.request_count == before


def test_tree_cache_resyncs_after_expiry(backend: Backend) -> None:
    reader, other = backend.session(), backend.session()
    other.create("/job/instances/o", b"", ephemeral=True)
    cache = reader.tree_cache("/job")
    reader.create("/job/instances/r", b"", ephemeral=True)
    wait_until(lambda: cache.exists("/job/instances/r"), what="own ephemeral in cache")
    backend.expire(reader)
    wait_until(lambda: not cache.exists("/job/instances/r"), what="cache to drop expired node")
    other.put("/job/config", b"after")
    wait_until(lambda: cache.get("/job/config") == b"after", what="cache to follow new writes")
    assert cache.exists("/job/instances/o")


def test_lock_is_mutually_exclusive_and_dies_with_session(backend: Backend) -> None:
    a, b = backend.session(), backend.session()
    lock_a, lock_b = a.lock("/job/leader/failover/latch"), b.lock("/job/leader/failover/latch")
    assert lock_a.acquire(timeout=5)
    assert not lock_b.acquire(timeout=0.3)
    acquired = threading.Event()

    def take() -> None:
        if lock_b.acquire(timeout=10):
            acquired.set()

    waiter = threading.Thread(target=take)
    waiter.start()
    assert not acquired.wait(0.2)
    a.close()  # session end releases the lock
    assert acquired.wait(10)
    waiter.join()
    lock_b.release()


def test_server_time_is_close_to_local_clock(backend: Backend) -> None:
    reg = backend.session()
    assert abs(reg.server_time("/job/systemTime/current") - time.time()) < 5


def test_request_counter_counts_round_trips(backend: Backend) -> None:
    reg = backend.session()
    before = reg.request_count
    reg.put("/job/x", b"1")
    reg.get("/job/x")
    reg.transaction([SetData("/job/x", b"2"), SetData("/job/x", b"3")])
    assert reg.request_count - before >= 3
    before = reg.request_count
    reg.transaction([SetData("/job/x", b"4"), SetData("/job/x", b"5")])
    assert reg.request_count - before == 1


SHORT_SESSION = 1.0  # seconds: a session given up on after 1.5 s without a connection


@pytest.fixture(params=["memory", "zookeeper"])
def losing(request: pytest.FixtureRequest) -> Iterator[tuple[Backend, Callable[[], None]]]:
    """A backend on a server of its own, and how to make that server lose its data: a
    restart without it (a ZooKeeper rebuilt, or restored from an older backup)."""
    if request.param == "memory":
        server = MemoryServer()

        def lose_memory() -> None:
            server.set_up(False)
            server.lose_data()
            server.set_up(True)

        made = Backend(
            "memory",
            new=lambda: MemoryRegistry(server, "contract", session_timeout=SHORT_SESSION),
            expire=lambda r: server.expire(r.session_id),
            drop=lambda _r: None,
        )
        try:
            yield made, lose_memory
        finally:
            for registry in made.opened:
                registry.close()
        return
    with ZooKeeperServer() as zk:
        namespace = unique_namespace()
        config = zk_config(zk, namespace, session_ms=int(SHORT_SESSION * 1000))

        def lose_zookeeper() -> None:
            zk.stop()
            shutil.rmtree(zk.workdir / "data")
            zk.start()

        made = Backend(
            "zookeeper",
            new=lambda: ZooKeeperRegistry(config),
            expire=lambda _r: None,
            drop=lambda _r: None,
        )
        try:
            yield made, lose_zookeeper
        finally:
            for registry in made.opened:
                registry.close()


def test_a_registry_that_lost_its_data_gets_a_new_session_and_says_so(
    losing: tuple[Backend, Callable[[], None]], caplog: pytest.LogCaptureFixture
) -> None:
    """The old session is refused for good: 1.5 session timeouts after the connection
    dropped the client gives up on it (EXPIRED), starts a new one, logs one ERROR line
    and publishes RESET ahead of the events that empty its caches and of CONNECTED."""
    backend, lose = losing
    reg = backend.session()
    reg.create("/job/instances/a", b"", ephemeral=True)
    reg.put("/job/config", b"a: 1")
    seen: list[tuple[float, object]] = []
    cache = reg.tree_cache("/job", lambda e: seen.append((time.monotonic(), e)))
    wait_until(lambda: cache.exists("/job/config"), what="the cache loaded")
    reg.add_session_listener(lambda state: seen.append((time.monotonic(), state)))
    old, mark = reg.session_id, len(seen)
    lose()
    wait_until(lambda: SessionState.CONNECTED in [x for _, x in seen[mark:]], 30, "a new session")
    states = [(at, x) for at, x in seen[mark:] if isinstance(x, SessionState)]
    assert [x for _, x in states] == [
        SessionState.SUSPENDED,
        SessionState.EXPIRED,
        SessionState.RESET,
        SessionState.CONNECTED,
    ]
    assert states[1][0] - states[0][0] >= 1.5 * SHORT_SESSION * 0.9  # not given up sooner
    removed = [n for n, (_, x) in enumerate(seen) if n >= mark and isinstance(x, NodeEvent)]
    reset = next(n for n, (_, x) in enumerate(seen) if x is SessionState.RESET)
    assert removed and min(removed) > reset, "RESET comes ahead of the caches' resync"
    assert reg.session_id != old
    assert not cache.exists("/job/config") and reg.get("/job/config") is None
    errors = [r for r in caplog.records if r.levelname == "ERROR" and r.name.startswith("shard")]
    assert len(errors) == 1 and "lost its data or was restored from a backup" in errors[0].message
    reg.create("/job/instances/a", b"", ephemeral=True)  # usable again
