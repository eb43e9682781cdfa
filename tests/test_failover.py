"""Failover and fencing with real worker processes (SIGKILL, SIGSTOP) on a real ZooKeeper."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from shardcron.config.job import JobConfig
from shardcron.coordination.paths import JobPaths
from shardcron.registry import Registry
from shardcron.registry.zookeeper import ZooKeeperRegistry
from shardcron.testing.zookeeper import ZooKeeperServer, unique_namespace
from tests.cluster import Run, overlaps
from tests.conftest import zk_config
from tests.helpers import wait_until
from tests.workers import Workers, registered, workers

A, B, C = (f"127.0.0.{n}@-@{3000 + n}" for n in range(1, 4))
SESSION = 2.0
PATHS = JobPaths("ledger")


def failover_job(items: int, cron: str = "0/10 * * * * ?") -> dict[str, dict[str, object]]:
    return {
        "ledger": {
            "callable": "tests.jobs:ledger",
            "cron": cron,
            "shardingTotalCount": items,
            "failover": True,
        }
    }


@pytest.fixture
def admin(zookeeper: ZooKeeperServer) -> Iterator[Registry]:
    registry = ZooKeeperRegistry(zk_config(zookeeper, unique_namespace()))
    registry.start()
    yield registry
    registry.close()


@contextmanager
def failover_workers(
    zookeeper: ZooKeeperServer, admin: Registry, tmp: Path, items: int, hold: float
) -> Iterator[Workers]:
    with workers(
        tmp,
        zookeeper.connect_string,
        admin.namespace,
        failover_job(items),
        int(SESSION * 1000),
        hold,
    ) as w:
        yield w


def mid_run(w: Workers, items: int, into: float, on: tuple[str, ...]) -> float:
    """Wait for a fire that starts every item, each of ``on`` running some, then ``into``
    seconds more; its start time."""
    fire = next_fire_start(w, time.time(), items, on)
    wait_until(lambda: time.time() > fire + into, what="mid-run")
    return fire


def start_all(w: Workers, admin: Registry, *instances: str) -> None:
    for instance in instances:
        w.start(instance)
    wait_until(
        lambda: all(registered(admin, "ledger", i) for i in instances), timeout=30, what="workers"
    )


def next_fire_start(w: Workers, after: float, items: int, on: tuple[str, ...]) -> float:
    """The start time of the first fire after ``after`` in which all items started, on a
    layout over every instance of ``on``: a first layout written before the last of them
    joined runs a fire on the others only."""

    def find() -> float | None:
        by_second: dict[int, tuple[set[int], set[str]]] = {}
        for run in w.runs(unfinished=True):
            if run.start > after and run.source == "NORMAL_TRIGGER":
                got, where = by_second.setdefault(int(run.start), (set(), set()))
                got.add(run.item)
                where.add(run.instance)
        full = [
            s for s, (got, where) in by_second.items() if len(got) == items and where >= set(on)
        ]
        return float(min(full)) if full else None

    return wait_until(find, timeout=25, what="a complete fire")


def takeovers(w: Workers, items: set[int], after: float) -> dict[int, Run]:
    found: dict[int, Run] = {}
    for run in w.runs(unfinished=True):
        if run.item in items and run.start > after and run.source == "FAILOVER":
            found.setdefault(run.item, run)
    return found


def all_taken(w: Workers, items: set[int], after: float) -> dict[int, Run] | None:
    """The takeover run of every one of ``items``, once all of them have one."""
    found = takeovers(w, items, after)
    return found if set(found) == set(items) else None


def stale_nodes(admin: Registry, total: int) -> list[str]:
    paths = [PATHS.failover_item(int(n)) for n in admin.children(PATHS.failover_items)]
    for item in range(total):
        for path in (PATHS.running(item), PATHS.failover(item), PATHS.failovering(item)):
            if admin.stat(path) is not None:
                paths.append(path)
    return paths


def test_every_item_of_a_crashed_instance_runs_again_in_the_same_fire_window(
    zookeeper: ZooKeeperServer, admin: Registry, tmp_path: Path
) -> None:
    """The seeds' case: 3 instances, 9 items, one dies mid-run while the others are busy."""
    with failover_workers(zookeeper, admin, tmp_path, 9, hold=4) as w:
        start_all(w, admin, A, B, C)
        fire = mid_run(w, 9, into=1, on=(A, B, C))
        w.workers[B].kill()
        killed = time.time()
        lost = {r.item for r in w.interrupted() if r.instance == B}
        assert len(lost) == 3
        taken = wait_until(
            lambda: all_taken(w, lost, killed),
            timeout=SESSION + 4,
            what="all 3 orphaned items to be taken over",
        )
        assert {r.instance for r in taken.values()} <= {A, C}
        assert max(r.start for r in taken.values()) - killed < SESSION + 2
        assert max(r.start for r in taken.values()) < fire + 10  # in the same fire window
        # Nobody loses a cycle: the next fire runs every item (resharded over A and C; an
        # instance with more items than worker lanes starts the rest as lanes free up).
        next_window = wait_until(
            lambda: (
                (got := {r.item for r in w.runs() if fire + 10 <= r.start < fire + 20})
                == set(range(9))
                and got
            ),
            timeout=25,
            what="every item in the next fire window",
        )
        assert next_window == set(range(9))
        # From the fire the crash hit on. (A start-up whose first layout waits for the
        # instances still joining can run that first fire late, into the next one.)
        assert not [r for r in w.runs() if r.source == "MISFIRE" and r.start >= fire]
        assert overlaps([r for r in w.runs() if r.instance != B]) == []
        w.stop_all()
        assert stale_nodes(admin, 9) == []


def test_crash_of_an_instance_running_failover_items(
    zookeeper: ZooKeeperServer, admin: Registry, tmp_path: Path
) -> None:
    with failover_workers(zookeeper, admin, tmp_path, 6, hold=6) as w:
        start_all(w, admin, A, B, C)
        mid_run(w, 6, into=0.5, on=(A, B, C))
        w.workers[B].kill()
        killed = time.time()
        lost_b = {r.item for r in w.interrupted() if r.instance == B}
        first = wait_until(
            lambda: next(iter(takeovers(w, lost_b, killed).values()), None), timeout=SESSION + 4
        )
        rescuer = first.instance
        survivor = C if rescuer == A else A
        w.workers[rescuer].kill()  # dies while running a failover item
        killed_again = time.time()
        # Lost now: everything the rescuer was running (its own items and B's), taken over
        # after its death; B's other items, taken over since B's (the survivor may have
        # started one a moment before the rescuer died, its ledger line not read yet).
        lost = {r.item for r in w.interrupted() if r.instance == rescuer}
        assert first.item in lost

        def every_item_taken() -> dict[int, Run] | None:
            again = all_taken(w, lost, killed_again)
            rest = all_taken(w, lost_b - lost, killed)
            return None if again is None or rest is None else {**rest, **again}

        taken = wait_until(
            every_item_taken,
            timeout=SESSION + 5,
            what="the survivor to take over every interrupted item",
        )
        assert {r.instance for r in taken.values()} == {survivor}
        assert max(r.start for r in taken.values()) - killed_again < SESSION + 2.5
        w.stop_all()
        assert stale_nodes(admin, 6) == []


def test_whole_cluster_restart_requeues_persistent_running_nodes(
    zookeeper: ZooKeeperServer, admin: Registry, tmp_path: Path
) -> None:
    with failover_workers(zookeeper, admin, tmp_path, 4, hold=6) as w:
        start_all(w, admin, A, B)
        mid_run(w, 4, into=0.5, on=(A, B))
        w.workers[A].kill()
        w.workers[B].kill()
        wait_until(
            lambda: not admin.children(PATHS.instances), timeout=10, what="sessions to expire"
        )
        assert {i for i in range(4) if admin.stat(PATHS.running(i))} == {0, 1, 2, 3}
        restarted = time.time()
        w.start(A)
        taken = wait_until(
            lambda: all_taken(w, {0, 1, 2, 3}, restarted),
            timeout=15,
            what="the first instance back to re-run every interrupted item",
        )
        assert {r.instance for r in taken.values()} == {A}
        w.stop_all()
        assert stale_nodes(admin, 4) == []


def test_turning_failover_off_clears_failover_nodes(
    zookeeper: ZooKeeperServer, admin: Registry, tmp_path: Path
) -> None:
    with failover_workers(zookeeper, admin, tmp_path, 4, hold=8) as w:
        start_all(w, admin, A, B)
        mid_run(w, 4, into=0.5, on=(A, B))
        w.workers[B].kill()
        wait_until(
            lambda: any(admin.stat(PATHS.failovering(i)) for i in range(4)),
            timeout=SESSION + 5,
            what="a failover in progress",
        )
        config = JobConfig.from_yaml((admin.get(PATHS.config) or b"").decode())
        admin.put(PATHS.config, config.with_changes(failover=False).to_yaml().encode())
        wait_until(
            lambda: (
                not any(
                    admin.stat(p)
                    for i in range(4)
                    for p in (PATHS.failover(i), PATHS.failovering(i))
                )
            ),
            timeout=10,
            what="failover nodes to be cleared",
        )


def test_a_stalled_worker_wakes_up_fenced(
    zookeeper: ZooKeeperServer, admin: Registry, tmp_path: Path
) -> None:
    """SIGSTOP past the session timeout: the item is taken over; the stale run's token is
    lower and its claim check says no (ElasticJob issue #1549)."""
    with failover_workers(zookeeper, admin, tmp_path, 4, hold=6) as w:
        for instance in (A, B):
            w.start(instance, {"SHARDCRON_CHECK_CLAIM": "1"})
        wait_until(
            lambda: registered(admin, "ledger", A) and registered(admin, "ledger", B), timeout=30
        )
        mid_run(w, 4, into=0.5, on=(A, B))
        w.workers[B].kill(signal.SIGSTOP)
        stopped = time.time()
        stalled = {r.item: r for r in w.interrupted() if r.instance == B}
        taken = wait_until(
            lambda: all_taken(w, set(stalled), stopped),
            timeout=SESSION + 5,
            what="A to take the stalled items over",
        )
        w.workers[B].kill(signal.SIGCONT)
        stale_ends = wait_until(
            lambda: [
                r
                for r in w.records()
                if r["phase"] == "end"
                and r["instance"] == B
                and r["item"] in stalled
                and r["start"] < stopped
            ],
            timeout=15,
            what="the stalled runs to finish",
        )
        for record in stale_ends:
            assert record["current"] is False
            assert record["token"] < taken[record["item"]].token
