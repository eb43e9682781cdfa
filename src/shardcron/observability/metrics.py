"""Prometheus metrics of one worker process, fed by scheduler events.

:class:`Metrics` is an observer; give it to the scheduler and, if wanted, serve it::

    registry = open_registry("zk://127.0.0.1:2181/my-app")
    metrics = Metrics(registry)
    scheduler = Scheduler(registry, observers=[metrics])
    metrics.serve(9464)  # http://127.0.0.1:9464/metrics

It keeps its own Prometheus collector registry, so it never mixes with (or collides in)
the process-wide default one, and several schedulers in one process can each have theirs.
Everything counts what happened on this instance only; sum over instances in PromQL.

``shardcron_fires_total{job,source,outcome}``
    fires that ran items here, by outcome ``finished`` or ``error`` (an item failed)
``shardcron_items_total{job,source,outcome}``
    item runs by outcome ``success`` or ``failure``
``shardcron_item_duration_seconds{job}``
    histogram of item run times
``shardcron_last_success_timestamp_seconds{job}``
    epoch seconds when a fire last finished here with every item successful; alert on
    ``time() - max by (job) (...)`` growing past a few periods to catch a job that went stale
``shardcron_items_running{job}``
    items running now
``shardcron_skipped_items_total{job,misfire}``
    items a fire left out because they were still running; ``misfire="true"`` ones run
    again as soon as they can
``shardcron_failovers_total{job}``
    items this instance took over from a lost instance
``shardcron_reshards_total{job}``
    resharding rounds this instance did as leader
``shardcron_leader{job}``
    1 while this instance leads the job
``shardcron_registry_requests_total``
    round trips to the registry server (read when scraped)
``shardcron_registry_connected``
    1 while the registry session is connected (read when scraped)
``shardcron_trace_records_total{fate}``
    with a tracer: its records by fate (``delivered``, ``dropped``, ``rejected``, ``lost``);
    alert on ``dropped`` to learn that the trace database cannot keep up
``shardcron_trace_records_pending``
    with a tracer: records waiting for the trace database
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import Collector

from shardcron.coordination.events import (
    Event,
    FailoverClaimed,
    FireState,
    FireStatus,
    ItemFinished,
    ItemsSkipped,
    ItemStarted,
    LeaderChanged,
    Resharded,
)
from shardcron.registry import Registry
from shardcron.tracing import Tracer

log = logging.getLogger(__name__)

# Items run from milliseconds to hours.
DURATION_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


class Metrics:
    def __init__(self, registry: Registry | None = None, tracer: Tracer | None = None) -> None:
        self.prometheus = CollectorRegistry()
        p = self.prometheus
        self.fires = Counter(
            "shardcron_fires", "Fires that ran items here", ["job", "source", "outcome"], registry=p
        )
        self.items = Counter(
            "shardcron_items", "Item runs by outcome", ["job", "source", "outcome"], registry=p
        )
        self.durations = Histogram(
            "shardcron_item_duration_seconds",
            "Item run time",
            ["job"],
            buckets=DURATION_BUCKETS,
            registry=p,
        )
        self.running = Gauge("shardcron_items_running", "Items running now", ["job"], registry=p)
        self.last_success = Gauge(
            "shardcron_last_success_timestamp_seconds",
            "When a fire last finished here with every item successful (epoch seconds)",
            ["job"],
            registry=p,
        )
        self.skipped = Counter(
            "shardcron_skipped_items",
            "Items left out of a fire because they were still running",
            ["job", "misfire"],
            registry=p,
        )
        self.failovers = Counter(
            "shardcron_failovers", "Items taken over from a lost instance", ["job"], registry=p
        )
        self.reshards = Counter(
            "shardcron_reshards", "Resharding rounds done as leader", ["job"], registry=p
        )
        self.leader = Gauge("shardcron_leader", "1 while this instance leads", ["job"], registry=p)
        if registry is not None:
            p.register(_RegistryCollector(registry))
        if tracer is not None:
            p.register(_TracerCollector(tracer))
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def __call__(self, event: Event) -> None:
        try:
            self._count(event)
        except Exception:  # an observer must never fail a fire
            log.exception("metrics: could not count %s", type(event).__name__)

    def _count(self, event: Event) -> None:
        job = event.job_name
        if isinstance(event, ItemStarted):
            self.running.labels(job).inc()
        elif isinstance(event, ItemFinished):
            outcome = "success" if event.success else "failure"
            self.items.labels(job, str(event.context.source), outcome).inc()
            self.durations.labels(job).observe(max(0.0, event.seconds))
            self.running.labels(job).dec()
        elif isinstance(event, FireStatus):
            if event.state in (FireState.TASK_FINISHED, FireState.TASK_ERROR):
                outcome = "error" if event.state is FireState.TASK_ERROR else "finished"
                self.fires.labels(job, str(event.source), outcome).inc()
                if event.state is FireState.TASK_FINISHED:
                    self.last_success.labels(job).set(event.at)
        elif isinstance(event, ItemsSkipped):
            self.skipped.labels(job, str(event.misfire).lower()).inc(len(event.items))
        elif isinstance(event, FailoverClaimed):
            self.failovers.labels(job).inc()
        elif isinstance(event, Resharded):
            self.reshards.labels(job).inc()
        elif isinstance(event, LeaderChanged):
            self.leader.labels(job).set(1 if event.leader else 0)

    def render(self) -> bytes:
        """The metrics in Prometheus' text format, as a scrape gets them."""
        return generate_latest(self.prometheus)

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve ``/metrics`` over HTTP on a daemon thread; returns the port (0 picks one)."""
        if self._server is not None:
            raise RuntimeError("metrics are already served")
        self._server, self._thread = start_http_server(port, host, registry=self.prometheus)
        bound = int(self._server.server_address[1])
        log.info("metrics on http://%s:%d/metrics", host, bound)
        return bound

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)
        self._server = self._thread = None


class _RegistryCollector(Collector):
    """Reads the registry's own counters when scraped, so they cost nothing in between."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def collect(self) -> Iterable[Metric]:
        requests = CounterMetricFamily(
            "shardcron_registry_requests", "Round trips to the registry server"
        )
        requests.add_metric([], float(self.registry.request_count))
        yield requests
        yield GaugeMetricFamily(
            "shardcron_registry_connected",
            "1 while the registry session is connected",
            value=1.0 if self.registry.connected else 0.0,
        )


class _TracerCollector(Collector):
    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer

    def collect(self) -> Iterable[Metric]:
        stats = self.tracer.stats()
        records = CounterMetricFamily(
            "shardcron_trace_records", "Trace records by fate", labels=["fate"]
        )
        for fate in ("delivered", "dropped", "rejected", "lost"):
            records.add_metric([fate], float(getattr(stats, fate)))
        yield records
        yield GaugeMetricFamily(
            "shardcron_trace_records_pending",
            "Trace records waiting to be written",
            value=float(stats.pending),
        )
