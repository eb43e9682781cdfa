"""The admin API against a real ZooKeeper with running instances: each operation's writes,
its effect on the workers, and the statistics of layouts written by other processes."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from shardcron.config.instancerecord import instance_yaml
from shardcron.config.job import JobConfig
from shardcron.coordination import deregistration
from shardcron.coordination.deregistration import Leaving
from shardcron.coordination.paths import JobPaths
from shardcron.coordination.stopmark import parse_stopped
from shardcron.errors import ConfigError, JobNotFoundError, ServerNotFoundError
from shardcron.model import ServerStatus
from shardcron.operations.admin import Admin, Write
from shardcron.operations.jobstats import ItemStatus, JobStatus, item_status, job_status
from shardcron.registry import Op, OpResult, Registry
from shardcron.registry.memory import MemoryRegistry
from shardcron.registry.zookeeper import ZooKeeperRegistry
from shardcron.testing.zookeeper import ZooKeeperServer, unique_namespace
from tests.cluster import Cluster, Recorder, Run, cluster
from tests.conftest import zk_config
from tests.helpers import wait_until
from tests.workers import registered, workers

A, B, C = (f"127.0.0.{n}@-@{4100 + n}" for n in range(1, 4))
IP_A, IP_B, IP_C = "127.0.0.1", "127.0.0.2", "127.0.0.3"
EVERY_SECOND = "* * * * * ?"
ORDERS = JobPaths("orders")


def every_second(items: int) -> JobConfig:
    return JobConfig(job_name="orders", cron=EVERY_SECOND, sharding_total_count=items)


def fires(runs: list[Run], since: float) -> list[dict[int, str]]:
    """item -> instance per fire (runs grouped by the second they started in), oldest first."""
    by_second: dict[int, dict[int, str]] = {}
    for run in runs:
        if run.start >= since:
            by_second.setdefault(int(run.start), {})[run.item] = run.instance
    return [by_second[second] for second in sorted(by_second)]


def full_fire_on(recorder: Recorder, since: float, items: int, instances: set[str]) -> bool:
    """A fire since ``since`` ran every item, all of them on ``instances``."""
    return any(
        len(fire) == items and set(fire.values()) <= instances
        for fire in fires(recorder.runs, since)
    )


def started(c: Cluster, recorder: Recorder, items: int, *instances: str) -> Admin:
    for instance in instances:
        c.start(instance)
    wait_until(
        lambda: (
            full_fire_on(recorder, time.time() - 1, items, set(instances))
            and {r.instance for r in recorder.runs} == set(instances)
        ),
        timeout=15,
        what=f"items running on {instances}",
    )
    return Admin(c.admin)


# -- operations with running instances --------------------------------------------------


def test_trigger_runs_a_one_off_job_on_every_instance(zookeeper: ZooKeeperServer) -> None:
    recorder = Recorder()
    with cluster(zookeeper, JobConfig(job_name="report", sharding_total_count=4), recorder) as c:
        c.start(A)
        c.start(B)
        admin = Admin(c.admin)
        # Java's quirk, kept: a job that has never been sharded shows SHARDING_FLAG.
        assert admin.job("report").status is JobStatus.SHARDING_FLAG
        assert admin.next_fire("report") is None

        writes = admin.trigger("report")

        assert sorted(writes, key=lambda w: w.path) == [
            Write(f"/report/trigger/{A}", ""),
            Write(f"/report/trigger/{B}", ""),
        ]
        wait_until(lambda: len(recorder.runs) >= 4, what="the triggered items")
        assert sorted(r.item for r in recorder.runs) == [0, 1, 2, 3]
        assert {r.instance for r in recorder.runs} == {A, B}
        wait_until(lambda: c.admin.children("/report/trigger") == [], what="both triggers consumed")
        assert admin.job("report").status is JobStatus.OK


def test_disabling_a_server_moves_its_items_and_enabling_brings_them_back(
    zookeeper: ZooKeeperServer,
) -> None:
    recorder = Recorder()
    with cluster(zookeeper, every_second(4), recorder) as c:
        admin = started(c, recorder, 4, A, B)

        assert admin.disable("orders", IP_B) == [Write(f"/orders/servers/{IP_B}", "DISABLED")]
        moment = time.time()
        wait_until(
            lambda: full_fire_on(recorder, moment, 4, {A}), timeout=10, what="all items on A"
        )
        wait_until(
            lambda: {i.instance_id for i in admin.sharding("orders")} == {A},
            what="sharding on A",
        )
        assert [(j.job_name, j.status, j.instance_count) for j in admin.server_jobs(IP_B)] == [
            ("orders", JobStatus.DISABLED, 1)
        ]
        by_ip = {s.server_ip: s for s in admin.servers()}
        assert (by_ip[IP_A].disabled_jobs_num, by_ip[IP_B].disabled_jobs_num) == (0, 1)
        statuses = {i.instance_id: i.server_status for i in admin.instances("orders")}
        assert statuses == {A: ServerStatus.ENABLED, B: ServerStatus.DISABLED}
        assert admin.job("orders").status is JobStatus.OK

        assert admin.enable("orders", IP_B) == [Write(f"/orders/servers/{IP_B}", "ENABLED")]
        moment = time.time()
        wait_until(
            lambda: any(
                len(f) == 4 and set(f.values()) == {A, B} for f in fires(recorder.runs, moment)
            ),
            timeout=10,
            what="items back on both",
        )


def test_disabling_a_job_everywhere_stops_leadership_until_enabled(
    zookeeper: ZooKeeperServer,
) -> None:
    recorder = Recorder()
    with cluster(zookeeper, every_second(2), recorder) as c:
        admin = started(c, recorder, 2, A, B)

        writes = admin.disable("orders")

        assert sorted(w.path for w in writes) == [ORDERS.server(IP_A), ORDERS.server(IP_B)]
        assert {w.value for w in writes} == {"DISABLED"}
        assert admin.job("orders").status is JobStatus.DISABLED
        assert admin.job("orders").next_fire is None  # it will not fire: no time to show
        # A leader whose server is disabled abdicates, and nobody may take over.
        wait_until(lambda: admin.leader("orders") is None, what="the leader to abdicate")

        admin.enable("orders")
        wait_until(lambda: admin.leader("orders") in (A, B), what="a new leader")
        moment = time.time()
        wait_until(lambda: full_fire_on(recorder, moment, 2, {A, B}), timeout=10, what="runs again")


def test_disabling_a_server_in_every_job(zookeeper: ZooKeeperServer) -> None:
    recorder = Recorder()
    with cluster(zookeeper, every_second(2), recorder) as c:
        c.start(A, JobConfig(job_name="other", sharding_total_count=1))
        admin = started(c, recorder, 2, B)

        writes = admin.disable(server=IP_B)
        assert writes == [Write(ORDERS.server(IP_B), "DISABLED")]  # "other" has no IP_B
        assert admin.enable(server=IP_A) == [Write(f"/other/servers/{IP_A}", "ENABLED")]
        with pytest.raises(ServerNotFoundError, match=r"10\.9\.9\.9"):
            admin.disable(server="10.9.9.9")
        with pytest.raises(ServerNotFoundError, match=r"its servers: 127\.0\.0\.2") as info:
            admin.disable("orders", "10.9.9.9")
        # Typed fields, for callers that act on the error rather than print it.
        assert (info.value.server, info.value.job) == ("10.9.9.9", "orders")
        assert IP_B in info.value.known


def test_shutdown_of_one_server_stops_the_job_on_its_instance(
    zookeeper: ZooKeeperServer,
) -> None:
    recorder = Recorder()
    with cluster(zookeeper, every_second(4), recorder) as c:
        admin = started(c, recorder, 4, A, B)

        assert admin.shutdown("orders", IP_B) == [Write(ORDERS.instance(B), None)]

        wait_until(lambda: "orders" not in c.schedulers[B].runtimes, what="B to stop the job")
        moment = time.time()
        wait_until(
            lambda: full_fire_on(recorder, moment, 4, {A}), timeout=10, what="all items on A"
        )
        assert [i.instance_id for i in admin.instances("orders")] == [A]
        assert c.admin.stat(ORDERS.instance(B)) is None  # it does not come back

        assert admin.shutdown("orders") == [Write(ORDERS.instance(A), None)]
        wait_until(lambda: "orders" not in c.schedulers[A].runtimes, what="A to stop the job")
        # Shut down on purpose is not a crash, and a stopped job has no next fire.
        wait_until(
            lambda: admin.job("orders").status is JobStatus.STOPPED, what="the job to be STOPPED"
        )
        assert admin.job("orders").next_fire is None


def test_workers_that_stop_cleanly_leave_a_stopped_job_not_a_crashed_one(
    zookeeper: ZooKeeperServer,
) -> None:
    recorder = Recorder()
    with cluster(zookeeper, every_second(4), recorder) as c:
        admin = started(c, recorder, 4, A, B)
        c.stop(A)
        assert admin.job("orders").status is not JobStatus.STOPPED  # B still runs it
        c.stop(B)
        brief = admin.job("orders")
        assert (brief.status, brief.instance_count, brief.next_fire) == (
            JobStatus.STOPPED,
            0,
            None,
        )
        # Only ids that still own items are kept, so the list stays short.
        assert set((c.admin.get(ORDERS.stopped) or b"").decode().split(",")) <= {A, B}


def test_a_disabled_item_is_skipped_until_enabled(zookeeper: ZooKeeperServer) -> None:
    recorder = Recorder()
    with cluster(zookeeper, every_second(3), recorder) as c:
        admin = started(c, recorder, 3, A, B)

        assert admin.disable_item("orders", 1) == [Write(ORDERS.disabled(1), "")]
        # Fires start on whole seconds; the one after next surely sees the flag.
        moment = float(int(time.time()) + 2)
        wait_until(
            lambda: sum(1 for f in fires(recorder.runs, moment) if {0, 2} <= set(f)) >= 2,
            timeout=10,
            what="two fires without item 1",
        )
        assert 1 not in {r.item for r in recorder.since(moment)}
        item = next(i for i in admin.sharding("orders") if i.item == 1)
        assert item.status is ItemStatus.DISABLED

        assert admin.enable_item("orders", 1) == [Write(ORDERS.disabled(1), None)]
        moment = time.time()
        wait_until(
            lambda: 1 in {r.item for r in recorder.since(moment)}, what="item 1 running again"
        )
        with pytest.raises(ConfigError, match=r"item: 3 is out of range 0..2"):
            admin.disable_item("orders", 3)


def test_a_config_update_reaches_the_workers_and_bad_values_are_not_written(
    zookeeper: ZooKeeperServer,
) -> None:
    recorder = Recorder()
    with cluster(zookeeper, every_second(2), recorder) as c:
        admin = started(c, recorder, 2, A, B)
        before = admin.config_yaml("orders")

        for settings, field in [
            ({"shardingTotalCount": "0"}, "shardingTotalCount"),
            ({"shardingTotalCount": "many"}, "shardingTotalCount"),
            ({"cron": "every minute"}, "cron"),
            ({"shardingTotalCont": "3"}, "shardingTotalCont"),
            ({"jobName": "x"}, "jobName"),
            ({"callable": "x:y"}, "callable"),
        ]:
            with pytest.raises(ConfigError) as caught:
                admin.update_config("orders", settings)
            assert caught.value.field == field
            assert caught.value.job == "orders"
        assert admin.config_yaml("orders") == before
        root_value = c.admin.get(ORDERS.root)

        updated = admin.update_config("orders", {"shardingTotalCount": "3", "description": "x"})

        assert updated.sharding_total_count == 3
        assert admin.config("orders") == updated
        assert admin.config_yaml("orders") == updated.to_yaml()
        assert c.admin.get(ORDERS.root) == root_value
        moment = time.time()
        wait_until(
            lambda: full_fire_on(recorder, moment, 3, {A, B}), timeout=10, what="3 items run"
        )
        assert admin.job("orders").description == "x"


def test_removing_a_job_stops_it_everywhere_and_deletes_its_tree(
    zookeeper: ZooKeeperServer,
) -> None:
    recorder = Recorder()
    with cluster(zookeeper, every_second(4), recorder) as c:
        admin = started(c, recorder, 4, A, B)
        leader = admin.leader("orders")

        writes = admin.remove_job("orders")

        assert writes[0] == Write(ORDERS.instance(leader or ""), None)  # the leader goes first
        assert writes[-1] == Write("/orders", None)
        wait_until(
            lambda: all("orders" not in s.runtimes for s in c.schedulers.values()),
            what="both instances to stop the job",
        )
        c.stop(A)
        c.stop(B)
        assert c.admin.stat("/orders") is None
        assert admin.jobs() == []
        with pytest.raises(JobNotFoundError, match="'orders' not found") as missing:
            admin.remove_job("orders")
        assert (missing.value.job, missing.value.known) == ("orders", [])


def test_removing_a_server_shuts_it_down_and_deletes_its_server_node(
    zookeeper: ZooKeeperServer,
) -> None:
    recorder = Recorder()
    with cluster(zookeeper, every_second(2), recorder) as c:
        admin = started(c, recorder, 2, A, B)

        writes = admin.remove_server(IP_B, "orders")

        assert writes == [Write(ORDERS.instance(B), None), Write(ORDERS.server(IP_B), None)]
        wait_until(lambda: "orders" not in c.schedulers[B].runtimes, what="B to stop the job")
        assert c.admin.children(ORDERS.servers) == [IP_A]
        assert [s.server_ip for s in admin.servers()] == [IP_A]


def test_unknown_jobs_are_reported_with_the_closest_name(zookeeper: ZooKeeperServer) -> None:
    recorder = Recorder()
    with cluster(zookeeper, JobConfig(job_name="orders", sharding_total_count=1), recorder) as c:
        c.start(A)
        admin = Admin(c.admin)
        for call in (
            admin.job,
            admin.overview,
            admin.config,
            admin.sharding,
            admin.instances,
            admin.trigger,
            admin.disable,
            admin.shutdown,
            admin.dump,
        ):
            with pytest.raises(JobNotFoundError, match="did you mean 'orders'"):
                call("order")
        with pytest.raises(JobNotFoundError, match="jobs: orders"):
            admin.update_config("payroll", {"description": "x"})
        with pytest.raises(ConfigError, match="name a job"):
            admin.shutdown()


# -- statistics of worker processes ------------------------------------------------------


@pytest.fixture
def registry(zookeeper: ZooKeeperServer) -> Iterator[Registry]:
    made = ZooKeeperRegistry(zk_config(zookeeper, unique_namespace()))
    made.start()
    try:
        yield made
    finally:
        made.close()


def test_statistics_read_the_layout_of_worker_processes(
    zookeeper: ZooKeeperServer, registry: Registry, tmp_path: Path
) -> None:
    jobs = {
        "ledger": {"callable": "tests.jobs:ledger", "cron": EVERY_SECOND, "shardingTotalCount": 4},
        # Items 4 and 5 exist only in this one, so its runs are told apart in the ledger.
        "oneoff": {"callable": "tests.jobs:ledger", "shardingTotalCount": 6},
    }
    with workers(tmp_path, zookeeper.connect_string, registry.namespace, jobs, 2000) as w:
        for instance in (A, B, C):
            w.start(instance)
        wait_until(
            lambda: all(registered(registry, j, i) for i in (A, B, C) for j in jobs),
            timeout=30,
            what="three workers",
        )
        wait_until(
            lambda: {r.instance for r in w.runs()} == {A, B, C}, timeout=15, what="runs on all"
        )
        admin = Admin(registry)

        briefs = {b.job_name: b for b in admin.jobs()}
        assert list(briefs) == ["ledger", "oneoff"]
        ledger = briefs["ledger"]
        assert (ledger.status, ledger.instance_count, ledger.sharding_total_count) == (
            JobStatus.OK,
            3,
            4,
        )
        assert ledger.cron == EVERY_SECOND
        assert ledger.next_fire is not None and ledger.next_fire > datetime.now(UTC)
        assert briefs["oneoff"].status is JobStatus.SHARDING_FLAG
        assert [(s.server_ip, s.instances, s.job_names) for s in admin.servers()] == [
            (IP_A, (A,), ("ledger", "oneoff")),
            (IP_B, (B,), ("ledger", "oneoff")),
            (IP_C, (C,), ("ledger", "oneoff")),
        ]

        view = admin.overview("ledger")
        assert [(i.instance_id, i.server_ip) for i in view.instances] == [
            (A, IP_A),
            (B, IP_B),
            (C, IP_C),
        ]
        assert view.leader in (A, B, C)
        assert [i.instance_id for i in view.instances if i.leader] == [view.leader]
        assert [i.item for i in view.items] == [0, 1, 2, 3]
        for item in view.items:
            assert item.instance_id in (A, B, C)
            assert item.server_ip == item.instance_id.split("@-@")[0]
            assert item.status in (ItemStatus.PENDING, ItemStatus.RUNNING)
        assert view.config.callable == "tests.jobs:ledger"

        admin.trigger("oneoff")
        wait_until(lambda: {4, 5} <= {r.item for r in w.runs()}, timeout=10, what="the one-off job")

        admin.shutdown("ledger", IP_C)
        moment = time.time() + 0.5
        wait_until(
            lambda: sum(1 for f in fires(w.runs(), moment) if len(f) == 4) >= 2,
            timeout=15,
            what="two full fires without C",
        )
        assert C not in {r.instance for r in w.runs() if r.start >= moment}
        assert w.workers[C].alive()  # the worker lives on; only the job stopped there
        assert registered(registry, "oneoff", C)
        assert not registered(registry, "ledger", C)


# -- the Java definitions, on hand-written layouts ------------------------------------------


def test_a_job_is_stopped_only_when_every_owner_stopped_on_purpose() -> None:
    assert job_status([], ["ENABLED"], {A, B}, {A, B}) is JobStatus.STOPPED
    assert job_status([], ["ENABLED"], {A, B}, {A}) is JobStatus.CRASHED  # B vanished
    assert job_status([], ["ENABLED"], {A}, set()) is JobStatus.CRASHED
    assert job_status([A], ["ENABLED"], {A}, {A}) is JobStatus.OK  # A came back


def test_status_of_a_java_layout_whose_owner_crashed_after_another_stopped(
    memory: Registry,
) -> None:
    paths = java_layout(memory)
    for instance in (A, B):
        memory.delete(paths.instance(instance))
    memory.put(paths.stopped, f"{A},{B}".encode())
    brief = Admin(memory).job("javaJob")
    assert (brief.status, brief.next_fire) == (JobStatus.CRASHED, None)  # C owns item 2
    memory.put(paths.stopped, f"{A},{B},{C}".encode())
    assert Admin(memory).job("javaJob").status is JobStatus.STOPPED


def test_a_stop_that_loses_the_race_to_a_fleet_of_stops_is_still_recorded() -> None:
    """A whole fleet stopping at once rewrites one ``stopped`` list, each write checked
    against the version it read: a stop can lose that race to every other instance."""
    rivals = [f"10.0.0.{n}@-@1" for n in range(20)]

    class Racing(MemoryRegistry):
        def transaction(self, ops: Sequence[Op]) -> list[OpResult]:
            if rivals:  # another stop lands between this one's read and its write
                current = self.get(paths.stopped) or b""
                self.put(paths.stopped, current + b"," + rivals.pop().encode())
            return super().transaction(ops)

    registry = Racing(namespace="admin")
    registry.start()
    paths = java_layout(registry)
    registry.put(paths.stopped, B.encode())
    cache = registry.tree_cache(paths.root)
    wait_until(lambda: cache.exists(paths.stopped), what="the cache")
    deregistration.remove(registry, [Leaving(paths, A, cache, operator=False)])
    assert not rivals
    # The rivals own no item: only A and B, owners, stay listed.
    assert parse_stopped(registry.get(paths.stopped)) == {A, B}


def test_job_status_follows_java() -> None:
    assert job_status([], ["ENABLED"], {A}) is JobStatus.CRASHED
    assert job_status([A], ["DISABLED", "DISABLED"], {A}) is JobStatus.DISABLED
    assert job_status([A], [], {A}) is JobStatus.DISABLED  # Java: all of zero servers
    assert job_status([A], ["DISABLED", "ENABLED"], set()) is JobStatus.SHARDING_FLAG
    assert job_status([A], ["ENABLED"], {A, B}) is JobStatus.SHARDING_FLAG
    assert job_status([A, B], ["ENABLED"], {A}) is JobStatus.OK


def test_item_status_precedence_follows_java() -> None:
    assert item_status(disabled=True, running=True, orphaned=True) is ItemStatus.DISABLED
    assert item_status(disabled=False, running=True, orphaned=True) is ItemStatus.RUNNING
    assert item_status(disabled=False, running=False, orphaned=True) is ItemStatus.SHARDING_FLAG
    assert item_status(disabled=False, running=False, orphaned=False) is ItemStatus.PENDING


JAVA_EXTRA = """\
jobExtraConfigurations:
- !!org.apache.shardingsphere.elasticjob.kernel.tracing.yaml.YamlTracingConfiguration
  tracingStorageConfiguration: !!org.apache.shardingsphere.elasticjob.tracing.rdb.yaml.YamlDataSourceConfiguration
    dataSourceClassName: com.zaxxer.hikari.HikariDataSource
  type: RDB
"""
# Daily, so two reads a moment apart see the same next fire.
JAVA_CONFIG = f"""\
cron: 0 0 3 * * ?
description: from java
disabled: false
failover: true
jobErrorHandlerType: LOG
{JAVA_EXTRA}jobName: javaJob
jobParameter: ''
jobShardingStrategyType: SINGLE_SHARDING_BALANCE
maxTimeDiffSeconds: -1
misfire: true
monitorExecution: true
overwrite: false
reconcileIntervalMinutes: 10
shardingItemParameters: ''
shardingTotalCount: 3
staticSharding: false
"""


def java_layout(registry: Registry) -> JobPaths:
    """What three Java instances write: two live, item 2 owned by a dead one."""
    paths = JobPaths("javaJob")
    registry.put(paths.root, b"com.example.JavaJob")
    registry.put(paths.config, JAVA_CONFIG.encode())
    for instance, ip in ((A, IP_A), (B, IP_B)):
        registry.put(paths.server(ip), b"ENABLED")
        registry.create(paths.instance(instance), instance_yaml(instance, ip).encode())
    registry.put(paths.server(IP_C), b"DISABLED")
    for item, owner in ((0, A), (1, B), (2, C)):
        registry.put(paths.item_instance(item), owner.encode())
    registry.put(paths.running(0), A.encode())
    registry.put(paths.failover(0), B.encode())
    registry.put(paths.misfire(1), b"")
    registry.put(paths.disabled(2), b"")
    registry.put(paths.running(2), C.encode())
    registry.put(paths.election_instance, A.encode())
    registry.put(paths.sharding_necessary, b"")
    registry.put(paths.failover_item(2), b"")
    return paths


@pytest.fixture
def memory() -> Iterator[Registry]:
    made = MemoryRegistry(namespace="admin")
    made.start()
    try:
        yield made
    finally:
        made.close()


def test_statistics_of_a_java_written_layout(memory: Registry) -> None:
    java_layout(memory)
    memory.put("/leftover/leader/sharding/necessary", b"")  # no config: not a job
    admin = Admin(memory)

    assert admin.job_names() == ["javaJob"]
    view = admin.overview("javaJob")
    assert view.brief.status is JobStatus.SHARDING_FLAG  # item 2's owner is gone
    assert view.brief.description == "from java"
    assert (view.leader, view.resharding, view.failover_queue) == (A, True, (2,))
    assert [(i.item, i.status, i.instance_id, i.server_ip) for i in view.items] == [
        (0, ItemStatus.RUNNING, A, IP_A),
        (1, ItemStatus.PENDING, B, IP_B),
        (2, ItemStatus.DISABLED, C, IP_C),
    ]
    assert [(i.failover, i.failover_instance, i.misfire) for i in view.items] == [
        (True, B, False),
        (False, None, True),
        (False, None, False),
    ]
    assert [
        (s.server_ip, s.instances_num, s.jobs_num, s.disabled_jobs_num) for s in admin.servers()
    ] == [
        (IP_A, 1, 1, 0),
        (IP_B, 1, 1, 0),
        (IP_C, 0, 1, 1),
    ]
    assert admin.server_jobs(IP_C)[0].status is JobStatus.DISABLED


def test_a_config_update_keeps_what_java_wrote_that_python_does_not_model(
    memory: Registry,
) -> None:
    paths = java_layout(memory)

    admin = Admin(memory)
    admin.update_config("javaJob", {"shardingTotalCount": "5"})

    text = admin.config_yaml("javaJob")
    assert "shardingTotalCount: 5\n" in text
    assert f"jobErrorHandlerType: LOG\n{JAVA_EXTRA}jobName: javaJob\n" in text
    # Java's unknown strategy and missing callable were there before: not our problems.
    assert admin.config("javaJob").job_sharding_strategy_type == "SINGLE_SHARDING_BALANCE"
    assert memory.get(paths.root) == b"com.example.JavaJob"


def test_cached_reads_match_direct_reads_and_cost_no_round_trip(
    zookeeper: ZooKeeperServer, registry: Registry
) -> None:
    java_layout(registry)
    direct = Admin(registry)
    with Admin(registry, cached=True) as cached:
        before = registry.request_count
        cached_view = cached.overview("javaJob")
        cached_jobs, cached_servers = cached.jobs(), cached.servers()
        cached_dump = cached.dump("javaJob")
        assert registry.request_count == before
        assert cached_view == direct.overview("javaJob")
        assert (cached_jobs, cached_servers) == (direct.jobs(), direct.servers())
        assert cached_dump == direct.dump("javaJob")

        direct.disable_item("javaJob", 1)
        wait_until(
            lambda: cached.sharding("javaJob")[1].status is ItemStatus.DISABLED,
            what="the cache to see the change",
        )


def test_saving_a_whole_config_validates_it_and_keeps_the_code_reference(
    memory: Registry,
) -> None:
    java_layout(memory)
    admin = Admin(memory)
    config = admin.config("javaJob")

    saved = admin.save_config(config.with_changes(cron="0 0 4 * * ?", description="moved"))

    assert admin.config("javaJob") == saved
    assert (saved.cron, saved.description) == ("0 0 4 * * ?", "moved")
    with pytest.raises(ConfigError, match="callable: cannot be changed"):
        admin.save_config(saved.with_changes(callable="myapp:other"))
    with pytest.raises(ConfigError, match="cron: '61 \\* \\* \\* \\* \\?'"):
        admin.save_config(saved.with_changes(cron="61 * * * * ?"))
    with pytest.raises(JobNotFoundError):
        admin.save_config(saved.with_changes(job_name="nothing"))
    assert admin.config("javaJob") == saved
