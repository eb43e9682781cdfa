"""2b. Fire lateness with many jobs in one process: shardcron on the embedded registry and
on ZooKeeper, against APScheduler 3 running the same jobs (no coordination at all).

Each run is a fresh process: ``shardcron run`` with a generated YAML of N one-item jobs
on ``* * * * * ?`` (job body ``bench.jobs:record``, every other setting at its default,
so monitorExecution is on), or ``python -m bench.apscheduler_baseline N``. After start-up
and a warm-up, every item started inside a whole-second window counts; lateness is its
start minus the second it fired for. "fires run" is how many of the N × window fires
actually started in the window: below 100 % means fires were dropped or ran over a
second late (and then their lateness, taken modulo the second, is not trustworthy).

The same runs give section 4 its memory, thread and start-up figures (:mod:`bench.scale`).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import yaml

from bench.common import (
    BenchZooKeeper,
    Spread,
    lateness_ms,
    next_half_second,
    registry_url,
    sleep_until,
    spawn,
    starts,
    terminate,
    wait_until,
)
from bench.jobs import INSTANCE_ENV, LEDGER_ENV
from bench.report import MISSED, Table, ms, num, ratio, verdict
from bench.worker import proc_cpu_seconds, proc_status
from shardcron.testing.zookeeper import unique_namespace

INSTANCE = "127.0.0.1@-@7001"
SESSION_MS = 10_000  # shardcron's default


class Engine(StrEnum):
    MEMORY = "shardcron, embedded registry"
    ZOOKEEPER = "shardcron, ZooKeeper"
    APSCHEDULER = "APScheduler 3.11"


@dataclass(frozen=True)
class Timing:
    warmup: float
    window: int
    start_cap: float  # a process that has not started every job by then is stopped


FULL_TIMING = Timing(warmup=1.5, window=5, start_cap=25.0)
QUICK_TIMING = Timing(warmup=1.0, window=3, start_cap=15.0)


@dataclass(frozen=True)
class ManyResult:
    engine: Engine
    jobs: int
    launch_to_ready: float  # seconds: the process says it has started every job
    launch_to_first_item: float
    lateness: Spread  # ms
    runs: int
    expected: int
    rss_kb: int
    threads: int
    cpu_percent: float  # of one core, over the window
    complete: bool = True  # every job started within the cap
    started: int = 0  # jobs started, when not complete
    cap: float = 0.0

    @property
    def fires_run(self) -> float:
        return self.runs / self.expected if self.expected else math.nan


def _shardcron_command(engine: Engine, jobs: int, zk: BenchZooKeeper, tmp: Path) -> list[str]:
    name = f"many-{jobs}-{'mem' if engine is Engine.MEMORY else 'zk'}"
    config = tmp / f"{name}.yaml"
    spec = {
        "callable": "bench.jobs:record",
        "cron": "* * * * * ?",
        "shardingTotalCount": 1,
        "overwrite": True,
    }
    config.write_text(yaml.safe_dump({"jobs": {f"j{n:04d}": spec for n in range(jobs)}}))
    namespace = unique_namespace("many")
    url = (
        f"memory://{namespace}"
        if engine is Engine.MEMORY
        else registry_url(zk, namespace, SESSION_MS)
    )
    cli = [sys.executable, "-m", "shardcron", "run", str(config), "--registry", url]
    return [*cli, "--instance-id", INSTANCE]


def run_many(
    engine: Engine, jobs: int, zk: BenchZooKeeper, tmp: Path, timing: Timing
) -> ManyResult:
    tag = f"{engine.name.lower()}-{jobs}"
    ledger, log = tmp / f"{tag}.ledger", tmp / f"{tag}.log"
    if engine is Engine.APSCHEDULER:
        cmd = [sys.executable, "-m", "bench.apscheduler_baseline", str(jobs)]
        ready_mark = "ready"
    else:
        cmd = _shardcron_command(engine, jobs, zk, tmp)
        ready_mark = "shardcron worker"
    env = {LEDGER_ENV: str(ledger), INSTANCE_ENV: INSTANCE}
    launched = time.time()
    proc = spawn(cmd, log, env)
    try:
        try:
            wait_until(
                lambda: proc.poll() is not None or ready_mark in log.read_text(errors="replace"),
                timing.start_cap,
                f"{tag} to start",
            )
        except TimeoutError:
            return _incomplete(engine, jobs, proc.pid, log, launched, timing)
        ready = time.time()
        if proc.poll() is not None:
            raise RuntimeError(f"{tag} exited: {log.read_text(errors='replace')[-2000:]}")
        first = wait_until(lambda: starts(ledger)[:1], 30, f"{tag}'s first item")[0]["start"]
        time.sleep(timing.warmup)
        t0 = next_half_second(time.time())
        sleep_until(t0)
        cpu0 = proc_cpu_seconds(proc.pid)
        sleep_until(t0 + timing.window)
        cpu1 = proc_cpu_seconds(proc.pid)
        status = proc_status(proc.pid)
        time.sleep(0.3)  # items of the last second finish writing
    finally:
        terminate([proc])
    window = [r for r in starts(ledger) if t0 <= r["start"] <= t0 + timing.window]
    return ManyResult(
        engine=engine,
        jobs=jobs,
        launch_to_ready=ready - launched,
        launch_to_first_item=first - launched,
        lateness=Spread.of([lateness_ms(r["start"]) for r in window]),
        runs=len(window),
        expected=jobs * timing.window,
        rss_kb=status.get("VmRSS", 0),
        threads=status.get("Threads", 0),
        cpu_percent=(cpu1 - cpu0) / timing.window * 100,
    )


def _incomplete(
    engine: Engine, jobs: int, pid: int, log: Path, launched: float, timing: Timing
) -> ManyResult:
    status = proc_status(pid)
    return ManyResult(
        engine=engine,
        jobs=jobs,
        launch_to_ready=math.nan,
        launch_to_first_item=math.nan,
        lateness=Spread.of([]),
        runs=0,
        expected=0,
        rss_kb=status.get("VmRSS", 0),
        threads=status.get("Threads", 0),
        cpu_percent=math.nan,
        complete=False,
        started=log.read_text(errors="replace").count(" started on "),
        cap=timing.start_cap,
    )


class Runs:
    """Each (engine, jobs) run once per bench, shared by sections 2b and 4."""

    def __init__(self, zk: BenchZooKeeper, tmp: Path, timing: Timing) -> None:
        self.zk, self.tmp, self.timing = zk, tmp, timing
        self._done: dict[tuple[Engine, int], ManyResult] = {}

    def get(self, engine: Engine, jobs: int) -> ManyResult:
        key = (engine, jobs)
        if key not in self._done:
            self._done[key] = run_many(engine, jobs, self.zk, self.tmp, self.timing)
        return self._done[key]


JOB_COUNTS = (1, 100, 1000)
QUICK_JOB_COUNTS = (1, 100)


def run(runs: Runs, quick: bool) -> list[Table]:
    counts = QUICK_JOB_COUNTS if quick else JOB_COUNTS
    table = Table(
        "2b. Fire lateness with N every-second jobs in one process, vs APScheduler 3",
        [
            "jobs",
            "engine",
            "fires run",
            "p50 ms",
            "p90 ms",
            "p99 ms",
            "max ms",
            "CPU % of a core",
            "ratio p50 (vs APScheduler)",
            "ratio p99 (vs APScheduler)",
            "target at 100 jobs: not worse than APScheduler",
        ],
    )
    for jobs in counts:
        base = runs.get(Engine.APSCHEDULER, jobs)
        for engine in (Engine.MEMORY, Engine.ZOOKEEPER, Engine.APSCHEDULER):
            result = base if engine is Engine.APSCHEDULER else runs.get(engine, jobs)
            late = result.lateness
            target = "–"
            if not result.complete:
                target = f"{MISSED}: {result.started}/{jobs} jobs started in {result.cap:g} s"
            elif jobs == 100 and engine is not Engine.APSCHEDULER:
                target = verdict(late.p50 <= base.lateness.p50 and late.p99 <= base.lateness.p99)
            table.add(
                jobs,
                engine,
                f"{result.fires_run:.1%}" if result.complete else "–",
                ms(late.p50),
                ms(late.p90),
                ms(late.p99),
                ms(late.max),
                num(result.cpu_percent, 0),
                ratio(late.p50, base.lateness.p50) if engine is not Engine.APSCHEDULER else "1",
                ratio(late.p99, base.lateness.p99) if engine is not Engine.APSCHEDULER else "1",
                target,
            )
    table.notes += [
        (
            f"One fresh process per row; {runs.timing.window} s window after a "
            f"{runs.timing.warmup:g} s warm-up; shardcron jobs at their defaults "
            "(monitorExecution on: one claim and one completion round trip per fire)."
        ),
        "APScheduler runs the same job body on a 32-thread pool (shardcron's pool size).",
    ]
    return [table]
