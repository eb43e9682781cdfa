"""What happens to jobs, as events: tracing, metrics and tests subscribe to them.

A scheduler hands every event to each of its observers (plain callables taking an
:class:`Event`) on the thread where it happened; observers must be quick and must not
raise (a slow sink queues, see :mod:`shardcron.tracing`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from shardcron.model import ExecutionSource, ShardingContext


class FireState(StrEnum):
    """ElasticJob's job status trace states, per fire and instance."""

    TASK_STAGING = "TASK_STAGING"
    TASK_RUNNING = "TASK_RUNNING"
    TASK_FINISHED = "TASK_FINISHED"
    TASK_ERROR = "TASK_ERROR"


def _now() -> float:
    return time.time()


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    job_name: str
    instance: str
    at: float = field(default_factory=_now)


@dataclass(frozen=True, slots=True, kw_only=True)
class FireStatus(Event):
    """A fire on one instance moved to ``state``; ``message`` says why for ERROR/FINISHED."""

    task_id: str
    items: tuple[int, ...]
    source: ExecutionSource
    state: FireState
    message: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ItemStarted(Event):
    context: ShardingContext
    ip: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ItemFinished(Event):
    context: ShardingContext
    ip: str
    started_at: float
    error: BaseException | None = None

    @property
    def success(self) -> bool:
        return self.error is None

    @property
    def seconds(self) -> float:
        return self.at - self.started_at


@dataclass(frozen=True, slots=True, kw_only=True)
class ItemsSkipped(Event):
    """Items of a fire that did not run; ``misfire`` when they will run once they can.
    ``fire_time`` is the second of that fire (for a MISFIRE or FAILOVER ``source``: of the
    fire the skipped run stood for)."""

    items: tuple[int, ...]
    reason: str
    misfire: bool
    fire_time: float = 0.0
    source: ExecutionSource = ExecutionSource.NORMAL_TRIGGER


@dataclass(frozen=True, slots=True, kw_only=True)
class Resharded(Event):
    assignment: dict[str, list[int]]


@dataclass(frozen=True, slots=True, kw_only=True)
class FailoverClaimed(Event):
    item: int


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderChanged(Event):
    """This instance became (``leader``) or stopped being the job's leader."""

    leader: bool


Observer = Callable[[Event], None]
