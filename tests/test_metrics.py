"""The Prometheus endpoint: every metric from synthetic events, then a two-instance run on a
real ZooKeeper whose scraped counters must match the ledger of what ran.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from shardcron.config.job import JobConfig
from shardcron.coordination.events import (
    FailoverClaimed,
    FireState,
    FireStatus,
    ItemFinished,
    ItemsSkipped,
    ItemStarted,
    LeaderChanged,
    Resharded,
)
from shardcron.coordination.paths import JobPaths
from shardcron.model import ExecutionSource, ShardingContext
from shardcron.observability.metrics import Metrics
from shardcron.registry.memory import MemoryRegistry
from shardcron.scheduler.process import Scheduler
from shardcron.testing.zookeeper import ZooKeeperServer
from shardcron.tracing import Tracer
from tests.cluster import Recorder, Run, cluster
from tests.helpers import wait_until

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def ctx(item: int, source: ExecutionSource = ExecutionSource.NORMAL_TRIGGER) -> ShardingContext:
    return ShardingContext(
        job_name="orders",
        task_id="t",
        sharding_total_count=4,
        job_parameter="",
        sharding_item=item,
        sharding_parameter=None,
        source=source,
    )


def test_every_metric_counts_its_events_and_is_served_over_http() -> None:
    registry = MemoryRegistry(namespace="metrics")
    registry.start()
    tracer = Tracer([], capacity=1)
    tracer.close(timeout=1)  # closed: every record it is offered is dropped
    metrics = Metrics(registry, tracer)
    other = Metrics()  # a second one in the same process has its own collectors
    me = "10.0.0.1@-@7"
    running = ctx(2)
    events = [
        LeaderChanged(job_name="orders", instance=me, leader=True),
        Resharded(job_name="orders", instance=me, assignment={me: [0, 1, 2, 3]}),
        ItemStarted(job_name="orders", instance=me, context=ctx(0), ip="10.0.0.1"),
        ItemFinished(
            job_name="orders",
            instance=me,
            context=ctx(0),
            ip="10.0.0.1",
            started_at=100.0,
            at=100.02,
        ),
        ItemStarted(job_name="orders", instance=me, context=ctx(1), ip="10.0.0.1"),
        ItemFinished(
            job_name="orders",
            instance=me,
            context=ctx(1),
            ip="10.0.0.1",
            started_at=100.0,
            error=ValueError("x"),
            at=107.0,
        ),
        ItemStarted(job_name="orders", instance=me, context=running, ip="10.0.0.1"),
        FireStatus(
            job_name="orders",
            instance=me,
            task_id="t",
            items=(0, 1),
            source=ExecutionSource.NORMAL_TRIGGER,
            state=FireState.TASK_ERROR,
            message="item 1: x",
        ),
        FireStatus(
            job_name="orders",
            instance=me,
            task_id="t",
            items=(3,),
            source=ExecutionSource.MISFIRE,
            state=FireState.TASK_FINISHED,
            at=1_700_000_123.5,
        ),
        FireStatus(
            job_name="orders",
            instance=me,
            task_id="t",
            items=(3,),
            source=ExecutionSource.MISFIRE,
            state=FireState.TASK_RUNNING,
        ),
        ItemsSkipped(job_name="orders", instance=me, items=(0, 1), reason="busy", misfire=True),
        ItemsSkipped(job_name="orders", instance=me, items=(3,), reason="busy", misfire=False),
        FailoverClaimed(job_name="orders", instance=me, item=3),
        FailoverClaimed(job_name="orders", instance=me, item=2),
    ]
    for event in events:
        metrics(event)
        tracer(event)
    registry.get("/")  # one round trip
    port = metrics.serve(0)
    try:
        samples = scrape(port)
    finally:
        metrics.stop()
        registry.close()
    job = {"job": "orders"}
    n = "NORMAL_TRIGGER"
    assert value(samples, "shardcron_items_total", source=n, outcome="success", **job) == 1
    assert value(samples, "shardcron_items_total", source=n, outcome="failure", **job) == 1
    assert value(samples, "shardcron_items_running", **job) == 1
    assert value(samples, "shardcron_item_duration_seconds_count", **job) == 2
    assert value(samples, "shardcron_item_duration_seconds_sum", **job) == pytest.approx(7.02)
    assert value(samples, "shardcron_item_duration_seconds_bucket", le="0.05", **job) == 1
    assert value(samples, "shardcron_item_duration_seconds_bucket", le="5.0", **job) == 1
    assert value(samples, "shardcron_item_duration_seconds_bucket", le="10.0", **job) == 2
    assert value(samples, "shardcron_fires_total", source=n, outcome="error", **job) == 1
    assert value(samples, "shardcron_fires_total", source="MISFIRE", outcome="finished", **job) == 1
    # The failed fire (TASK_ERROR) does not count as a success; the finished one does.
    assert value(samples, "shardcron_last_success_timestamp_seconds", **job) == 1_700_000_123.5
    assert value(samples, "shardcron_skipped_items_total", misfire="true", **job) == 2
    assert value(samples, "shardcron_skipped_items_total", misfire="false", **job) == 1
    assert value(samples, "shardcron_failovers_total", **job) == 2
    assert value(samples, "shardcron_reshards_total", **job) == 1
    assert value(samples, "shardcron_leader", **job) == 1
    assert value(samples, "shardcron_registry_requests_total") == registry.request_count >= 1
    assert value(samples, "shardcron_registry_connected") == 1
    dropped = tracer.stats().dropped
    assert dropped == 12  # 3 starts, 2 ends, 3 fire states, 2 skips of 2 records each
    assert value(samples, "shardcron_trace_records_total", fate="dropped") == dropped
    assert value(samples, "shardcron_trace_records_total", fate="delivered") == 0
    assert value(samples, "shardcron_trace_records_pending") == 0
    assert b"shardcron_items_total{" not in other.render()

    metrics(LeaderChanged(job_name="orders", instance=me, leader=False))
    metrics(ItemsSkipped.__new__(ItemsSkipped))  # a malformed event is logged, never raised
    final = text_string_to_metric_families(metrics.render().decode())
    by_name = {s.name: s.value for f in final for s in f.samples if s.name.startswith("shardcron_")}
    assert by_name["shardcron_leader"] == 0
    assert by_name["shardcron_registry_connected"] == 0  # closed


A, B = "127.0.0.1@-@6001", "127.0.0.2@-@6002"


def fires_of(runs: list[Run]) -> Counter[str]:
    """Fires per source: the items of one fire share its claim's fencing token and its task
    id (two fires of one job can share a token: the claims of a tick are one transaction)."""
    return Counter(source for source, _, _ in {(r.source, r.token, r.task) for r in runs})


def test_scraped_counters_match_the_ledger_of_a_two_instance_run(
    zookeeper: ZooKeeperServer,
) -> None:
    recorder = Recorder()
    slow = threading.Event()
    config = JobConfig(job_name="metered", cron="* * * * * ?", sharding_total_count=4)
    paths = JobPaths("metered")

    def job_for(instance: str) -> Callable[[ShardingContext], None]:
        record = recorder.job_for(instance)

        def job(ctx: ShardingContext) -> None:
            record(ctx)
            if ctx.sharding_item == 0 and slow.is_set():
                slow.clear()
                time.sleep(1.5)  # the work outlasts the 1 s interval: the next fire misfires
            if ctx.sharding_item == 3:
                raise RuntimeError("item 3 always fails")

        return job

    with cluster(zookeeper, config, recorder) as c:
        metrics, ports = {}, {}
        for instance in (A, B):
            registry = c.registry()
            metrics[instance] = Metrics(registry)
            ports[instance] = metrics[instance].serve(0)
            scheduler = Scheduler(registry, instance_id=instance, observers=[metrics[instance]])
            scheduler.add_job(config, job_for(instance))
            scheduler.start()
            c.schedulers[instance] = scheduler
        try:
            wait_until(
                lambda: len(set(recorder.owners_in_fire(time.time(), 4).values())) == 2,
                timeout=20,
                what="a fire over both instances",
            )
            slow.set()
            wait_until(
                lambda: any(r.source == "MISFIRE" for r in recorder.runs),
                timeout=15,
                what="a misfired item to run again",
            )
            leader = c.admin.get(paths.election_instance)
            live = {i: scrape(ports[i]) for i in (A, B)}
            schedulers = [c.schedulers.pop(i) for i in (A, B)]
            for scheduler in schedulers:
                scheduler.stop(grace=5)
            final = {i: scrape(ports[i]) for i in (A, B)}
        finally:
            for m in metrics.values():
                m.stop()

    job = {"job": "metered"}
    assert leader is not None
    for instance, scheduler in zip((A, B), schedulers, strict=True):
        samples = final[instance]
        runs = [r for r in recorder.runs if r.instance == instance]
        assert runs, f"{instance} ran nothing"
        ok = Counter(r.source for r in runs if r.item != 3)
        failed = Counter(r.source for r in runs if r.item == 3)
        for source in ("NORMAL_TRIGGER", "MISFIRE"):
            got = value(samples, "shardcron_items_total", source=source, outcome="success", **job)
            assert got == ok[source], (instance, source)
            got = value(samples, "shardcron_items_total", source=source, outcome="failure", **job)
            assert got == failed[source], (instance, source)
        assert value(samples, "shardcron_item_duration_seconds_count", **job) == len(runs)
        assert value(samples, "shardcron_items_running", **job) == 0
        fires = fires_of(runs)
        error_fires = fires_of([r for r in runs if r.item == 3])
        for source in ("NORMAL_TRIGGER", "MISFIRE"):
            total = sum(
                value(samples, "shardcron_fires_total", source=source, outcome=o, **job)
                for o in ("finished", "error")
            )
            assert total == fires[source], (instance, source)
            errors = value(samples, "shardcron_fires_total", source=source, outcome="error", **job)
            assert errors == error_fires[source], (instance, source)
        misfired = any(r.source == "MISFIRE" for r in runs)
        skipped = value(samples, "shardcron_skipped_items_total", misfire="true", **job)
        assert (skipped > 0) == misfired, instance
        leads = instance.encode() == leader
        assert value(live[instance], "shardcron_leader", **job) == (1 if leads else 0)
        assert (value(samples, "shardcron_reshards_total", **job) > 0) == leads
        assert value(live[instance], "shardcron_registry_connected") == 1
        assert value(samples, "shardcron_registry_connected") == 0
        round_trips = value(samples, "shardcron_registry_requests_total")
        assert round_trips == scheduler.registry.request_count > 0
    assert (
        sum(value(final[i], "shardcron_skipped_items_total", misfire="true", **job) for i in (A, B))
        > 0
    )
