"""A trace sink that writes one log line per record (logger ``shardcron.trace``).

It needs no database, so it is what :func:`~shardcron.tracing.open_tracer` gives when no
URL is configured; log shippers can pick the lines up from there.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from shardcron.tracing.records import ExecutionRecord, Record


class LogSink:
    def __init__(self, logger: str = "shardcron.trace", level: int = logging.INFO) -> None:
        self.logger = logging.getLogger(logger)
        self.level = level

    def write(self, records: Sequence[Record]) -> None:
        for record in records:
            self.logger.log(self.level, "%s", describe(record))

    def close(self) -> None:
        pass

    def describe(self) -> str:
        return f"log sink {self.logger.name!r}"


def describe(record: Record) -> str:
    """One line per record: who ran what, and how it ended."""
    if isinstance(record, ExecutionRecord):
        head = (
            f"job {record.job_name} item {record.sharding_item} ({record.execution_source}) "
            f"on {record.ip}"
        )
        if not record.completed:
            return f"{head} started; task {record.task_id}"
        outcome = "succeeded" if record.is_success else "failed"
        line = f"{head} {outcome} in {record.seconds:.3f}s"
        if record.failure_cause:
            # The traceback's last line names the error; the full text is in the database.
            line += ": " + record.failure_cause.rstrip().splitlines()[-1]
        return line
    message = f": {record.message}" if record.message else ""
    return (
        f"job {record.job_name} {record.execution_type} fire of items {record.sharding_item} "
        f"on {record.slave_id} {record.state}{message}; task {record.task_id}"
    )
