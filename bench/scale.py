"""4. Jobs per process and start-up: threads, resident memory and lateness of one
``shardcron run`` worker with 1, 100, 1,000 and 5,000 every-second jobs on ZooKeeper,
next to APScheduler 3 with the same jobs; and the time from launch to the first item.

Threads and ``VmRSS`` come from ``/proc/PID/status`` of the fresh worker process at the
end of its lateness window (the runs are shared with section 2b). A run that cannot
start all its jobs within the cap is stopped and reported as such.

Start-up: ``shardcron run`` with one ``* * * * * ?`` job on ZooKeeper is launched five
times, at five different points of the second (the first fire waits for the next whole
second, 0–1 s, as the baseline's Quartz trigger did); launch is the moment just before
``exec``, the first item is the ledger's first start.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from pathlib import Path

from bench.common import BenchZooKeeper, registry_url, sleep_until, spawn, starts, terminate
from bench.common import wait_until as wait
from bench.jobs import INSTANCE_ENV, LEDGER_ENV
from bench.lateness import INSTANCE, SESSION_MS, Engine, ManyResult, Runs
from bench.report import MISSED, Table, ms, num, verdict
from shardcron.testing import unique_namespace

JOB_COUNTS = (1, 100, 1000, 5000)
QUICK_JOB_COUNTS = (1, 100)
LAUNCH_PHASES = (0.0, 0.2, 0.4, 0.6, 0.8)
QUICK_LAUNCH_PHASES = (0.0, 0.5)

TARGET_RSS_MIB = 50.0
TARGET_PER_JOB_KB = 100.0
TARGET_FIRST_ITEM_S = 1.5
# Reference §4.1 (launch → first item, median, N=3 default JVM) and §4.2 (the RSS floor,
# and threads per JVM with one job).
JAVA_FIRST_ITEM_S = 2.081
JAVA_RSS_MIB = 100.0
JAVA_THREADS = 33


def launch_to_first_item(zk: BenchZooKeeper, tmp: Path, phase: float) -> float:
    namespace = unique_namespace("boot")
    config = tmp / f"{namespace}.yaml"
    config.write_text(
        "jobs:\n  boot:\n    callable: bench.jobs:record\n    cron: '* * * * * ?'\n"
        "    shardingTotalCount: 1\n"
    )
    ledger = tmp / f"{namespace}.ledger"
    url = registry_url(zk, namespace, SESSION_MS)
    cmd = [sys.executable, "-m", "shardcron.cli", "run", str(config), "--registry", url]
    sleep_until(math.floor(time.time()) + 1 + phase)
    launched = time.time()
    proc = spawn(
        [*cmd, "--instance-id", INSTANCE],
        tmp / f"{namespace}.log",
        {LEDGER_ENV: str(ledger), INSTANCE_ENV: INSTANCE},
    )
    try:
        first = wait(lambda: starts(ledger)[:1], 30, "the first item")[0]["start"]
    finally:
        terminate([proc])
    return float(first - launched)


def _row(table: Table, result: ManyResult, one: ManyResult) -> None:
    rss_mib = result.rss_kb / 1024
    if result.complete and result.jobs > 1:
        per_job = (result.rss_kb - one.rss_kb) / (result.jobs - 1)
        per_job_text = f"{per_job:.1f}"
    else:
        per_job = math.nan
        per_job_text = "–"
    late = result.lateness
    shardcron = result.engine is not Engine.APSCHEDULER
    if not result.complete:
        status = f"{MISSED}: {result.started}/{result.jobs} jobs started in {result.cap:g} s"
    elif not shardcron:
        status = "baseline"
    else:
        ok = result.threads <= one.threads + POOL_THREADS
        if result.jobs == 1:
            ok = ok and rss_mib <= TARGET_RSS_MIB
        else:
            ok = ok and per_job <= TARGET_PER_JOB_KB
        status = verdict(ok)
    table.add(
        result.jobs,
        result.engine,
        result.threads or "–",
        num(rss_mib),
        per_job_text,
        f"{ms(late.p50)} / {ms(late.p99)}" if result.complete else "–",
        f"{result.fires_run:.1%}" if result.complete else "–",
        num(result.launch_to_ready, 2),
        status,
    )


POOL_THREADS = 32  # a Scheduler's worker pool grows up to this many threads, whatever the jobs


def run(zk: BenchZooKeeper, tmp: Path, runs: Runs, quick: bool) -> list[Table]:
    counts = QUICK_JOB_COUNTS if quick else JOB_COUNTS
    table = Table(
        "4a. Jobs per process: one worker with N every-second jobs (ZooKeeper), vs APScheduler 3",
        [
            "jobs",
            "engine",
            "threads",
            "RSS MiB",
            "KiB per extra job",
            "lateness p50 / p99 ms",
            "fires run",
            "launch → all jobs started (s)",
            "target: ≤ 50 MiB at 1 job, < 100 KiB per job, threads bounded",
        ],
    )
    for engine in (Engine.ZOOKEEPER, Engine.APSCHEDULER):
        one = runs.get(engine, 1)
        for jobs in counts:
            _row(table, runs.get(engine, jobs), one)
    table.notes += [
        (
            f"Java ElasticJob-Lite 3.0.4 (reference §4.2): about {JAVA_RSS_MIB:g} MiB RSS floor "
            f"per JVM, {JAVA_THREADS} threads with one job; users report thousands of threads "
            "with hundreds of jobs (peers §4)."
        ),
        f"'threads bounded' means at most the 1-job count plus the {POOL_THREADS}-thread pool.",
        "A run stopped at the start-up cap shows threads and RSS at that moment.",
    ]
    phases = QUICK_LAUNCH_PHASES if quick else LAUNCH_PHASES
    firsts = [launch_to_first_item(zk, tmp, phase) for phase in phases]
    median = statistics.median(firsts)
    boot = Table(
        "4b. Start-up: launch of `shardcron run` (1 job, ZooKeeper) to its first item",
        [
            "launches",
            "median s",
            "min s",
            "max s",
            "Java median s",
            "ratio",
            "target: ≤ 1.5 s (median, as the baseline)",
        ],
    )
    boot.add(
        len(firsts),
        num(median, 2),
        num(min(firsts), 2),
        num(max(firsts), 2),
        num(JAVA_FIRST_ITEM_S, 2),
        f"{median / JAVA_FIRST_ITEM_S:.2f}×",
        verdict(median <= TARGET_FIRST_ITEM_S),
    )
    boot.notes.append(
        "Launches at " + ", ".join(f"+{p:.1f}" for p in phases) + " s past a whole second; "
        "the first fire waits for the next whole second (0–1 s), as in the baseline."
    )
    return [table, boot]
