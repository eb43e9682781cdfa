"""History queries on the trace tables, for consoles and scripts.

Each query takes a SQLAlchemy engine (:func:`shardcron.tracing.sql.open_engine`) and
finds the tables as they are (:func:`shardcron.tracing.schema.reflect`, once per
engine); missing tables give an empty answer. ``executions`` and ``statuses`` read a
``Page`` at a time, newest first; ``recent_runs`` feeds a chart and ``job_summaries`` an
overview. Times come back as naive local time, the way the tables hold them.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from shardcron.errors import ConfigError
from shardcron.tracing.records import ExecutionRecord, StatusRecord
from shardcron.tracing.schema import Tables, reflect

MAX_PAGE = 1000

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    rows: list[T]
    total: int  # rows matching the filters, on all pages
    offset: int
    limit: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RunPoint:
    """One finished item run, as a chart of recent runs shows it."""

    start_time: datetime
    seconds: float
    success: bool
    sharding_item: int
    ip: str
    execution_source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSummary:
    job_name: str
    runs: int
    failures: int
    running: int  # started, not (yet) completed
    last_start: datetime | None


_known: weakref.WeakKeyDictionary[Engine, Tables] = weakref.WeakKeyDictionary()


def _tables(engine: Engine) -> Tables | None:
    found = _known.get(engine)
    if found is None:
        found = reflect(engine)
        if found is not None:
            _known[engine] = found
    return found


def executions(
    engine: Engine,
    *,
    job: str | None = None,
    item: int | None = None,
    ip: str | None = None,
    instance: str | None = None,
    source: str | None = None,
    success: bool | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    offset: int = 0,
    limit: int = 50,
) -> Page[ExecutionRecord]:
    """Item runs, newest first. ``success=False`` means finished and failed.

    ``instance`` (``ip@-@pid``) matches the end of the task id, which names the process;
    ``since``/``until`` bound the start time (naive local, or aware and converted).
    """
    _check_page(offset, limit)
    tables = _tables(engine)
    if tables is None:
        return Page([], 0, offset, limit)
    t = tables.execution
    where = _equal(t, job_name=job, sharding_item=item, ip=ip, execution_source=source)
    if instance is not None:
        where.append(_task_of(t, instance))
    if success is not None:
        where.append(_succeeded(t) if success else _failed(t))
    where += _between(t.c.start_time, since, until)
    rows, total = _newest_first(engine, t, where, t.c.start_time, offset, limit)
    return Page([_execution_record(r) for r in rows], total, offset, limit)


def statuses(
    engine: Engine,
    *,
    job: str | None = None,
    task_id: str | None = None,
    item: int | None = None,
    ip: str | None = None,
    instance: str | None = None,
    state: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    offset: int = 0,
    limit: int = 50,
) -> Page[StatusRecord]:
    """Fire states, newest first; ``item`` matches fires whose item list holds it."""
    _check_page(offset, limit)
    tables = _tables(engine)
    if tables is None:
        return Page([], 0, offset, limit)
    t = tables.status
    where = _equal(t, job_name=job, task_id=task_id, slave_id=ip, state=state)
    if item is not None:
        listed = t.c.sharding_item
        where.append(
            sa.or_(
                listed == f"[{item}]",
                listed.like(f"[{item}, %"),
                listed.like(f"%, {item}]"),
                listed.like(f"%, {item}, %"),
            )
        )
    if instance is not None:
        where.append(_task_of(t, instance))
    where += _between(t.c.creation_time, since, until)
    rows, total = _newest_first(engine, t, where, t.c.creation_time, offset, limit)
    return Page([_status_record(r) for r in rows], total, offset, limit)


def _equal(table: sa.Table, **values: object) -> list[sa.ColumnElement[bool]]:
    """``column == value`` for every filter that was given."""
    return [table.c[name] == value for name, value in values.items() if value is not None]


def _newest_first(
    engine: Engine,
    table: sa.Table,
    where: list[sa.ColumnElement[bool]],
    time_column: sa.Column[Any],
    offset: int,
    limit: int,
) -> tuple[Sequence[sa.RowMapping], int]:
    """One page of matching rows, newest first, and how many match in all."""
    query = sa.select(table).where(*where).order_by(time_column.desc(), table.c.id)
    with engine.connect() as conn:
        total = conn.execute(
            sa.select(sa.func.count()).select_from(table).where(*where)
        ).scalar_one()
        rows = conn.execute(query.offset(offset).limit(limit)).mappings().all()
    return rows, int(total)


def recent_runs(engine: Engine, job: str, *, limit: int = 100) -> list[RunPoint]:
    """The job's last ``limit`` finished item runs, oldest first: duration and outcome."""
    _check_page(0, limit)
    tables = _tables(engine)
    if tables is None:
        return []
    t = tables.execution
    query = (
        sa.select(
            t.c.start_time,
            t.c.complete_time,
            t.c.is_success,
            t.c.sharding_item,
            t.c.ip,
            t.c.execution_source,
        )
        .where(t.c.job_name == job, t.c.complete_time.is_not(None), t.c.start_time.is_not(None))
        .order_by(t.c.start_time.desc(), t.c.id)
        .limit(limit)
    )
    with engine.connect() as conn:
        rows = conn.execute(query).all()
    points = []
    for start, end, ok, item, ip, source in reversed(rows):
        start, end = _local(start), _local(end)
        points.append(
            RunPoint(
                start_time=start,
                seconds=(end - start).total_seconds(),
                success=bool(ok),
                sharding_item=item,
                ip=ip,
                execution_source=source,
            )
        )
    return points


def job_summaries(engine: Engine, *, since: datetime | None = None) -> list[JobSummary]:
    """Per job: runs, failures and runs in progress (started after ``since``), last start."""
    tables = _tables(engine)
    if tables is None:
        return []
    t = tables.execution
    query = (
        sa.select(
            t.c.job_name,
            sa.func.count(),
            sa.func.sum(sa.case((_failed(t), 1), else_=0)),
            sa.func.sum(sa.case((t.c.complete_time.is_(None), 1), else_=0)),
            sa.func.max(t.c.start_time),
        )
        .where(*_between(t.c.start_time, since, None))
        .group_by(t.c.job_name)
        .order_by(t.c.job_name)
    )
    with engine.connect() as conn:
        rows = conn.execute(query).all()
    return [
        JobSummary(
            job_name=name,
            runs=int(runs),
            failures=int(failures or 0),
            running=int(running or 0),
            last_start=None if last is None else _local(last),
        )
        for name, runs, failures, running, last in rows
    ]


def _check_page(offset: int, limit: int) -> None:
    if not 1 <= limit <= MAX_PAGE:
        raise ConfigError("limit", f"{limit} is out of range; use 1 to {MAX_PAGE}")
    if offset < 0:
        raise ConfigError("offset", f"{offset} is negative; use 0 or more")


def _success_is(t: sa.Table, value: bool) -> sa.ColumnElement[bool]:
    column = t.c.is_success
    if isinstance(column.type, sa.Boolean):
        return column.is_(value)
    return column == int(value)


def _succeeded(t: sa.Table) -> sa.ColumnElement[bool]:
    return sa.and_(t.c.complete_time.is_not(None), _success_is(t, True))


def _failed(t: sa.Table) -> sa.ColumnElement[bool]:
    return sa.and_(t.c.complete_time.is_not(None), _success_is(t, False))


def _task_of(t: sa.Table, instance: str) -> sa.ColumnElement[bool]:
    escaped = instance.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return t.c.task_id.like(f"%@-@{escaped}", escape="\\")


def _between(
    column: sa.ColumnElement[Any], since: datetime | None, until: datetime | None
) -> list[sa.ColumnElement[bool]]:
    where = []
    if since is not None:
        where.append(column >= _local(since))
    if until is not None:
        where.append(column < _local(until))
    return where


def _local(moment: datetime) -> datetime:
    """Naive local time, the way the tables hold it."""
    return moment.astimezone().replace(tzinfo=None) if moment.tzinfo else moment


def _execution_record(row: sa.RowMapping) -> ExecutionRecord:
    return ExecutionRecord(
        id=row["id"],
        job_name=row["job_name"],
        task_id=row["task_id"],
        hostname=row["hostname"],
        ip=row["ip"],
        sharding_item=row["sharding_item"],
        execution_source=row["execution_source"],
        start_time=_local(row["start_time"]),
        complete_time=None if row["complete_time"] is None else _local(row["complete_time"]),
        is_success=bool(row["is_success"]),
        failure_cause=row["failure_cause"],
    )


def _status_record(row: sa.RowMapping) -> StatusRecord:
    return StatusRecord(
        id=row["id"],
        job_name=row["job_name"],
        original_task_id=row["original_task_id"],
        task_id=row["task_id"],
        slave_id=row["slave_id"],
        source=row.get("source") or "",
        execution_type=row["execution_type"],
        sharding_item=row["sharding_item"],
        state=row["state"],
        message=row["message"],
        creation_time=_local(row["creation_time"]),
    )
