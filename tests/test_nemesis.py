"""Real-ZooKeeper nemesis: ``shardcron run`` workers under network and operator faults.

Extends the multi-process fault suite (``test_fault_injection.py``): workers of a
failover-enabled job that fires every second append every item run to one ledger, faults are
injected while they fire, and ``tests.invariants`` then checks no overlap, no lost item-fire,
no stuck job and no stale node, and prints one summary line per scenario with the longest
recovery. The scenarios:

* network faults, each worker behind its own TCP proxy: blackholes of 2 to 6 s (a follower's
  link, then the leader's) and connection resets (a follower's, the leader's, the leader's
  as a worker joins, everyone's);
* a graceful stop (SIGTERM) whose items outlast the grace period;
* operator shutdowns (``Admin.shutdown``) of a busy follower, then of the busy leader;
* a 3-server ensemble where a follower, then the ensemble's leader, is killed and restarted
  while workers fire: sessions move to the survivors, none is lost.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shardcron.config.registry import RegistryConfig
from shardcron.coordination.paths import JobPaths
from shardcron.operations.admin import Admin
from shardcron.registry import Registry
from shardcron.registry.zookeeper import ZooKeeperRegistry
from shardcron.testing.ensemble import ZooKeeperEnsemble
from shardcron.testing.zookeeper import ZooKeeperServer, unique_namespace
from tests.conftest import FIGURES
from tests.helpers import wait_until
from tests.invariants import Verdict, find_stale, judge
from tests.workers import Worker, Workers, registered, workers

SESSION = 2.0
WINDOW = SESSION + 3  # the failover window: session expiry, then a fire or two
PATHS = JobPaths("ledger")
CHECK = {"SHARDCRON_CHECK_CLAIM": "1"}
# Picks the faulted workers and blackhole lengths; another seed: SHARDCRON_NEMESIS_SEED=N.
SEED = int(os.environ.get("SHARDCRON_NEMESIS_SEED", "12"))


def job(items: int) -> dict[str, dict[str, object]]:
    return {
        "ledger": {
            "callable": "tests.jobs:ledger",
            "cron": "* * * * * ?",
            "shardingTotalCount": items,
            "failover": True,
            "misfire": True,
        }
    }


def registry_for(servers: str, session: float = SESSION) -> Registry:
    registry = ZooKeeperRegistry(
        RegistryConfig(
            servers=servers,
            namespace=unique_namespace(),
            session_timeout_ms=int(session * 1000),
            connection_timeout_ms=10000,
            base_sleep_ms=100,
            max_sleep_ms=500,
        )
    )
    registry.start()
    return registry


@pytest.fixture
def admin(zookeeper: ZooKeeperServer) -> Iterator[Registry]:
    registry = registry_for(zookeeper.connect_string, session=10)
    try:
        yield registry
    finally:
        registry.close()


class Nemesis:
    """Starts workers, injects faults into them, and lets the job fire in between."""

    def __init__(self, w: Workers, admin: Registry, items: int, seed: int = SEED) -> None:
        self.w = w
        self.admin = admin
        self.items = items
        self.seed = seed
        self.random = random.Random(seed)
        self.faults: list[str] = []
        self.begin = time.time()
        # Where a worker was cut off from ZooKeeper long enough to lose its session: only
        # there may a run whose claim was lost overlap the run that took its item over.
        self.cut_off: dict[str, list[tuple[float, float]]] = {}

    def spawn(self, count: int, args: tuple[str, ...] = ()) -> list[Worker]:
        """Start ``count`` workers at once (distinct IPs), and wait until all registered."""
        first = len(self.w.workers)
        # Each worker its own server IP, so an operator can shut one down by its IP.
        started = [
            self.w.start(
                f"127.0.0.{n + 1}@-@{7000 + n}", {**CHECK, "SHARDCRON_IP": f"127.0.0.{n + 1}"}, args
            )
            for n in range(first, first + count)
        ]
        wait_until(
            lambda: all(registered(self.admin, "ledger", x.instance) for x in started),
            timeout=30,
            what="workers registered",
        )
        return started

    def live(self) -> list[Worker]:
        return [x for x in self.w.workers.values() if x.alive()]

    def leader(self) -> Worker:
        def find() -> Worker | None:
            value = (self.admin.get(PATHS.election_instance) or b"").decode()
            return next((x for x in self.live() if x.instance == value), None)

        return wait_until(find, timeout=15, what="a leader among the live workers")

    def follower(self) -> Worker:
        leader = self.leader()
        return self.random.choice([x for x in self.live() if x is not leader])

    def busy(self, worker: Worker) -> Worker:
        """Wait until ``worker`` is mid-item, so the fault lands on running work."""
        wait_until(
            lambda: any(r.instance == worker.instance for r in self.w.interrupted()),
            timeout=10,
            what=f"{worker.instance} mid-item",
        )
        return worker

    def complete_fire(self, timeout: float = 20.0) -> None:
        """Wait until every item has started since now (the job runs normally)."""
        since = time.time()
        wait_until(
            lambda: (
                {r.item for r in self.w.runs(unfinished=True) if r.start >= since}
                == set(range(self.items))
            ),
            timeout=timeout,
            what="every item running",
        )

    def run_for(self, seconds: float) -> None:
        """Let the workload run ``seconds`` (a wall-clock stretch, not a synchronisation)."""
        deadline = time.time() + seconds
        wait_until(lambda: time.time() >= deadline, timeout=seconds + 1, what="time to pass")

    def mark(self) -> float:
        """Faults start now: the invariants are checked from here; times are shown from here."""
        self.begin = time.time()
        return self.begin

    def note(self, fault: str) -> None:
        self.faults.append(f"{fault} at {time.time() - self.begin:.1f}s")

    def blackhole(self, worker: Worker, seconds: float, role: str) -> None:
        assert worker.proxy is not None
        worker.proxy.blackhole(seconds)
        # Then it reconnects, with its session or anew.
        self.cut(worker, time.time(), time.time() + seconds + SESSION)
        self.note(f"blackhole {role} {worker.instance} {seconds:.1f}s")
        self.run_for(seconds)
        wait_until(
            lambda: registered(self.admin, "ledger", worker.instance),
            timeout=WINDOW + 5,
            what=f"{worker.instance} registered again after its blackhole",
        )

    def reset(self, *targets: Worker, role: str) -> None:
        count = 0
        for worker in targets:
            assert worker.proxy is not None
            count += worker.proxy.reset()
            self.cut(worker, time.time(), time.time() + SESSION)  # until it has reconnected
        names = targets[0].instance if len(targets) == 1 else f"({len(targets)} workers)"
        self.note(f"reset {role} {names} ({count} connections)")

    def cut(self, worker: Worker, start: float, end: float) -> None:
        """Note that ``worker`` was cut off from ZooKeeper (may fail requests) in that span."""
        self.cut_off.setdefault(worker.instance, []).append((start, end))

    def verdict(
        self, name: str, begin: float, stuck_window: float, window: float = WINDOW
    ) -> Verdict:
        """Judge the ledger up to now, then stop every worker and look for stale nodes."""
        end = time.time()
        verdict = judge(
            f"{name} (seed {self.seed})",
            self.w,
            items=self.items,
            begin=begin,
            end=end,
            window=window,
            stuck_window=stuck_window,
            faults=self.faults,
            cut_off=self.cut_off,
        )
        self.w.stop_all()
        verdict.stale = find_stale(self.admin, PATHS, self.items)
        FIGURES.append(verdict.summary())
        return verdict


def test_network_faults_through_proxies(
    zookeeper: ZooKeeperServer, admin: Registry, tmp_path: Path
) -> None:
    items = 8
    with workers(
        tmp_path, zookeeper.connect_string, admin.namespace, job(items), 2000, 0.6, proxied=True
    ) as w:
        n = Nemesis(w, admin, items)
        n.spawn(4)
        n.complete_fire()
        begin = n.mark()

        n.blackhole(n.busy(n.follower()), n.random.uniform(2, 6), "follower")
        n.run_for(1)
        n.reset(n.busy(n.follower()), role="follower")
        n.run_for(1)
        n.blackhole(n.busy(n.leader()), n.random.uniform(2, 6), "leader")
        n.run_for(1)
        n.reset(n.busy(n.leader()), role="leader")
        n.run_for(1)
        n.spawn(1)  # a membership change: the leader reshards at the next fire...
        n.reset(n.leader(), role="leader at a membership change")  # ...its link reset meanwhile
        n.run_for(1)
        n.reset(*n.live(), role="every worker")
        n.run_for(WINDOW + 2)  # calm: every item must run on the last fires

        verdict = n.verdict("network faults", begin, stuck_window=3)
    assert verdict.ok, verdict.problems()


def test_graceful_stop_with_items_longer_than_the_grace(
    zookeeper: ZooKeeperServer, admin: Registry, tmp_path: Path
) -> None:
    items = 6
    with workers(tmp_path, zookeeper.connect_string, admin.namespace, job(items), 2000, 2.5) as w:
        n = Nemesis(w, admin, items)
        n.spawn(2)
        (victim,) = n.spawn(1, args=("--grace", "1"))  # the others finish their items at the end
        n.complete_fire()
        begin = n.mark()

        n.busy(victim).kill(signal.SIGTERM)
        n.note(f"SIGTERM {victim.instance} (grace 1s, items of 2.5s)")
        wait_until(lambda: victim.exited is not None, timeout=15, what="the stopped worker exits")
        n.run_for(WINDOW + 2)

        verdict = n.verdict("graceful stop past the grace", begin, stuck_window=6)
    assert verdict.ok, verdict.problems()


# A shut-down worker hands its items over only once its runs have ended (nothing runs twice),
# so a fire that was already waiting behind a 2.5 s run on it (misfire) can wait for that run,
# for the victim's other run of 2.5 s, then for the first fire on the new layout (1 s).
SHUTDOWN_WINDOW = 2.5 + 2.5 + 1 + 1


def test_operator_shutdown_with_failover_on(
    zookeeper: ZooKeeperServer, admin: Registry, tmp_path: Path
) -> None:
    items = 6
    operator = Admin(admin)
    with workers(tmp_path, zookeeper.connect_string, admin.namespace, job(items), 2000, 2.5) as w:
        n = Nemesis(w, admin, items)
        n.spawn(4)
        n.complete_fire()
        begin = n.mark()

        for role, pick in (("follower", n.follower), ("leader", n.leader)):
            victim = n.busy(pick())
            operator.shutdown("ledger", server=victim.instance.partition("@-@")[0])
            n.note(f"operator shutdown of the {role} {victim.instance} (items of 2.5s)")
            n.run_for(WINDOW)
        n.run_for(SHUTDOWN_WINDOW - WINDOW + 1)  # so the last shutdown's fires are judged too

        verdict = n.verdict(
            "operator shutdown with failover", begin, stuck_window=6, window=SHUTDOWN_WINDOW
        )
    assert verdict.ok, verdict.problems()


def test_ensemble_member_and_leader_killed_and_restarted(tmp_path: Path) -> None:
    items = 6
    session = 3.0
    with ZooKeeperEnsemble(3) as ensemble:
        admin = registry_for(ensemble.connect_string, session=10)
        try:
            with workers(
                tmp_path, ensemble.connect_string, admin.namespace, job(items), 3000, 0.6
            ) as w:
                n = Nemesis(w, admin, items)
                started = n.spawn(3)
                sessions = {x.instance: owner(admin, x.instance) for x in started}
                n.complete_fire()
                begin = n.mark()

                for role in ("follower", "leader"):
                    # The busiest follower, so sessions have to move; the leader as it is.
                    members = [ensemble.leader()] if role == "leader" else ensemble.followers()
                    member = max(members, key=clients)
                    count = clients(member)
                    member.stop(kill=True)
                    killed = time.time()
                    n.note(f"SIGKILL ZooKeeper {role} :{member.port} ({count} clients)")
                    ensemble.wait_quorum()
                    n.run_for(session)
                    member.start()
                    ensemble.wait_quorum()
                    n.note(f"ZooKeeper {role} :{member.port} back")
                    for worker in started:  # any of them may have been on it
                        n.cut(worker, killed, time.time() + session)
                    n.run_for(1)
                n.run_for(WINDOW + 1)
                after = {x.instance: owner(admin, x.instance) for x in started}

                verdict = n.verdict(
                    "ensemble member and leader restarts", begin, 3, window=session + 3
                )
        finally:
            admin.close()
    moved = {i for i in sessions if after[i] != sessions[i]}
    FIGURES.append(f"ensemble: sessions kept {len(sessions) - len(moved)} of {len(sessions)}")
    assert moved == set(), f"sessions lost (the instance re-registered): {sorted(moved)}"
    assert verdict.ok, verdict.problems()


def owner(admin: Registry, instance: str) -> int | None:
    stat = admin.stat(PATHS.instance(instance))
    return None if stat is None else stat.ephemeral_owner


def clients(server: ZooKeeperServer) -> int:
    """Client connections the server holds now (its ``mntr``)."""
    return int(server.mntr().get("zk_num_alive_connections", "0"))
