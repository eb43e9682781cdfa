"""Job bodies the bench runs, and the ledger they write.

Every item run appends one JSON line to the file named by ``SHARDCRON_BENCH_LEDGER`` the
moment it starts (wall clock first, before anything else), and, when the item holds for a
while, a second line when it ends. Lines go out with one ``write`` on an ``O_APPEND``
descriptor, so processes sharing a ledger never interleave. Lateness, failover delays and
assignments are all computed afterwards from these lines, in the bench process.

``record`` is the callable ``shardcron run`` workers name in their YAML
(``bench.jobs:record``); ``recorder`` makes the body of one in-code instance;
``record_plain`` is the same body for APScheduler, which passes no context.

The body is cheap on purpose: a herd worker runs 10,000 of them back to back, so what one
costs after its start is taken delays the starts of all those after it. It reads the
environment and the pid once, and writes its line with an f-string and the ``json``
module's C string quoting (``json.dumps`` builds an encoder per call when given
separators): 2.6–3.7 µs a call where it was 22 µs on a 51 ns machine (``body_us`` measures
it; the bench prints it with the machine).
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import tempfile
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
_PID = os.getpid()  # workers are started by exec, never forked after this import
_quote = json.encoder.encode_basestring_ascii  # what json.dumps does to a str, in C


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


def start_line(run: str, start: float, job: str, item: int, instance: str, source: str) -> bytes:
    """The JSON line of an item's start, as ``json.dumps`` would write it compactly."""
    return (
        f'{{"phase":"start","run":"{run}","start":{start!r},"job":{_quote(job)},'
        f'"item":{item},"instance":{_quote(instance)},"source":{_quote(source)}}}\n'
    ).encode()


def run_item(instance: str, job: str, item: int, source: str, hold: float) -> None:
    start = time.time()
    run = f"{_PID}-{next(_runs)}"
    os.write(_ledger(), start_line(run, start, job, item, instance, source))
    if hold > 0:
        time.sleep(hold)  # the item's work
        append({"phase": "end", "run": run, "end": time.time()})


@functools.cache
def _settings() -> tuple[str, float]:
    """This worker's instance and hold, from its environment (set before it started)."""
    return os.environ.get(INSTANCE_ENV, ""), float(os.environ.get(HOLD_ENV, "0"))


def record(ctx: ShardingContext) -> None:
    """The ``shardcron run`` job body: instance and hold come from the environment."""
    instance, hold = _settings()
    run_item(instance, ctx.job_name, ctx.sharding_item, str(ctx.source), hold)


def recorder(instance: str, hold: float) -> Callable[[ShardingContext], None]:
    """The body of one in-code instance; several instances may share a process."""

    def job(ctx: ShardingContext) -> None:
        run_item(instance, ctx.job_name, ctx.sharding_item, str(ctx.source), hold)

    return job


def record_plain(job: str) -> None:
    """The APScheduler body: the same record for item 0 of ``job``."""
    run_item("apscheduler", job, 0, "NORMAL_TRIGGER", 0.0)


def body_us() -> float:
    """Microseconds a start costs the body after its start is taken (its line built and
    written to a scratch file), best of three."""
    with tempfile.TemporaryFile() as scratch:
        fd = scratch.fileno()
        best = float("inf")
        for _ in range(3):
            began = time.perf_counter()
            for n in range(10_000):
                os.write(fd, start_line(f"1-{n}", time.time(), "job-1", 0, "127.0.0.1@-@1", "x"))
            best = min(best, time.perf_counter() - began)
    return best / 10_000 * 1e6
