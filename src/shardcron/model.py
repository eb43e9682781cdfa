"""Small value types shared by the coordination modules and user jobs."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

INSTANCE_DELIMITER = "@-@"


def instance_id(ip: str, pid: int) -> str:
    """An instance's id as ElasticJob writes it: ``{ip}@-@{pid}``."""
    return f"{ip}{INSTANCE_DELIMITER}{pid}"


def instance_ip(instance: str) -> str:
    return instance.split(INSTANCE_DELIMITER, 1)[0]


class ServerStatus(StrEnum):
    ENABLED = "ENABLED"
    DISABLED = "DISABLED"


class ExecutionSource(StrEnum):
    NORMAL_TRIGGER = "NORMAL_TRIGGER"
    MISFIRE = "MISFIRE"
    FAILOVER = "FAILOVER"


def _always_current() -> bool:
    return True


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardingContext:
    """What one item run receives. Field names follow ElasticJob's ShardingContext.

    ``fencing_token`` grows with every claim of the item (it is the registry transaction
    id of the claim), so a stale run that wakes up after its item was taken over holds a
    lower token than the new owner. Guard side effects with it, or ask
    :meth:`claim_is_current` (one registry read) before committing work.
    """

    job_name: str
    task_id: str
    sharding_total_count: int
    job_parameter: str
    sharding_item: int
    sharding_parameter: str | None
    fencing_token: int = 0
    source: ExecutionSource = ExecutionSource.NORMAL_TRIGGER
    # The second (epoch seconds) of the fire this run is for: for a MISFIRE run, the latest
    # fire it catches up; for a FAILOVER run, the fire of the run it takes over (None if
    # that is not known: a claim made by ElasticJob, or an older shardcron).
    scheduled_fire_time: float | None = None
    _claim_check: Callable[[], bool] = field(default=_always_current, repr=False, compare=False)
    _keep_going: Callable[[], bool] = field(default=_always_current, repr=False, compare=False)

    def claim_is_current(self) -> bool:
        """True while this run still holds its item's claim in the registry."""
        return self._claim_check()

    def should_continue(self) -> bool:
        """False once the job is stopping or resharding is pending: wrap long work up."""
        return self._keep_going()

    def to_json_dict(self) -> dict[str, object]:
        """The camelCase JSON shape ElasticJob gives SCRIPT and HTTP jobs."""
        return {
            "jobName": self.job_name,
            "taskId": self.task_id,
            "shardingTotalCount": self.sharding_total_count,
            "jobParameter": self.job_parameter,
            "shardingItem": self.sharding_item,
            "shardingParameter": self.sharding_parameter,
        }


def task_id(job: str, items: list[int], ip: str, pid: int | str | None = None) -> str:
    """Java's task id format: ``{job}@-@{items}@-@READY@-@{ip}@-@{pid}``."""
    joined = ",".join(str(i) for i in items)
    return f"{job}@-@{joined}@-@READY@-@{ip}@-@{os.getpid() if pid is None else pid}"


def some(names: list[str], separator: str = ", ", limit: int = 20) -> str:
    """The first ``limit`` of ``names`` and how many more: a worker with thousands of jobs
    would otherwise write a line of hundreds of kilobytes."""
    if len(names) <= limit:
        return separator.join(names)
    return f"{separator.join(names[:limit])} and {len(names) - limit:,} more"


def item_ranges(items: Sequence[int]) -> str:
    """``items`` for a log line, consecutive ones as a range ("0-199, 400"), twenty ranges
    at most (see :func:`some`)."""
    runs: list[str] = []
    ordered = sorted(items)
    start = 0
    for n, item in enumerate(ordered):
        if n + 1 == len(ordered) or ordered[n + 1] != item + 1:
            first = ordered[start]
            runs.append(str(first) if first == item else f"{first}-{item}")
            start = n + 1
    return some(runs)


def local_ip() -> str:
    """This host's IPv4 address as instance ids use it (``SHARDCRON_IP`` overrides)."""
    override = os.environ.get("SHARDCRON_IP")
    if override:
        return override
    try:
        ip = socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"
    return ip if ip and ":" not in ip else "127.0.0.1"


def default_instance_id() -> str:
    return instance_id(local_ip(), os.getpid())


@dataclass(frozen=True, slots=True, kw_only=True)
class FireContext:
    """One fire on one instance, as listeners see it (ElasticJob's ``ShardingContexts``)."""

    job_name: str
    task_id: str
    instance: str
    sharding_total_count: int
    job_parameter: str
    items: dict[int, str | None]  # item -> its sharding parameter
    source: ExecutionSource = ExecutionSource.NORMAL_TRIGGER
