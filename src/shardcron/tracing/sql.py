"""The SQL sink: trace records written into ElasticJob's tables through SQLAlchemy Core.

The sink opens the database (:func:`open_engine`), creates the tables if missing
(:func:`prepare`; :mod:`shardcron.tracing.schema` says what they look like on each
database) and writes each batch in one transaction. Strings longer than their column
are cut to fit rather than failing the insert. The history queries on the tables live
in :mod:`shardcron.tracing.history` and are importable from here too.

Faults: a database that cannot be reached makes :meth:`SqlSink.write` raise
:class:`~shardcron.tracing.SinkUnavailable` (the tracer retries later, and the pool's
pre-ping replaces dead connections); a record the database refuses is logged and
skipped, without losing the rest of its batch.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    IntegrityError,
    InterfaceError,
    NoSuchModuleError,
    OperationalError,
    SQLAlchemyError,
)

from shardcron.errors import ConfigError
from shardcron.tracing.history import (
    MAX_PAGE,
    JobSummary,
    Page,
    RunPoint,
    executions,
    job_summaries,
    recent_runs,
    statuses,
)
from shardcron.tracing.records import ExecutionRecord, Record, SinkUnavailable, StatusRecord
from shardcron.tracing.schema import (
    EXECUTION_LOG,
    STATUS_INDEX,
    STATUS_LOG,
    Tables,
    define,
    reflect,
    table_name,
)

# The history queries and the table definitions are re-exported: both were documented
# as shardcron.tracing.sql before they had modules of their own.
__all__ = [
    "EXECUTION_LOG",
    "MAX_PAGE",
    "STATUS_INDEX",
    "STATUS_LOG",
    "JobSummary",
    "Page",
    "RunPoint",
    "SqlSink",
    "Tables",
    "define",
    "executions",
    "job_summaries",
    "open_engine",
    "prepare",
    "recent_runs",
    "reflect",
    "statuses",
    "table_name",
]

logger = logging.getLogger(__name__)


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
