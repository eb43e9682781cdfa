"""Execution tracing: event mapping, the SQL tables on SQLite, PostgreSQL and MariaDB, the
history queries, a multi-instance run on a real ZooKeeper, and databases that hang or go away.

Each test gets databases of its own (created and dropped here), never the shared ``test``
databases' tables.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from shardcron.config.job import JobConfig
from shardcron.coordination.events import (
    Event,
    FireState,
    FireStatus,
    ItemFinished,
    ItemsSkipped,
    ItemStarted,
    LeaderChanged,
)
from shardcron.coordination.firing import STOPPED
from shardcron.coordination.inherited import HELD_BY_DEAD
from shardcron.errors import ConfigError
from shardcron.model import ExecutionSource, ShardingContext, instance_ip, task_id
from shardcron.scheduler.process import Scheduler
from shardcron.testing.zookeeper import ZooKeeperServer
from shardcron.tracing import (
    ExecutionRecord,
    Record,
    StatusRecord,
    Tracer,
    open_tracer,
)
from shardcron.tracing.history import executions, job_summaries, recent_runs, statuses
from shardcron.tracing.sql import SqlSink, open_engine
from tests.cluster import Cluster, Recorder, cluster
from tests.helpers import wait_until

PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
MARIADB_ADMIN = "mysql+pymysql://root@127.0.0.1:3306/test"
KINDS = ("sqlite", "postgresql", "mariadb")


# -- databases of our own ------------------------------------------------------------------------


@contextmanager
def fresh_database(kind: str, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty database that is dropped afterwards."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / f'trace-{uuid.uuid4().hex[:8]}.db'}"
        return
    name = f"shardcron_trace_{uuid.uuid4().hex[:12]}"
    admin_url = PG_ADMIN if kind == "postgresql" else MARIADB_ADMIN
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name}"))
    try:
        yield sa.make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        force = " WITH (FORCE)" if kind == "postgresql" else ""
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE {name}{force}"))
        admin.dispose()


@pytest.fixture(params=KINDS)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_database(request.param, tmp_path) as url:
        yield url


@contextmanager
def tracer_for(*urls: str, **options: float) -> Iterator[Tracer]:
    tracer = Tracer([SqlSink(url) for url in urls], **options)  # type: ignore[arg-type]
    try:
        yield tracer
    finally:
        tracer.close(timeout=5)


# -- synthetic events -------------------------------------------------------------------------------


@dataclass
class Capture:
    """A sink that keeps what it is given."""

    records: list[Record] = field(default_factory=list)

    def write(self, records: Sequence[Record]) -> None:
        self.records.extend(records)

    def close(self) -> None:
        pass


BASE = datetime(2024, 5, 1, 12, 0, 0).timestamp()


def context(
    job: str,
    item: int,
    ip: str,
    source: ExecutionSource = ExecutionSource.NORMAL_TRIGGER,
    items: list[int] | None = None,
) -> ShardingContext:
    return ShardingContext(
        job_name=job,
        task_id=task_id(job, items or [item], ip, 4242),
        sharding_total_count=4,
        job_parameter="",
        sharding_item=item,
        sharding_parameter=None,
        source=source,
    )


def item_run(
    ctx: ShardingContext, ip: str, start: float, seconds: float, error: Exception | None = None
) -> list[Event]:
    instance = f"{ip}@-@4242"
    started = ItemStarted(job_name=ctx.job_name, instance=instance, context=ctx, ip=ip, at=start)
    finished = ItemFinished(
        job_name=ctx.job_name,
        instance=instance,
        context=ctx,
        ip=ip,
        started_at=start,
        error=error,
        at=start + seconds,
    )
    return [started, finished]


def fire(
    job: str, ip: str, items: tuple[int, ...], at: float, source: ExecutionSource, error: str = ""
) -> list[Event]:
    tid = task_id(job, list(items), ip, 4242)
    end = FireState.TASK_ERROR if error else FireState.TASK_FINISHED
    return [
        FireStatus(
            job_name=job,
            instance=f"{ip}@-@4242",
            task_id=tid,
            items=items,
            source=source,
            state=state,
            message=error if state is FireState.TASK_ERROR else "",
            at=at + n * 0.001,
        )
        for n, state in enumerate((FireState.TASK_STAGING, FireState.TASK_RUNNING, end))
    ]


def test_events_map_to_java_shaped_records_including_a_failover_run() -> None:
    sink = Capture()
    tracer = Tracer([sink], hostname="worker-host")
    ctx = context("orders", 3, "10.0.0.9", ExecutionSource.FAILOVER)
    error = ValueError("x" * 10_000)
    events: list[Event] = [
        *fire("orders", "10.0.0.9", (3,), BASE, ExecutionSource.FAILOVER, "item 3: boom"),
        *item_run(ctx, "10.0.0.9", BASE, 2.5, error),
        ItemsSkipped(
            job_name="orders",
            instance="10.0.0.9@-@4242",
            items=(0, 1),
            reason="still running from an earlier fire",
            misfire=True,
            at=BASE + 3,
            fire_time=BASE + 3,
        ),
        LeaderChanged(job_name="orders", instance="10.0.0.9@-@4242", leader=True),
    ]
    for event in events:
        tracer(event)
    assert tracer.close(timeout=5)

    runs = [r for r in sink.records if isinstance(r, ExecutionRecord)]
    start, end = runs
    assert start.id == end.id
    assert (start.completed, end.completed) == (False, True)
    assert end.execution_source == "FAILOVER"
    assert (end.job_name, end.sharding_item, end.ip, end.hostname) == (
        "orders",
        3,
        "10.0.0.9",
        "worker-host",
    )
    assert end.task_id == ctx.task_id
    assert end.is_success is False
    assert end.failure_cause is not None and len(end.failure_cause) == 4000
    assert end.failure_cause.startswith("ValueError: xxx")
    assert end.start_time == datetime.fromtimestamp(BASE)
    assert end.seconds == pytest.approx(2.5)

    states = [r for r in sink.records if isinstance(r, StatusRecord)]
    assert [s.state for s in states] == [
        "TASK_STAGING",
        "TASK_RUNNING",
        "TASK_ERROR",
        "TASK_STAGING",
        "TASK_FINISHED",
    ]
    assert {s.execution_type for s in states[:3]} == {"FAILOVER"}
    assert {s.execution_type for s in states[3:]} == {"READY"}
    assert {s.slave_id for s in states} == {"10.0.0.9"}
    assert {s.source for s in states} == {"LITE_EXECUTOR"}
    assert {s.original_task_id for s in states} == {""}
    assert states[2].message == "item 3: boom"
    assert states[3].sharding_item == "[0, 1]"
    assert states[4].message is not None and "still running" in states[4].message
    fired = datetime.fromtimestamp(BASE + 3, UTC).isoformat()
    assert f"of the fire of {fired}" in states[4].message  # names the fire skipped
    assert states[4].task_id.startswith("orders@-@0,1@-@READY@-@10.0.0.9@-@")
    assert tracer.stats().delivered == len(sink.records) == 7


# -- the SQL tables and the history queries -----------------------------------------------------------


def columns(engine: sa.Engine, table: str) -> dict[str, str]:
    found = sa.inspect(engine).get_columns(table)
    return {c["name"]: str(c["type"]).upper() for c in found}


def table_names(engine: sa.Engine) -> dict[str, str]:
    return {name.upper(): name for name in sa.inspect(engine).get_table_names()}


def synthetic_history() -> list[Event]:
    """Two jobs on two hosts; orders has a failure, a misfire, a failover and a run in flight."""
    a, b = "10.0.0.1", "10.0.0.2"
    n = ExecutionSource.NORMAL_TRIGGER
    events: list[Event] = []
    for second in range(3):
        at = BASE + 10 * second
        events += fire("orders", a, (0, 1), at, n)
        events += item_run(context("orders", 0, a, items=[0, 1]), a, at, 0.25)
        events += item_run(context("orders", 1, a, items=[0, 1]), a, at + 0.1, 0.5)
        events += fire("orders", b, (2,), at, n, "item 2: boom" if second == 1 else "")
        error = RuntimeError("y" * 9000) if second == 1 else None
        events += item_run(context("orders", 2, b), b, at + 0.2, 0.125, error)
    events += item_run(context("orders", 0, a, ExecutionSource.MISFIRE), a, BASE + 31, 0.5)
    events += item_run(context("orders", 2, a, ExecutionSource.FAILOVER), a, BASE + 32, 1.0)
    events += item_run(context("ledger", 0, b), b, BASE + 33, 0.75)
    events.append(item_run(context("orders", 1, b), b, BASE + 40, 1)[0])  # still running
    return events


def test_sql_tables_take_every_record_and_history_queries_read_them(
    database: str,
) -> None:
    with tracer_for(database) as tracer:
        for event in synthetic_history():
            tracer(event)
        assert tracer.flush(timeout=15)
        assert tracer.stats().rejected == 0
    engine = open_engine(database)
    try:
        dialect = engine.dialect.name
        names = table_names(engine)
        assert {"JOB_EXECUTION_LOG", "JOB_STATUS_TRACE_LOG"} <= set(names)
        if dialect == "postgresql":  # unquoted, like Java's: any SQL client finds them
            assert names["JOB_EXECUTION_LOG"] == "job_execution_log"
        else:
            assert names["JOB_EXECUTION_LOG"] == "JOB_EXECUTION_LOG"
        exec_cols = columns(engine, names["JOB_EXECUTION_LOG"])
        status_cols = columns(engine, names["JOB_STATUS_TRACE_LOG"])
        key = {"auto_id"} if dialect in ("mysql", "mariadb") else set()
        assert set(exec_cols) == key | {
            "id",
            "job_name",
            "task_id",
            "hostname",
            "ip",
            "sharding_item",
            "execution_source",
            "failure_cause",
            "is_success",
            "start_time",
            "complete_time",
        }
        assert set(status_cols) == key | {
            "id",
            "job_name",
            "original_task_id",
            "task_id",
            "slave_id",
            "source",
            "execution_type",
            "sharding_item",
            "state",
            "message",
            "creation_time",
        }
        assert exec_cols["failure_cause"] == "VARCHAR(4000)"
        assert exec_cols["start_time"].startswith("TIMESTAMP")
        assert exec_cols["is_success"] == ("BOOLEAN" if dialect == "postgresql" else "INTEGER")
        indexes = sa.inspect(engine).get_indexes(names["JOB_STATUS_TRACE_LOG"])
        assert [
            (str(i["name"]).upper(), i["column_names"]) for i in indexes if not i["unique"]
        ] == [("TASK_ID_STATE_INDEX", ["task_id", "state"])]

        everything = executions(engine, limit=100)
        assert everything.total == 13
        running = [r for r in everything.rows if not r.completed]
        assert [(r.job_name, r.sharding_item, r.ip) for r in running] == [("orders", 1, "10.0.0.2")]
        failed = executions(engine, job="orders", success=False)
        assert [(r.sharding_item, r.ip) for r in failed.rows] == [(2, "10.0.0.2")]
        cause = failed.rows[0].failure_cause
        assert cause is not None and len(cause) == 4000 and "RuntimeError" in cause
        assert executions(engine, job="orders", success=True).total == 10
        assert executions(engine, job="ledger").total == 1
        assert executions(engine, item=2).total == 4
        assert executions(engine, ip="10.0.0.1").total == 8
        assert executions(engine, instance="10.0.0.2@-@4242").total == 5
        assert executions(engine, instance="10.0.0.2@-@1").total == 0
        assert [r.sharding_item for r in executions(engine, source="FAILOVER").rows] == [2]
        assert [r.sharding_item for r in executions(engine, source="MISFIRE").rows] == [0]
        window = executions(
            engine,
            since=datetime.fromtimestamp(BASE + 10),
            until=datetime.fromtimestamp(BASE + 20),
        )
        assert window.total == 3
        assert min(r.start_time for r in window.rows) == datetime.fromtimestamp(BASE + 10)
        aware = datetime.fromtimestamp(BASE + 30).astimezone()
        assert executions(engine, since=aware).total == 4

        pages = [executions(engine, job="orders", offset=o, limit=5) for o in (0, 5, 10)]
        assert [len(p.rows) for p in pages] == [5, 5, 2]
        assert {p.total for p in pages} == {12}
        ids = [r.id for p in pages for r in p.rows]
        assert len(set(ids)) == 12
        starts = [r.start_time for p in pages for r in p.rows]
        assert starts == sorted(starts, reverse=True)

        errors = statuses(engine, state="TASK_ERROR")
        assert [(s.slave_id, s.sharding_item, s.message) for s in errors.rows] == [
            ("10.0.0.2", "[2]", "item 2: boom")
        ]
        fire_states = statuses(engine, task_id=task_id("orders", [0, 1], "10.0.0.1", 4242))
        assert fire_states.total == 9
        assert Counter(s.state for s in fire_states.rows) == {
            "TASK_STAGING": 3,
            "TASK_RUNNING": 3,
            "TASK_FINISHED": 3,
        }
        assert statuses(engine, item=1).total == 9
        assert statuses(engine, item=2).total == 9
        assert statuses(engine, item=3).total == 0
        assert statuses(engine, ip="10.0.0.2", job="orders").total == 9
        assert statuses(engine, instance="10.0.0.1@-@4242", state="TASK_RUNNING").total == 3
        assert {s.source for s in statuses(engine, limit=100).rows} == {"LITE_EXECUTOR"}

        chart = recent_runs(engine, "orders", limit=4)
        assert [(p.sharding_item, p.execution_source, p.success) for p in chart] == [
            (1, "NORMAL_TRIGGER", True),
            (2, "NORMAL_TRIGGER", True),
            (0, "MISFIRE", True),
            (2, "FAILOVER", True),
        ]
        assert [p.seconds for p in chart] == pytest.approx([0.5, 0.125, 0.5, 1.0])
        assert [p.start_time for p in chart] == sorted(p.start_time for p in chart)

        summary = {s.job_name: s for s in job_summaries(engine)}
        assert (summary["orders"].runs, summary["orders"].failures) == (12, 1)
        assert summary["orders"].running == 1
        assert summary["orders"].last_start == datetime.fromtimestamp(BASE + 40)
        assert (summary["ledger"].runs, summary["ledger"].failures) == (1, 0)
        recent = job_summaries(engine, since=aware)
        assert [(s.job_name, s.runs) for s in recent] == [("ledger", 1), ("orders", 3)]
    finally:
        engine.dispose()


def test_tables_java_created_are_written_as_they_are(database: str) -> None:
    """Java 3.x's status table has no ``source`` column and some use INT for is_success."""
    engine = open_engine(database)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "CREATE TABLE JOB_EXECUTION_LOG (id VARCHAR(40) NOT NULL, "
                "job_name VARCHAR(100) NOT NULL, task_id VARCHAR(255) NOT NULL, "
                "hostname VARCHAR(255) NOT NULL, ip VARCHAR(50) NOT NULL, "
                "sharding_item INT NOT NULL, execution_source VARCHAR(20) NOT NULL, "
                "failure_cause VARCHAR(4000) NULL, is_success INT NOT NULL, "
                "start_time TIMESTAMP NULL, complete_time TIMESTAMP NULL, PRIMARY KEY (id))"
            )
        )
        conn.execute(
            sa.text(
                "CREATE TABLE JOB_STATUS_TRACE_LOG (id VARCHAR(40) NOT NULL, "
                "job_name VARCHAR(100) NOT NULL, original_task_id VARCHAR(255) NOT NULL, "
                "task_id VARCHAR(255) NOT NULL, slave_id VARCHAR(50) NOT NULL, "
                "execution_type VARCHAR(20) NOT NULL, sharding_item VARCHAR(100) NOT NULL, "
                "state VARCHAR(20) NOT NULL, message VARCHAR(4000) NULL, "
                "creation_time TIMESTAMP NULL, PRIMARY KEY (id))"
            )
        )
    try:
        with tracer_for(database) as tracer:
            for event in synthetic_history():
                tracer(event)
            assert tracer.flush(timeout=15)
            assert tracer.stats().rejected == 0
        names = table_names(engine)
        assert "source" not in columns(engine, names["JOB_STATUS_TRACE_LOG"])
        assert executions(engine).total == 13
        assert executions(engine, success=False).total == 1
        assert statuses(engine, state="TASK_ERROR").rows[0].source == ""
        with engine.connect() as conn:
            values = conn.execute(
                sa.text(f"SELECT DISTINCT is_success FROM {names['JOB_EXECUTION_LOG']}")
            ).scalars()
            assert sorted(values) == [0, 1]
    finally:
        engine.dispose()


def test_dropped_tables_are_created_again(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'dropped.db'}"
    history = synthetic_history()
    engine = open_engine(url)
    try:
        with tracer_for(url) as tracer:
            for event in history[:11]:  # up to the start of the first fire's item 2
                tracer(event)
            assert tracer.flush(timeout=5)
            with engine.begin() as conn:
                conn.execute(sa.text("DROP TABLE JOB_EXECUTION_LOG"))
            for event in history[11:]:
                tracer(event)
            assert tracer.flush(timeout=5)
            assert tracer.stats().rejected == 0
        # Runs that ended before the drop are gone; one whose start row went with the table
        # is back whole, from its end.
        assert executions(engine).total == 13 - 2
        first = executions(engine, item=2, until=datetime.fromtimestamp(BASE + 1)).rows
        assert [(r.completed, r.ip, r.seconds) for r in first] == [(True, "10.0.0.2", 0.125)]
        assert statuses(engine).total == 18
    finally:
        engine.dispose()


def test_tables_seen_without_their_columns_are_waited_for_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another worker creating the tables: SQLite can list a table before its columns.
    Reflected like that, every insert failed to compile and the records were refused for
    good (seen once in CI); the sink must treat the tables as not there yet."""
    url = f"sqlite:///{tmp_path / 'racing.db'}"
    history = synthetic_history()
    with tracer_for(url) as tracer:  # creates the tables
        tracer(history[0])
        assert tracer.flush(timeout=5)
    real_table, empty_reflections = sa.Table, [2]

    def reflected_mid_creation(*args: Any, **kw: Any) -> sa.Table:
        if "autoload_with" in kw and empty_reflections[0]:
            empty_reflections[0] -= 1
            return real_table(args[0], sa.MetaData())  # the name without its columns
        return real_table(*args, **kw)

    monkeypatch.setattr(sa, "Table", reflected_mid_creation)
    with tracer_for(url) as tracer:
        for event in history[1:]:
            tracer(event)
        assert tracer.flush(timeout=10)
        assert tracer.stats().rejected == 0
    assert empty_reflections == [0]  # the race was played
    engine = open_engine(url)
    try:
        assert executions(engine).total == 13
    finally:
        engine.dispose()


# -- a multi-instance run on a real ZooKeeper ------------------------------------------------------

A, B, C = (f"127.0.0.{n}@-@{5000 + n}" for n in range(1, 4))


@dataclass
class Plan:
    """What the traced job does: item 1 always fails; armed events make runs slow or hang."""

    recorder: Recorder
    slow: threading.Event = field(default_factory=threading.Event)
    hang: threading.Event = field(default_factory=threading.Event)
    hanging: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def job_for(self, instance: str) -> Callable[[ShardingContext], None]:
        record = self.recorder.job_for(instance)

        def job(ctx: ShardingContext) -> None:
            with self.lock:
                slow = ctx.sharding_item == 0 and self.slow.is_set()
                hang = instance == C and self.hang.is_set()
                if slow:
                    self.slow.clear()
            if slow:
                time.sleep(1.6)  # the work outlasts the 1 s interval: the next fire misfires
            if hang:
                self.hanging.set()
                self.release.wait(20)  # stuck until the test has killed this instance
            record(ctx)
            if ctx.sharding_item == 1:
                raise RuntimeError(f"item 1 fails on {instance}")

        return job


def start_traced(c: Cluster, instance: str, plan: Plan, tracer: Tracer) -> Scheduler:
    scheduler = Scheduler(c.registry(), instance_id=instance, observers=[tracer])
    scheduler.add_job(c.config, plan.job_for(instance))
    scheduler.start()
    c.schedulers[instance] = scheduler
    return scheduler


def ledger_rows(plan: Plan) -> Counter[tuple[str, int, str]]:
    return Counter((instance_ip(r.instance), r.item, r.source) for r in plan.recorder.runs)


def test_multi_instance_run_is_traced_in_sqlite_postgresql_and_mariadb(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    config = JobConfig(job_name="traced", cron="* * * * * ?", sharding_total_count=4, failover=True)
    plan = Plan(Recorder())
    with ExitStack() as stack:
        urls = [stack.enter_context(fresh_database(kind, tmp_path)) for kind in KINDS]
        # One tracer per instance, as in separate processes, all racing to create the tables.
        tracers = {i: Tracer([SqlSink(url) for url in urls]) for i in (A, B, C)}
        with cluster(zookeeper, config, plan.recorder) as c:
            for instance in (A, B, C):
                start_traced(c, instance, plan, tracers[instance])

            def spread() -> bool:
                moment = time.time()
                return len(set(plan.recorder.owners_in_fire(moment, 4).values())) == 3

            wait_until(spread, timeout=30, what="a fire spread over the three instances")
            plan.slow.set()
            wait_until(
                lambda: any(r.source == "MISFIRE" for r in plan.recorder.runs),
                timeout=15,
                what="a misfired item to run again",
            )
            plan.hang.set()
            assert plan.hanging.wait(10), "C never ran an item"
            doomed = c.schedulers[C]
            doomed.registry.close()  # C's session ends while its item runs: a crash
            wait_until(
                lambda: any(r.source == "FAILOVER" for r in plan.recorder.runs),
                timeout=20,
                what="a failed-over item to run",
            )
            plan.release.set()
            for instance in (A, B, C):
                c.schedulers.pop(instance).stop(grace=5)
        for tracer in tracers.values():
            assert tracer.close(timeout=20)
            assert tracer.stats().dropped == tracer.stats().rejected == 0

        ledger = ledger_rows(plan)
        per_database = []
        for url in urls:
            engine = open_engine(url)
            try:
                page = executions(engine, job="traced", limit=1000)
                states = statuses(engine, job="traced", limit=1000)
            finally:
                engine.dispose()
            assert page.total < 1000
            done = [r for r in page.rows if r.completed]
            # Every item run of the ledger has its row, and nothing else was traced as run.
            assert Counter((r.ip, r.sharding_item, r.execution_source) for r in done) == ledger
            assert not [r for r in page.rows if not r.completed]
            failed = {(r.sharding_item, r.is_success) for r in done if r.sharding_item == 1}
            assert failed == {(1, False)}
            assert all(r.is_success for r in done if r.sharding_item != 1)
            cause = next(r.failure_cause for r in done if r.sharding_item == 1)
            assert cause is not None and "item 1 fails on" in cause
            assert {r.execution_source for r in done} == {"NORMAL_TRIGGER", "MISFIRE", "FAILOVER"}
            assert {r.ip for r in done} == {"127.0.0.1", "127.0.0.2", "127.0.0.3"}

            by_state = Counter(s.state for s in states.rows)
            assert by_state["TASK_ERROR"] >= 1
            assert by_state["TASK_RUNNING"] == by_state["TASK_ERROR"] + by_state[
                "TASK_FINISHED"
            ] - sum(1 for s in states.rows if s.message and "skipped" in s.message)
            skipped = [s for s in states.rows if s.message and "skipped" in s.message]
            # Skipped while busy: misfired. Not misfired: C's item when C died (failed over)
            # and a fire the final stop handed back unrun (left to the next owner).
            unmisfired = (HELD_BY_DEAD, STOPPED)
            messages = [s.message or "" for s in skipped]
            other = [
                m for m in messages if "misfired" not in m and not any(r in m for r in unmisfired)
            ]
            assert skipped and not other, other
            assert any(s.execution_type == "FAILOVER" for s in states.rows)
            per_database.append(
                (
                    {(r.id, r.task_id, r.ip, r.sharding_item, r.is_success) for r in page.rows},
                    {(s.id, s.state, s.task_id, s.message) for s in states.rows},
                )
            )
        # The same records reached all three databases.
        assert per_database[0] == per_database[1] == per_database[2]


# -- databases that hang or go away -----------------------------------------------------------------


class BlackHole:
    """A TCP port that accepts connections and never says a word: a hung database."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for conn in self.accepted:
            conn.close()


@dataclass
class Skips:
    """An observer counting skipped items: a delayed fire would leave items behind."""

    items: int = 0

    def __call__(self, event: Event) -> None:
        if isinstance(event, ItemsSkipped):
            self.items += len(event.items)


def test_a_hung_database_never_delays_a_fire(zookeeper: ZooKeeperServer) -> None:
    hole = BlackHole()
    url = f"postgresql+psycopg://postgres@127.0.0.1:{hole.port}/nowhere"
    tracer = Tracer([SqlSink(url, connect_timeout=60)], capacity=8)
    skips = Skips()
    recorder = Recorder()
    config = JobConfig(job_name="hung", cron="* * * * * ?", sharding_total_count=4)
    try:
        with cluster(zookeeper, config, recorder) as c:
            for instance in (A, B):
                scheduler = Scheduler(c.registry(), instance_id=instance, observers=[tracer, skips])
                scheduler.add_job(config, recorder.job_for(instance))
                scheduler.start()
                c.schedulers[instance] = scheduler
            wait_until(lambda: tracer.stats().dropped > 0, timeout=20, what="a full trace queue")
            wait_until(lambda: hole.accepted, what="the writer to connect")
            after_drops = int(time.time()) + 1
            # Four whole fires: a fifth has begun, so the fourth was recorded in full.
            wait_until(
                lambda: len({int(r.start) for r in recorder.since(after_drops)}) >= 5,
                timeout=20,
                what="five fires after the queue filled",
            )
            runs = recorder.since(after_drops)
        per_second = Counter(int(r.start) for r in runs)
        seconds = sorted(per_second)[:4]
        # Every second fired, and every fire ran all four items: nothing waited on tracing.
        assert seconds == list(range(seconds[0], seconds[0] + 4))
        assert [per_second[s] for s in seconds] == [4, 4, 4, 4]
        assert skips.items == 0
        assert len(hole.accepted) == 1  # the writer is still stuck in its first connect
        stats = tracer.stats()
        assert (stats.delivered, stats.rejected) == (0, 0)
        assert stats.pending >= 8  # a full queue, plus the batch being written
        assert stats.dropped == stats.offered - stats.pending
        assert not tracer.close(timeout=0.2)
        assert tracer.stats().lost == stats.pending
    finally:
        hole.close()


class Proxy:
    """Forwards a local port to a database; ``cut()`` kills it and every connection."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.listener: socket.socket | None = None
        self.conns: list[socket.socket] = []

    def start(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self.conns += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        assert self.listener is not None
        self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for conn in self.conns:
            with suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        self.conns = []


def test_records_queued_while_the_database_is_away_arrive_after_it_returns(
    tmp_path: Path,
) -> None:
    with fresh_database("postgresql", tmp_path) as direct:
        proxy = Proxy(5432)
        proxy.start()
        via_proxy = sa.make_url(direct).set(port=proxy.port).render_as_string(False)
        history = synthetic_history()
        with tracer_for(via_proxy, retry_delay=0.05, max_retry_delay=0.2) as tracer:
            for event in history[:10]:
                tracer(event)
            assert tracer.flush(timeout=15)
            proxy.cut()
            for event in history[10:]:
                tracer(event)
            wait_until(lambda: tracer.stats().retries >= 2, what="failed attempts")
            assert tracer.stats().pending > 0
            proxy.start()  # the same port again
            assert tracer.flush(timeout=15)
            stats = tracer.stats()
            assert (stats.dropped, stats.rejected, stats.lost) == (0, 0, 0)
            assert stats.delivered == stats.offered
        engine = open_engine(direct)
        try:
            assert executions(engine).total == 13
            assert executions(engine, success=False).total == 1
            assert statuses(engine).total == 3 * 6
        finally:
            engine.dispose()
        proxy.cut()


# -- configuration ------------------------------------------------------------------------------------


def test_without_a_url_records_go_to_the_log(caplog: pytest.LogCaptureFixture) -> None:
    tracer = open_tracer(None)
    with caplog.at_level(logging.INFO, logger="shardcron.trace"):
        for event in item_run(context("orders", 2, "10.0.0.3"), "10.0.0.3", BASE, 0.5):
            tracer(event)
        tracer(
            ItemFinished(
                job_name="orders",
                instance="10.0.0.3@-@4242",
                context=context("orders", 3, "10.0.0.3"),
                ip="10.0.0.3",
                started_at=BASE,
                error=KeyError("gone"),
                at=BASE + 1,
            )
        )
        tracer(fire("orders", "10.0.0.3", (2, 3), BASE, ExecutionSource.MISFIRE, "item 3")[2])
        assert tracer.close(timeout=5)
    lines = [r.getMessage() for r in caplog.records if r.name == "shardcron.trace"]
    assert lines == [
        "job orders item 2 (NORMAL_TRIGGER) on 10.0.0.3 started; task "
        + task_id("orders", [2], "10.0.0.3", 4242),
        "job orders item 2 (NORMAL_TRIGGER) on 10.0.0.3 succeeded in 0.500s",
        "job orders item 3 (NORMAL_TRIGGER) on 10.0.0.3 failed in 1.000s: KeyError: 'gone'",
        "job orders READY fire of items [2, 3] on 10.0.0.3 TASK_ERROR: item 3; task "
        + task_id("orders", [2, 3], "10.0.0.3", 4242),
    ]


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("not a url", "tracing url"),
        ("nosuchdb://host/db", "nosuchdb"),
        ("postgresql+nosuchdriver://host/db", "nosuchdriver"),
    ],
)
def test_a_bad_url_is_a_one_line_config_error(url: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        open_tracer(url)
    message = str(caught.value)
    assert message.startswith("tracing url: ")
    assert words in message
    assert "\n" not in message


def test_an_unreachable_database_does_not_stop_open_tracer() -> None:
    hole = BlackHole()
    hole.close()  # nothing listens there now
    tracer = open_tracer(f"mysql+pymysql://root@127.0.0.1:{hole.port}/x", connect_timeout=1)
    tracer(fire("orders", "10.0.0.3", (1,), BASE, ExecutionSource.NORMAL_TRIGGER)[0])
    wait_until(lambda: tracer.stats().retries >= 1, what="a retry")
    assert tracer.stats().delivered == 0
    assert not tracer.close(timeout=0.1)
    assert tracer.stats().lost == 1


def test_time_filters_use_local_wall_clock() -> None:
    """Records carry naive local times, as Java writes them."""
    sink = Capture()
    tracer = Tracer([sink])
    now = time.time()
    tracer(fire("j", "10.0.0.1", (0,), now, ExecutionSource.NORMAL_TRIGGER)[0])
    assert tracer.close(timeout=5)
    (record,) = sink.records
    assert isinstance(record, StatusRecord)
    assert record.creation_time.tzinfo is None
    assert abs(record.creation_time - datetime.now()) < timedelta(minutes=1)
