"""The trace tables: ElasticJob's two tables, as defined on each database and as found.

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
as in Java. Times are naive local time, as Java writes them. The tables are created by
:func:`shardcron.tracing.sql.prepare` and read by :mod:`shardcron.tracing.history`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import Engine
from sqlalchemy.exc import NoSuchTableError

EXECUTION_LOG = "JOB_EXECUTION_LOG"
STATUS_LOG = "JOB_STATUS_TRACE_LOG"
STATUS_INDEX = "TASK_ID_STATE_INDEX"


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
