"""Worker processes (``shardcron run``) killed with SIGKILL, against a real ZooKeeper."""

from __future__ import annotations

import re
import time
from pathlib import Path

from shardcron.coordination.paths import JobPaths
from shardcron.registry.zookeeper import ZooKeeperRegistry
from shardcron.testing.zookeeper import ZooKeeperServer, unique_namespace
from tests.cluster import overlaps
from tests.conftest import zk_config
from tests.helpers import wait_until
from tests.workers import registered, workers

A, B, C, D = (f"127.0.0.{n}@-@{2000 + n}" for n in range(1, 5))
SESSION_MS = 2000


def job(items: int, **extra: object) -> dict[str, dict[str, object]]:
    return {
        "ledger": {
            "callable": "tests.jobs:ledger",
            "cron": "* * * * * ?",
            "shardingTotalCount": items,
            **extra,
        }
    }


def test_sigkilled_worker_items_run_on_the_others_once_its_session_expires(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    namespace = unique_namespace()
    admin = ZooKeeperRegistry(zk_config(zookeeper, namespace))
    admin.start()
    try:
        with workers(
            tmp_path, zookeeper.connect_string, namespace, job(6), SESSION_MS, hold=0.2
        ) as w:
            for instance in (A, B, C):
                w.start(instance)
            wait_until(
                lambda: all(registered(admin, "ledger", i) for i in (A, B, C)),
                timeout=30,
                what="3 workers",
            )
            wait_until(
                lambda: {r.instance for r in w.runs()} == {A, B, C},
                timeout=15,
                what="items on all three",
            )
            victim_items = {r.item for r in w.runs() if r.instance == B}
            w.workers[B].kill()
            killed = time.time()
            wait_until(
                lambda: not registered(admin, "ledger", B), timeout=10, what="B's session to expire"
            )
            expired = time.time()
            wait_until(
                lambda: (
                    victim_items
                    <= {r.item for r in w.runs() if r.start > expired and r.instance != B}
                ),
                timeout=10,
                what="B's items on A and C",
            )
            moved = [
                r
                for r in w.runs()
                if r.start > killed and r.item in victim_items and r.instance != B
            ]
            first = min(r.start for r in moved)
            assert first - killed < SESSION_MS / 1000 + 3
            assert overlaps(w.runs()) == []
            # The fires of B's items between the kill and the takeover ran nowhere: the
            # instances that took them over recorded them, each fire named by its second.
            said = [
                int(m.group(1))
                for i in (A, C)
                for m in re.finditer(
                    r"missed (\d+) fire\(s\) from \S+ while their owner was lost",
                    w.workers[i].output(),
                )
            ]
            assert said, "the fires B's items missed were recorded by A or C"
    finally:
        admin.close()


def test_killed_leader_is_replaced_and_the_new_leader_reshards(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    namespace = unique_namespace()
    paths = JobPaths("ledger")
    admin = ZooKeeperRegistry(zk_config(zookeeper, namespace))
    admin.start()
    try:
        with workers(tmp_path, zookeeper.connect_string, namespace, job(4), SESSION_MS) as w:
            w.start(A)
            wait_until(
                lambda: admin.get(paths.election_instance) == A.encode(), timeout=30, what="A leads"
            )
            w.start(B)
            w.start(C)
            wait_until(
                lambda: {r.instance for r in w.runs()} >= {B, C},
                timeout=30,
                what="B and C running items",
            )
            w.workers[A].kill()
            wait_until(
                lambda: (admin.get(paths.election_instance) or b"").decode() in (B, C),
                timeout=15,
                what="a new leader (B or C)",
            )
            w.start(D)
            wait_until(lambda: registered(admin, "ledger", D), timeout=30, what="D registered")
            joined = time.time()
            wait_until(
                lambda: any(r.instance == D and r.start > joined for r in w.runs()),
                timeout=15,
                what="D gets items",
            )
            assert overlaps(w.runs()) == []
    finally:
        admin.close()
