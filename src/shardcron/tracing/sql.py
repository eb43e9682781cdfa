"""Trace records in a SQL database, in ElasticJob's tables, and the history queries on them.

The two tables carry ElasticJob's names, columns and types, so a dashboard written for
the Java trace tables reads ours (and we write into tables Java created):

``JOB_EXECUTION_LOG``, one row per item run: ``id``, ``job_name``, ``task_id``,
``hostname``, ``ip``, ``sharding_item``, ``execution_source``, ``failure_cause``,
``is_success``, ``start_time``, ``complete_time``. The row is inserted when the item
starts and updated when it ends; if the start row is missing (it was dropped), the end
inserts the whole row.

``JOB_STATUS_TRACE_LOG``, one row per fire state: ``id``, ``job_name``,
``original_task_id``, ``task_id``, ``slave_id``, ``source``, ``execution_type``,
``sharding_item``, ``state``, ``message``, ``creation_time``; indexed on
``(task_id, state)``. Java 3.x leaves out ``source`` (its console adds it); a table
without it is written without it.

Dialects: the tables are created if missing, the way Java's DDL comes out on each
database: on PostgreSQL the names are unquoted (so folded to lower case, as Java's are)
and ``is_success`` is BOOLEAN; on MySQL/MariaDB an ``auto_id`` column is the primary key,
``id`` is unique, and timestamps keep microseconds (``TIMESTAMP(6)``: second precision
would make every short run last zero seconds). Every other column is VARCHAR/INT/TIMESTAMP
as in Java. Times are naive local time, as Java writes them. Strings longer than their
column are cut to fit rather than failing the insert.

Faults: a database that cannot be reached makes :meth:`SqlSink.write` raise
:class:`~shardcron.tracing.SinkUnavailable` (the tracer retries later, and the pool's
pre-ping replaces dead connections); a record the database refuses is logged and
skipped, without losing the rest of its batch.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    IntegrityError,
    InterfaceError,
    NoSuchModuleError,
    NoSuchTableError,
    OperationalError,
    SQLAlchemyError,
)

from shardcron.errors import ConfigError
from shardcron.tracing import ExecutionRecord, Record, SinkUnavailable, StatusRecord

logger = logging.getLogger(__name__)

EXECUTION_LOG = "JOB_EXECUTION_LOG"
STATUS_LOG = "JOB_STATUS_TRACE_LOG"
STATUS_INDEX = "TASK_ID_STATE_INDEX"
MAX_PAGE = 1000

T = TypeVar("T")


# -- engines and tables ----------------------------------------------------------------------


def open_engine(url: str, *, connect_timeout: float = 10.0) -> Engine:
    """An engine for ``url`` that gives up connecting after ``connect_timeout`` seconds.

    Options in the URL's query string win over these defaults.
    """
    fix = "use a SQLAlchemy URL such as sqlite:///shardcron-trace.db"
    try:
        parsed = sa.make_url(url)
    except ArgumentError as exc:
        raise ConfigError("tracing url", f"{exc}; {fix}") from None
    backend = parsed.get_backend_name()
    defaults: dict[str, Any] = {}
    if backend == "postgresql":
        defaults = {"connect_timeout": max(1, round(connect_timeout))}
    elif backend in ("mysql", "mariadb"):
        defaults = {
            "connect_timeout": connect_timeout,
            "read_timeout": connect_timeout * 3,
            "write_timeout": connect_timeout * 3,
        }
    elif backend == "sqlite":
        defaults = {"timeout": connect_timeout}
    connect_args = {k: v for k, v in defaults.items() if k not in parsed.query}
    try:
        return sa.create_engine(parsed, pool_pre_ping=True, connect_args=connect_args)
    except (ArgumentError, NoSuchModuleError, ImportError) as exc:
        driver = parsed.drivername
        raise ConfigError(
            "tracing url", f"cannot use {driver!r} ({exc}); install its driver or {fix}"
        ) from None


@dataclass(frozen=True, slots=True)
class Tables:
    execution: sa.Table
    status: sa.Table


def table_name(name: str, dialect: str) -> str:
    """The name to give SQLAlchemy so the table is the one Java's unquoted DDL makes.

    MySQL keeps case (on Linux) and SQLite ignores it: Java's upper-case names are used
    as they are. Other databases fold unquoted names, which SQLAlchemy does for
    lower-case names only.
    """
    return name if dialect in ("mysql", "mariadb", "sqlite", "mssql") else name.lower()


def define(metadata: sa.MetaData, dialect: str) -> Tables:
    """The two tables as this shardcron creates them on ``dialect``."""
    is_mysql = dialect in ("mysql", "mariadb")
    stamp: sa.types.TypeEngine[Any] = mysql.TIMESTAMP(fsp=6) if is_mysql else sa.TIMESTAMP()
    success: sa.types.TypeEngine[Any] = sa.Boolean() if dialect == "postgresql" else sa.Integer()
    options: dict[str, Any] = {"mysql_charset": "utf8mb4"} if is_mysql else {}

    def key() -> list[sa.Column[Any]]:
        if is_mysql:
            return [
                sa.Column("auto_id", sa.Integer, primary_key=True, autoincrement=True),
                sa.Column("id", sa.String(40), nullable=False, unique=True),
            ]
        return [sa.Column("id", sa.String(40), primary_key=True)]

    execution = sa.Table(
        table_name(EXECUTION_LOG, dialect),
        metadata,
        *key(),
        sa.Column("job_name", sa.String(100), nullable=False),
        sa.Column("task_id", sa.String(255), nullable=False),
        sa.Column("hostname", sa.String(255), nullable=False),
        sa.Column("ip", sa.String(50), nullable=False),
        sa.Column("sharding_item", sa.Integer, nullable=False),
        sa.Column("execution_source", sa.String(20), nullable=False),
        sa.Column("failure_cause", sa.String(4000), nullable=True),
        sa.Column("is_success", success, nullable=False),
        sa.Column("start_time", stamp, nullable=True),
        sa.Column("complete_time", stamp, nullable=True),
        **options,
    )
    status = sa.Table(
        table_name(STATUS_LOG, dialect),
        metadata,
        *key(),
        sa.Column("job_name", sa.String(100), nullable=False),
        sa.Column("original_task_id", sa.String(255), nullable=False),
        sa.Column("task_id", sa.String(255), nullable=False),
        sa.Column("slave_id", sa.String(50), nullable=False),
        sa.Column("source", sa.String(50), nullable=True),
        sa.Column("execution_type", sa.String(20), nullable=False),
        sa.Column("sharding_item", sa.String(100), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("message", sa.String(4000), nullable=True),
        sa.Column("creation_time", stamp, nullable=True),
        **options,
    )
    sa.Index(
        table_name(STATUS_INDEX, dialect),
        status.c.task_id,
        status.c.state,
        mysql_length={"task_id": 128},
    )
    return Tables(execution, status)


def reflect(engine: Engine) -> Tables | None:
    """The trace tables as they are in the database, or None if either is missing."""
    dialect = engine.dialect.name
    metadata = sa.MetaData()
    try:
        with engine.connect() as conn:
            tables = Tables(
                sa.Table(table_name(EXECUTION_LOG, dialect), metadata, autoload_with=conn),
                sa.Table(table_name(STATUS_LOG, dialect), metadata, autoload_with=conn),
            )
    except NoSuchTableError:
        return None
    # SQLite can name a table another worker is creating before it shows its columns;
    # an insert into a table reflected then fails to compile (IndexError, not a DB error).
    if not (len(tables.execution.columns) and len(tables.status.columns)):
        return None
    return tables


def prepare(engine: Engine) -> Tables:
    """Create the trace tables if missing (several workers may race to), then reflect them."""
    found = reflect(engine)
    if found is not None:
        return found
    metadata = sa.MetaData()
    define(metadata, engine.dialect.name)
    try:
        with engine.begin() as conn:
            metadata.create_all(conn, checkfirst=True)
    except SQLAlchemyError as exc:
        # Another worker may have created them between our check and our CREATE.
        found = reflect(engine)
        if found is None:
            raise
        logger.debug("tracing: tables appeared while creating them: %s", exc)
        return found
    logger.info("tracing: created the trace tables in %s", _masked(engine))
    found = reflect(engine)
    if found is None:
        raise SinkUnavailable("the trace tables are still being created; retrying")
    return found


# -- the sink ---------------------------------------------------------------------------------


class SqlSink:
    """Writes trace records into the two tables through SQLAlchemy Core."""

    def __init__(self, url: str | Engine, *, connect_timeout: float = 10.0) -> None:
        if isinstance(url, Engine):
            self.engine = url
        else:
            self.engine = open_engine(url, connect_timeout=connect_timeout)
        self._tables: Tables | None = None
        self.rejected = 0

    def describe(self) -> str:
        return f"trace database {_masked(self.engine)}"

    def write(self, records: Sequence[Record]) -> None:
        try:
            if self._tables is None:
                self._tables = prepare(self.engine)
            tables = self._tables
            try:
                with self.engine.begin() as conn:
                    _store(conn, tables, records)
                return
            except SQLAlchemyError as exc:
                if self._transient(exc):
                    raise
                logger.info("tracing: batch refused (%s); storing one record at a time", exc)
            # The tables may have been dropped or changed under us: look at them again.
            tables = self._tables = prepare(self.engine)
            for record in records:
                self._store_alone(tables, record)
        except (SQLAlchemyError, OSError) as exc:
            self._tables = None  # look at the tables again once back: they may be gone
            raise SinkUnavailable(_short(exc)) from exc

    def _store_alone(self, tables: Tables, record: Record) -> None:
        try:
            with self.engine.begin() as conn:
                _store(conn, tables, [record])
        except IntegrityError:
            # Its id is taken: an earlier attempt stored it but lost the commit's reply.
            logger.debug("tracing: record %s was already stored", record.id)
        except SQLAlchemyError as exc:
            if self._transient(exc):
                raise
            self.rejected += 1
            logger.warning("tracing: %s refused record %r: %s", self.describe(), record, exc)

    def _transient(self, exc: SQLAlchemyError) -> bool:
        """True if the database is out of reach, not refusing this data."""
        if isinstance(exc, DBAPIError) and exc.connection_invalidated:
            return True
        if not isinstance(exc, OperationalError | InterfaceError | sa.exc.TimeoutError):
            return False
        # Drivers raise OperationalError for schema problems too: ask whether it answers.
        try:
            with self.engine.connect() as conn:
                conn.execute(sa.select(1))
        except SQLAlchemyError:
            return True
        return False

    def close(self) -> None:
        self.engine.dispose()


def _store(conn: Connection, tables: Tables, records: Sequence[Record]) -> None:
    execution, status = tables.execution, tables.status
    starts = [r for r in records if isinstance(r, ExecutionRecord) and not r.completed]
    ends = [r for r in records if isinstance(r, ExecutionRecord) and r.completed]
    states = [r for r in records if isinstance(r, StatusRecord)]
    # Starts go first: an end in the same batch updates the row its start inserted.
    if starts:
        conn.execute(sa.insert(execution), [_row(execution, _execution_row(r)) for r in starts])
    if states:
        conn.execute(sa.insert(status), [_row(status, _status_row(r)) for r in states])
    for record in ends:
        outcome = {
            "is_success": record.is_success,
            "complete_time": record.complete_time,
            "failure_cause": record.failure_cause,
        }
        done = conn.execute(
            sa.update(execution).where(execution.c.id == record.id).values(_row(execution, outcome))
        )
        if done.rowcount == 0:
            conn.execute(sa.insert(execution).values(_row(execution, _execution_row(record))))


def _execution_row(record: ExecutionRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "job_name": record.job_name,
        "task_id": record.task_id,
        "hostname": record.hostname,
        "ip": record.ip,
        "sharding_item": record.sharding_item,
        "execution_source": record.execution_source,
        "failure_cause": record.failure_cause,
        "is_success": record.is_success,
        "start_time": record.start_time,
        "complete_time": record.complete_time,
    }


def _status_row(record: StatusRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "job_name": record.job_name,
        "original_task_id": record.original_task_id,
        "task_id": record.task_id,
        "slave_id": record.slave_id,
        "source": record.source,
        "execution_type": record.execution_type,
        "sharding_item": record.sharding_item,
        "state": record.state,
        "message": record.message,
        "creation_time": record.creation_time,
    }


def _row(table: sa.Table, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` as ``table`` takes them: known columns only, strings cut to fit."""
    row: dict[str, Any] = {}
    for name, value in values.items():
        if name not in table.c:
            continue
        column_type = table.c[name].type
        if name == "is_success" and not isinstance(column_type, sa.Boolean):
            value = int(bool(value))
        length = getattr(column_type, "length", None)
        if isinstance(value, str) and length and len(value) > length:
            value = value[:length]
        row[name] = value
    return row


def _masked(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=True)


def _short(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# -- history queries (for the console) ----------------------------------------------------------


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
