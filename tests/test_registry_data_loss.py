"""A ZooKeeper that lost its data gets its workers back (issue 55, case 1).

A server whose data directory is gone (``shardcron zookeeper`` keeps none across a
restart; an ensemble rebuilt, or restored from a backup) refuses every session that has
seen later transactions than it has: kazoo retries such a session for ever. The workers
here are real ``shardcron run`` processes, each with its own session, on a ZooKeeper the
test restarts without its data.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from shardcron.config.registry import RegistryConfig
from shardcron.coordination.paths import JobPaths
from shardcron.registry.zookeeper import ZooKeeperRegistry
from shardcron.testing.zookeeper import ZooKeeperServer, unique_namespace
from tests.helpers import wait_until
from tests.workers import workers

pytestmark = pytest.mark.zookeeper

A, B = "127.0.0.1@-@5101", "127.0.0.2@-@5102"
JOBS = {"ledger": {"callable": "tests.jobs:ledger", "cron": "* * * * * ?", "shardingTotalCount": 2}}


def test_workers_run_again_after_zookeeper_lost_its_data(tmp_path: Path) -> None:
    namespace = unique_namespace("loss")
    with ZooKeeperServer() as zk, workers(tmp_path, zk.connect_string, namespace, JOBS) as w:
        for instance in (A, B):
            w.start(instance)
        wait_until(lambda: {r.instance for r in w.runs()} == {A, B}, 30, "runs on both")

        zk.stop()
        shutil.rmtree(zk.workdir / "data")  # as a rebuilt server, or a restore, comes up
        zk.start()
        back = time.time()

        # Every item runs again, on the live workers, from their new sessions.
        wait_until(
            lambda: {r.item for r in w.runs() if r.start > back} == {0, 1},
            30,
            "runs of both items after the restart",
        )
        config = RegistryConfig(servers=zk.connect_string, namespace=namespace)
        admin = ZooKeeperRegistry(config, create_namespace=False)
        admin.start()
        try:
            assert admin.get(JobPaths("ledger").config) is not None  # written again
        finally:
            admin.close()
        for instance in (A, B):
            # One line names the cause (a fire cut short by the stop may report its own).
            lines = w.workers[instance].output().splitlines()
            errors = [line for line in lines if " ERROR shardcron.registry." in line]
            assert len(errors) == 1, errors
            assert "lost its data or was restored from a backup" in errors[0]
            assert w.workers[instance].alive()
