"""Registry faults: a ZooKeeper outage, an expired session, a registry down at start-up.

Each test runs its own ZooKeeper server, so stopping it disturbs nobody else.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from kazoo.client import KazooState

from shardcron.config.job import JobConfig
from shardcron.coordination.paths import JobPaths
from shardcron.registry.zookeeper import ZooKeeperRegistry
from shardcron.scheduler.process import Scheduler
from shardcron.testing.zookeeper import ZooKeeperServer, expire_session, unique_namespace
from tests.cluster import Recorder, cluster
from tests.conftest import zk_config
from tests.helpers import wait_until

A = "127.0.0.1@-@5001"
PATHS = JobPaths("faults")
CONFIG = JobConfig(job_name="faults", cron="* * * * * ?", sharding_total_count=2)


@pytest.fixture
def own_zookeeper() -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_outage_pauses_fires_and_reconnecting_resumes_them(own_zookeeper: ZooKeeperServer) -> None:
    recorder = Recorder()
    with cluster(own_zookeeper, CONFIG, recorder, session_ms=8000) as c:
        scheduler = c.start(A)
        registry = scheduler.registry
        assert isinstance(registry, ZooKeeperRegistry)
        # The worker may reconnect before start() below sees the server serve: the outage
        # ends for it at its own reconnection, which kazoo's thread notes before anything
        # else hears of it (a claim settled right then may start its items at once).
        reconnected: list[float] = []
        registry.client.add_listener(
            lambda state: reconnected.append(time.time()) if state == KazooState.CONNECTED else None
        )
        wait_until(lambda: len(recorder.runs) >= 2, timeout=10, what="fires before the outage")
        session = registry.session_id
        own_zookeeper.stop()
        down = time.time()
        wait_until(lambda: not registry.connected, timeout=10, what="SUSPENDED")
        wait_until(lambda: time.time() > down + 3, what="a 3 s outage")  # the fault itself
        own_zookeeper.start()
        up = min([time.time(), *(t for t in reconnected if t > down)])
        wait_until(lambda: recorder.since(up), timeout=15, what="fires after reconnecting")
        started_while_down = [r for r in recorder.runs if down + 1 < r.start < up]
        assert started_while_down == []
        assert registry.session_id == session  # RECONNECTED, not a new session
        # The admin client has its own session and backoff: it may reconnect after the worker.
        wait_until(lambda: c.admin.connected, timeout=15, what="the admin client reconnected")
        assert c.admin.stat(PATHS.instance(A)) is not None


def test_expired_session_rebuilds_everything_and_keeps_running(
    own_zookeeper: ZooKeeperServer,
) -> None:
    recorder = Recorder()
    with cluster(own_zookeeper, CONFIG, recorder, session_ms=3000) as c:
        scheduler = c.start(A)
        wait_until(lambda: len(recorder.runs) >= 2, timeout=10, what="fires before expiry")
        old_session = scheduler.registry.session_id
        registry = scheduler.registry
        assert isinstance(registry, ZooKeeperRegistry)
        expire_session(registry.client)
        expired = time.time()
        wait_until(lambda: registry.session_id not in (0, old_session), timeout=15)
        wait_until(lambda: c.admin.stat(PATHS.instance(A)), timeout=15, what="instance node back")
        wait_until(lambda: c.admin.get(PATHS.election_instance) == A.encode(), timeout=15)
        wait_until(
            lambda: {r.item for r in recorder.since(expired + 1)} == {0, 1},
            timeout=15,
            what="both items firing again",
        )


def test_registry_down_at_start_up_is_retried_not_fatal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ZooKeeperServer(port=port)  # nothing listens there yet
    ran: list[int] = []
    registry = ZooKeeperRegistry(zk_config(server, unique_namespace()))
    scheduler = Scheduler(registry, instance_id=A)
    scheduler.add_job(CONFIG, lambda ctx: ran.append(ctx.sharding_item))
    caplog.set_level(logging.ERROR, logger="shardcron.scheduler")
    starter = threading.Thread(target=scheduler.start)
    starter.start()
    try:
        wait_until(
            lambda: any("registry unreachable" in r.getMessage() for r in caplog.records),
            timeout=30,
            what="a clear error while the registry is down",
        )
        assert starter.is_alive()  # still retrying, not crashed
        server.start()
        starter.join(timeout=30)
        wait_until(lambda: ran, timeout=15, what="the job to run once the registry is up")
    finally:
        starter.join(timeout=30)
        scheduler.stop()
        server.stop()


def test_a_worker_stops_within_its_grace_while_zookeeper_is_down(
    own_zookeeper: ZooKeeperServer, caplog: pytest.LogCaptureFixture
) -> None:
    """SIGTERM during an outage (a host shutting down, a rolling restart): a request made
    while kazoo reconnects waited for the connection, however long, so deregistering
    hung the stop for good. Now the stop leaves the clean-up to the session's end."""
    jobs = [
        JobConfig(job_name=f"down{n}", cron="* * * * * ?", sharding_total_count=1)
        for n in range(20)
    ]
    registry = ZooKeeperRegistry(zk_config(own_zookeeper, unique_namespace(), session_ms=8000))
    scheduler = Scheduler(registry, instance_id=A)
    ran: list[str] = []
    for config in jobs:
        scheduler.add_job(config, lambda ctx: ran.append(ctx.job_name))
    scheduler.start()
    wait_until(lambda: len(set(ran)) == len(jobs), timeout=15, what="every job running")
    own_zookeeper.stop()
    wait_until(lambda: not registry.connected, timeout=10, what="the connection lost")
    began = time.monotonic()
    stopper = threading.Thread(target=scheduler.stop, args=(2.0,), daemon=True)
    with caplog.at_level(logging.WARNING, logger="shardcron"):
        stopper.start()
        stopper.join(timeout=20)
    assert not stopper.is_alive(), "stop() still waiting for ZooKeeper after 20 s"
    assert time.monotonic() - began < 10
    unreachable = [r for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(unreachable) == 1, [r.getMessage() for r in caplog.records]
