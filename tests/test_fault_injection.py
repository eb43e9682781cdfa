"""Fault injection: worker processes under SIGKILL, restarts, stalls and a ZooKeeper restart.

Several ``shardcron run`` workers share a failover-enabled job whose items append to a
ledger. Faults are injected one after another; then the ledger and the registry must show:

(a) no item ran on two instances at overlapping times (a run whose fencing check at its
    end said its claim was gone is *fenced*: it was taken over while its process was
    frozen, and the token tells the job so; it does not count as a double run);
(b) every item interrupted by a SIGKILL ran again on another instance within the
    session timeout + 2 s;
(c) once faults stop and the last crashed session has expired, every item runs on every
    fire within 2 fires;
(d) no ``running``, ``failover``, ``failovering``, ``leader/sharding/processing`` or
    ``leader/failover/items`` node is left behind.

``test_nemesis.py`` extends this with network faults, graceful and operator stops and a
ZooKeeper ensemble, checked by ``tests.invariants``.
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shardcron.coordination.paths import JobPaths
from shardcron.registry import Registry
from shardcron.registry.zookeeper import ZooKeeperRegistry
from shardcron.testing.zookeeper import ZooKeeperServer, unique_namespace
from tests.cluster import Run, overlaps
from tests.conftest import zk_config
from tests.helpers import wait_until
from tests.invariants import find_stale
from tests.workers import Worker, Workers, registered, workers

ITEMS = 8
SESSION = 2.0
PATHS = JobPaths("ledger")
JOB = {
    "ledger": {
        "callable": "tests.jobs:ledger",
        "cron": "* * * * * ?",
        "shardingTotalCount": ITEMS,
        "failover": True,
    }
}
CHECK = {"SHARDCRON_CHECK_CLAIM": "1"}


@pytest.fixture
def server() -> Iterator[ZooKeeperServer]:
    own = ZooKeeperServer()
    own.start()
    try:
        yield own
    finally:
        own.stop()


class Faults:
    def __init__(self, w: Workers, admin: Registry, seed: int) -> None:
        self.w = w
        self.admin = admin
        self.random = random.Random(seed)
        self.next_id = 1
        self.kills: list[tuple[str, float]] = []  # (instance, time)
        self.stalled: set[str] = set()
        self.injected: list[str] = []

    def spawn(self) -> Worker:
        instance = f"127.0.0.{self.next_id % 4 + 1}@-@{6000 + self.next_id}"
        self.next_id += 1
        worker = self.w.start(instance, CHECK)
        wait_until(lambda: registered(self.admin, "ledger", instance), timeout=30, what=instance)
        return worker

    def live(self) -> list[Worker]:
        return [w for w in self.w.workers.values() if w.alive() and w.instance not in self.killed()]

    def killed(self) -> set[str]:
        return {instance for instance, _ in self.kills}

    def busy(self, worker: Worker) -> bool:
        return any(r.instance == worker.instance for r in self.w.interrupted())

    def kill(self, worker: Worker, why: str) -> None:
        wait_until(lambda: self.busy(worker), timeout=10, what=f"{worker.instance} mid-item")
        worker.kill(signal.SIGKILL)
        self.kills.append((worker.instance, time.time()))
        self.injected.append(f"SIGKILL {why} {worker.instance}")

    def leader(self) -> Worker | None:
        value = (self.admin.get(PATHS.election_instance) or b"").decode()
        return next((w for w in self.live() if w.instance == value), None)

    def settle(self, seconds: float) -> None:
        deadline = time.time() + seconds
        wait_until(lambda: time.time() > deadline, timeout=seconds + 1)  # let fires happen


def end_of(run: Run, kills: dict[str, float]) -> Run:
    """A killed process's unfinished run ended when the process died."""
    if run.end == float("inf") and run.instance in kills:
        return Run(run.instance, run.item, run.start, kills[run.instance], run.token, run.source)
    return run


def test_fault_injection_suite(server: ZooKeeperServer, tmp_path: Path) -> None:
    admin = ZooKeeperRegistry(zk_config(server, unique_namespace()))
    admin.start()
    with workers(
        tmp_path, server.connect_string, admin.namespace, JOB, int(SESSION * 1000), hold=0.6
    ) as w:
        f = Faults(w, admin, seed=7)
        for _ in range(4):
            f.spawn()
        f.settle(3)

        f.kill(f.random.choice(f.live()), "worker")
        f.settle(SESSION + 2)
        f.spawn()  # restart
        leader = f.leader()
        assert leader is not None
        f.spawn()  # a membership change: the leader must reshard at the next fire...
        f.kill(leader, "leader mid-sharding")  # ...and dies first
        f.settle(SESSION + 2)

        stalled = f.random.choice(f.live())
        wait_until(lambda: f.busy(stalled), timeout=10, what="a stalled worker mid-item")
        stalled.kill(signal.SIGSTOP)  # frozen past its session timeout: forced expiry
        f.settle(SESSION + 1.5)
        stalled.kill(signal.SIGCONT)
        f.injected.append(f"SIGSTOP {SESSION + 1.5:.1f}s (session expiry) {stalled.instance}")
        f.settle(3)

        server.stop()
        f.settle(1.0)
        server.start()
        f.injected.append("ZooKeeper server restart")
        f.settle(3)

        f.kill(f.random.choice(f.live()), "worker")
        last_fault = time.time()
        wait_until(lambda: time.time() > last_fault + SESSION + 3)  # the last session expires
        calm = time.time()
        f.settle(6)
        ledger = w.records()
        w.stop_all()

    kills = dict(f.kills)
    runs = [end_of(r, kills) for r in w.runs(unfinished=True)]
    fenced = {
        (rec["instance"], rec["item"], rec["start"])
        for rec in ledger
        if rec["phase"] == "end" and rec.get("current") is False
    }
    honest = [r for r in runs if (r.instance, r.item, r.start) not in fenced]

    # (a) never two instances at once (fenced stale runs excluded, see the module docstring)
    double = overlaps(honest)

    # (b) every SIGKILL-interrupted item ran again elsewhere within session + 2 s
    delays = []
    for run in runs:
        if run.instance in kills and run.end == kills[run.instance] and run.start < run.end:
            again = [
                r.start - run.end
                for r in runs
                if r.item == run.item and r.instance != run.instance and r.start > run.end
            ]
            delays.append(min(again, default=float("inf")))

    # (c) after the calm sets in, from the third fire on, every fire runs every item
    by_fire: dict[int, set[int]] = {}
    for run in runs:
        if run.start >= calm:
            by_fire.setdefault(int(run.start), set()).add(run.item)
    fires = sorted(by_fire)[2:-1]  # skip 2 fires of grace, and the last (cut by the stop)
    incomplete = {s: sorted(by_fire[s]) for s in fires if by_fire[s] != set(range(ITEMS))}

    # (d) nothing stale in the registry
    stale = find_stale(admin, PATHS, ITEMS)
    admin.close()

    print(
        f"\nfault injection: {len(f.injected)} faults ({'; '.join(f.injected)}); "
        f"{len(runs)} item runs over {len({int(r.start) for r in runs})} fires; "
        f"{len(fenced)} fenced stale runs; overlaps {len(double)}; "
        f"interrupted by SIGKILL {len(delays)}, lost {sum(d == float('inf') for d in delays)}, "
        f"max failover delay {max(delays, default=0):.2f}s; "
        f"calm fires checked {len(fires)}, incomplete {len(incomplete)}; stale nodes {len(stale)}"
    )
    assert len(f.injected) >= 5
    assert double == []
    assert delays and max(delays) <= SESSION + 2
    assert len(fires) >= 3 and incomplete == {}
    assert stale == []
