"""Execution tracing: a history of what ran where, in a log or a database.

A :class:`Tracer` is an observer. It turns scheduler events into records shaped like
ElasticJob's two trace tables and hands them to sinks:

* :class:`ExecutionRecord`: one per item run. It is emitted twice with the same ``id``:
  when the item starts (``complete_time`` is None) and when it ends (with the outcome,
  and the failure's traceback cut to 4000 characters).
* :class:`StatusRecord`: the life of one fire on one instance: ``TASK_STAGING``,
  ``TASK_RUNNING``, then ``TASK_FINISHED`` or ``TASK_ERROR`` (whose message names each
  failed item). Items skipped because they were still running get a ``TASK_STAGING`` and
  a ``TASK_FINISHED`` saying so, as ElasticJob traces a misfire.

The observer only enqueues. One writer thread feeds the sinks from a bounded queue, so a
slow or unreachable database never delays a fire: when the queue is full, new records
are dropped, counted and reported in the log (at most every 30 seconds). A sink that
raises :class:`SinkUnavailable` gets the same batch again, with a growing delay, until
it takes it; meanwhile the queue keeps the oldest records and drops the newest.

Tracing settings stay on the worker (a URL given to :func:`open_tracer`); unlike
ElasticJob, nothing about the database, least of all its credentials, is written to the
registry.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from shardcron.config.secrecy import redact_text
from shardcron.coordination.events import (
    Event,
    FireState,
    FireStatus,
    ItemFinished,
    ItemsSkipped,
    ItemStarted,
)
from shardcron.model import INSTANCE_DELIMITER, ExecutionSource, instance_ip, task_id
from shardcron.tracing.records import (
    DROP_REPORT_SECONDS,
    LITE_EXECUTOR,
    TEXT_LIMIT,
    ExecutionRecord,
    Record,
    Sink,
    SinkUnavailable,
    StatusRecord,
)

# Not named ``log``: the ``log`` submodule would replace it as a package attribute.
logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TraceStats:
    offered: int  # records made from events
    delivered: int  # taken by every sink
    dropped: int  # not queued: the queue was full, or the tracer closed
    rejected: int  # refused by a sink for good (its error was logged)
    lost: int  # still queued when close() gave up waiting
    retries: int  # batches offered again to a sink that was unavailable
    pending: int  # queued or being written now


class Tracer:
    """An observer that records executions and fire states through ``sinks``.

    ``capacity`` bounds the records waiting for the writer; ``retry_delay`` is the first
    pause after a sink was unavailable, doubled up to ``max_retry_delay``.
    """

    def __init__(
        self,
        sinks: Sequence[Sink],
        *,
        capacity: int = 10_000,
        batch_size: int = 200,
        retry_delay: float = 0.5,
        max_retry_delay: float = 30.0,
        hostname: str | None = None,
    ) -> None:
        self.sinks = list(sinks)
        self.hostname = hostname or socket.gethostname()
        self._batch_size = batch_size
        self._retry_delay = retry_delay
        self._max_retry_delay = max_retry_delay
        self._queue: queue.Queue[Record] = queue.Queue(capacity)
        self._started: dict[int, str] = {}  # id() of a running item's context -> row id
        self._counts = threading.Condition()
        self._offered = self._delivered = self._dropped = 0
        self._rejected = self._lost = self._retries = self._pending = 0
        self._dropped_reported = 0
        self._next_report = 0.0
        self._closed = False
        self._stopping = threading.Event()
        self._abandon = threading.Event()
        self._writer = threading.Thread(target=self._run, name="shardcron-tracer", daemon=True)
        self._writer.start()

    # -- the observer (any scheduler thread) -----------------------------------------------

    def __call__(self, event: Event) -> None:
        try:
            for record in self.records_for(event):
                self._offer(record)
        except Exception:  # an observer must never fail a fire
            logger.exception("tracing: could not record %s", type(event).__name__)

    def records_for(self, event: Event) -> list[Record]:
        """The trace records of one event (none for events that are not traced)."""
        at = datetime.fromtimestamp(event.at)
        if isinstance(event, ItemStarted):
            row_id = str(uuid.uuid4())
            # The runtime hands the same context object to the item's start and end events.
            self._started[id(event.context)] = row_id
            return [self._execution(event, row_id, at)]
        if isinstance(event, ItemFinished):
            row_id = self._started.pop(id(event.context), "") or str(uuid.uuid4())
            started = self._execution(event, row_id, datetime.fromtimestamp(event.started_at))
            cause = None if event.error is None else failure_cause(event.error)
            return [
                replace(started, complete_time=at, is_success=event.success, failure_cause=cause)
            ]
        if isinstance(event, FireStatus):
            return [
                self._status(
                    event, event.task_id, event.items, event.state, event.message, event.source
                )
            ]
        if isinstance(event, ItemsSkipped):
            tid = _task_id_of(event.job_name, event.items, event.instance)
            what = "misfired: they run once the current run ends" if event.misfire else "not run"
            fire = (
                f" of the fire of {datetime.fromtimestamp(event.fire_time, UTC).isoformat()}"
                if event.fire_time
                else ""
            )
            message = f"items {list(event.items)}{fire} skipped ({event.reason}); {what}"
            return [
                self._status(event, tid, event.items, FireState.TASK_STAGING, ""),
                self._status(event, tid, event.items, FireState.TASK_FINISHED, message),
            ]
        return []

    def _execution(
        self, event: ItemStarted | ItemFinished, row_id: str, start: datetime
    ) -> ExecutionRecord:
        ctx = event.context
        return ExecutionRecord(
            id=row_id,
            job_name=ctx.job_name,
            task_id=ctx.task_id,
            hostname=self.hostname,
            ip=event.ip,
            sharding_item=ctx.sharding_item,
            execution_source=str(ctx.source),
            start_time=start,
        )

    def _status(
        self,
        event: Event,
        tid: str,
        items: tuple[int, ...],
        state: FireState,
        message: str,
        source: ExecutionSource = ExecutionSource.NORMAL_TRIGGER,
    ) -> StatusRecord:
        return StatusRecord(
            id=str(uuid.uuid4()),
            job_name=event.job_name,
            original_task_id="",
            task_id=tid,
            slave_id=instance_ip(event.instance),
            source=LITE_EXECUTOR,
            execution_type="FAILOVER" if source is ExecutionSource.FAILOVER else "READY",
            sharding_item="[" + ", ".join(str(i) for i in items) + "]",
            state=str(state),
            message=redact_text(message)[:TEXT_LIMIT],
            creation_time=datetime.fromtimestamp(event.at),
        )

    def _offer(self, record: Record) -> None:
        with self._counts:
            self._offered += 1
            if not self._closed:
                try:
                    self._queue.put_nowait(record)
                    self._pending += 1
                    return
                except queue.Full:
                    pass
            self._dropped += 1
            now = time.monotonic()
            if now < self._next_report:
                return
            self._next_report = now + DROP_REPORT_SECONDS
            fresh, self._dropped_reported = self._dropped - self._dropped_reported, self._dropped
        logger.warning(
            "tracing: %d records dropped (queue of %d full, or tracer closed); %d in all",
            fresh,
            self._queue.maxsize,
            self._dropped_reported,
        )

    # -- the writer thread -------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                batch = [self._queue.get(timeout=0.1)]
            except queue.Empty:
                if self._stopping.is_set():
                    return
                continue
            while len(batch) < self._batch_size:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            delivered = self._deliver(batch)
            with self._counts:
                self._pending -= len(batch)
                if delivered:
                    self._delivered += len(batch)
                self._counts.notify_all()
            if self._abandon.is_set():
                return

    def _deliver(self, batch: list[Record]) -> bool:
        """Offer ``batch`` to every sink until each took or refused it; True if all took it."""
        waiting, delay, clean = list(self.sinks), self._retry_delay, True
        while True:
            for sink in list(waiting):
                try:
                    sink.write(batch)
                except SinkUnavailable as exc:
                    logger.warning(
                        "tracing: %s unavailable (%s); retrying in %.1fs", _name(sink), exc, delay
                    )
                    continue
                except Exception:
                    logger.exception("tracing: %s refused %d records", _name(sink), len(batch))
                    clean = False
                    with self._counts:
                        self._rejected += len(batch)
                waiting.remove(sink)
            if not waiting:
                return clean
            if self._abandon.wait(delay):
                return False
            delay = min(delay * 2, self._max_retry_delay)
            with self._counts:
                self._retries += 1

    # -- control ------------------------------------------------------------------------------

    def stats(self) -> TraceStats:
        with self._counts:
            return TraceStats(
                offered=self._offered,
                delivered=self._delivered,
                dropped=self._dropped,
                rejected=self._rejected,
                lost=self._lost,
                retries=self._retries,
                pending=self._pending,
            )

    def flush(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds until every queued record was handled."""
        deadline = time.monotonic() + timeout
        with self._counts:
            while self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._counts.wait(left)
        return True

    def close(self, timeout: float = 10.0) -> bool:
        """Stop taking records, write what is queued (up to ``timeout``), close the sinks.

        Returns False if records were still unwritten at the deadline; they are counted
        as lost and the writer thread is left to finish its current attempt.
        """
        with self._counts:
            self._closed = True
        self._stopping.set()
        flushed = self.flush(timeout)
        if not flushed:
            self._abandon.set()
            with self._counts:
                self._lost = self._pending
            logger.warning("tracing: closed with %d records unwritten", self._lost)
            return False
        self._writer.join(1.0)
        for sink in self.sinks:
            try:
                sink.close()
            except Exception:
                logger.exception("tracing: could not close %s", _name(sink))
        return True


def failure_cause(error: BaseException) -> str:
    """The error's traceback as the execution log keeps it: at most 4000 characters."""
    text = "".join(traceback.format_exception(error))
    return redact_text(text)[:TEXT_LIMIT]  # a trace row is read by every console user


def open_tracer(
    url: str | None,
    *,
    capacity: int = 10_000,
    also_log: bool = False,
    connect_timeout: float = 10.0,
) -> Tracer:
    """A tracer writing to the SQLAlchemy database ``url``, or only to the log if None.

    ``url`` is e.g. ``sqlite:///shardcron-trace.db``,
    ``postgresql+psycopg://user@host:5432/db`` or ``mysql+pymysql://user@host:3306/db``.
    A bad URL or a missing driver raises :class:`~shardcron.errors.ConfigError` at once; an
    unreachable database does not: records queue until it answers.
    """
    from shardcron.tracing.log import LogSink

    if url is None:
        return Tracer([LogSink()], capacity=capacity)
    from shardcron.tracing.sql import SqlSink

    sinks: list[Sink] = [SqlSink(url, connect_timeout=connect_timeout)]
    if also_log:
        sinks.append(LogSink())
    return Tracer(sinks, capacity=capacity)


def _task_id_of(job: str, items: tuple[int, ...], instance: str) -> str:
    """The task id the runtime gives a fire of ``items`` on ``instance``."""
    return task_id(job, list(items), instance_ip(instance), instance.split(INSTANCE_DELIMITER)[-1])


def _name(sink: Sink) -> str:
    describe = getattr(sink, "describe", None)
    return str(describe()) if callable(describe) else type(sink).__name__


__all__ = [
    "DROP_REPORT_SECONDS",
    "LITE_EXECUTOR",
    "TEXT_LIMIT",
    "ExecutionRecord",
    "Record",
    "Sink",
    "SinkUnavailable",
    "StatusRecord",
    "TraceStats",
    "Tracer",
    "failure_cause",
    "open_tracer",
]
