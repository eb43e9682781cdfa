"""Job bodies the bench runs, and the ledger they write.

Every item run appends one JSON line to the file named by ``SHARDCRON_BENCH_LEDGER`` the
moment it starts (wall clock first, before anything else), and, when the item holds for a
while, a second line when it ends. Lines go out with one ``write`` on an ``O_APPEND``
descriptor, so processes sharing a ledger never interleave. Lateness, failover delays and
assignments are all computed afterwards from these lines, in the bench process.

``record`` is the callable ``shardcron run`` workers name in their YAML
(``bench.jobs:record``); ``recorder`` makes the body of one in-code instance;
``record_plain`` is the same body for APScheduler, which passes no context.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from collections.abc import Callable

from shardcron.model import ShardingContext

LEDGER_ENV = "SHARDCRON_BENCH_LEDGER"
INSTANCE_ENV = "SHARDCRON_INSTANCE"
HOLD_ENV = "SHARDCRON_BENCH_HOLD"

_fd: int | None = None
_fd_lock = threading.Lock()
_runs = itertools.count()


def _ledger() -> int:
    global _fd
    if _fd is None:
        with _fd_lock:
            if _fd is None:
                path = os.environ[LEDGER_ENV]
                _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    return _fd


def append(record: dict[str, object]) -> None:
    os.write(_ledger(), (json.dumps(record, separators=(",", ":")) + "\n").encode())


def run_item(instance: str, job: str, item: int, source: str, hold: float) -> None:
    start = time.time()
    run = f"{os.getpid()}-{next(_runs)}"
    append(
        {
            "phase": "start",
            "run": run,
            "start": start,
            "job": job,
            "item": item,
            "instance": instance,
            "source": source,
        }
    )
    if hold > 0:
        time.sleep(hold)  # the item's work
        append({"phase": "end", "run": run, "end": time.time()})


def record(ctx: ShardingContext) -> None:
    """The ``shardcron run`` job body: instance and hold come from the environment."""
    hold = float(os.environ.get(HOLD_ENV, "0"))
    instance = os.environ.get(INSTANCE_ENV, "")
    run_item(instance, ctx.job_name, ctx.sharding_item, str(ctx.source), hold)


def recorder(instance: str, hold: float) -> Callable[[ShardingContext], None]:
    """The body of one in-code instance; several instances may share a process."""

    def job(ctx: ShardingContext) -> None:
        run_item(instance, ctx.job_name, ctx.sharding_item, str(ctx.source), hold)

    return job


def record_plain(job: str) -> None:
    """The APScheduler body: the same record for item 0 of ``job``."""
    run_item("apscheduler", job, 0, "NORMAL_TRIGGER", 0.0)
