"""Trace records, shaped like ElasticJob's two trace tables, and the sinks that store them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from shardcron.errors import ShardcronError

TEXT_LIMIT = 4000  # failure_cause and message are VARCHAR(4000) in the Java tables
LITE_EXECUTOR = "LITE_EXECUTOR"  # the status ``source`` ElasticJob's console expects
DROP_REPORT_SECONDS = 30.0


class SinkUnavailable(ShardcronError):
    """A sink cannot store records right now (e.g. the database is down); retry later."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionRecord:
    """One item run: a ``JOB_EXECUTION_LOG`` row. Times are naive local, as Java writes them."""

    id: str
    job_name: str
    task_id: str
    hostname: str
    ip: str
    sharding_item: int
    execution_source: str
    start_time: datetime
    complete_time: datetime | None = None
    is_success: bool = False
    failure_cause: str | None = None

    @property
    def completed(self) -> bool:
        return self.complete_time is not None

    @property
    def seconds(self) -> float | None:
        if self.complete_time is None:
            return None
        return (self.complete_time - self.start_time).total_seconds()


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusRecord:
    """One state of one fire on one instance: a ``JOB_STATUS_TRACE_LOG`` row."""

    id: str
    job_name: str
    original_task_id: str
    task_id: str
    slave_id: str  # the instance's IP
    source: str
    execution_type: str  # READY, or FAILOVER for a fire that runs a failed-over item
    sharding_item: str  # the fire's items as Java prints a list: "[0, 1]"
    state: str
    message: str | None
    creation_time: datetime


Record = ExecutionRecord | StatusRecord


class Sink(Protocol):
    """Stores records; called on the tracer's writer thread only."""

    def write(self, records: Sequence[Record]) -> None:
        """Store ``records`` in order; raise :class:`SinkUnavailable` to get them again later."""
        ...

    def close(self) -> None: ...
