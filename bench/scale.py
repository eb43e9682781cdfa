"""4. Jobs per process and start-up: threads, resident memory and lateness of one
``shardcron run`` worker with 1, 100, 1,000 and 5,000 every-second jobs on ZooKeeper,
next to APScheduler 3 with the same jobs; the time from launch to the first item; the
scale targets of issue 14 for those runs (4c); and a herd on two workers (4d,
:mod:`bench.herd`).

Threads and ``VmRSS`` come from ``/proc/PID/status`` of the fresh worker process at the
end of its lateness window (the runs are shared with section 2b). A run that cannot
start all its jobs within the cap is stopped and reported as such.

Start-up: ``shardcron run`` with one ``* * * * * ?`` job on ZooKeeper is launched five
times, at five different points of the second (the first fire waits for the next whole
second, 0–1 s, as the baseline's Quartz trigger did); launch is the moment just before
``exec``, the first item is the ledger's first start.

4c judges the runs of 4a (the same processes as section 2b) against APScheduler 3 in
the same bench run: at 100 jobs the p50 and p99 lateness may not exceed APScheduler's; at
1,000 every fire must run and the p99 may not exceed 1.5 times APScheduler's; at 5,000
every job must start within the start-up cap and at least 99 % of the fires must run.
"fires run" is section 2b's: item starts in the window ÷ (jobs × window seconds).
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from pathlib import Path

from bench import herd
from bench.common import BenchZooKeeper, registry_url, sleep_until, spawn, starts, terminate
from bench.common import wait_until as wait
from bench.jobs import INSTANCE_ENV, LEDGER_ENV
from bench.lateness import INSTANCE, SESSION_MS, Engine, ManyResult, Runs
from bench.report import MET, MISSED, Table, ms, num, ratio, verdict
from shardcron.testing.zookeeper import unique_namespace

JOB_COUNTS = (1, 100, 1000, 5000)
QUICK_JOB_COUNTS = (1, 100)
LAUNCH_PHASES = (0.0, 0.2, 0.4, 0.6, 0.8)
QUICK_LAUNCH_PHASES = (0.0, 0.5)

TARGET_RSS_MIB = 50.0
TARGET_PER_JOB_KB = 30.0  # issue 14: memory per extra job stays below 30 KiB
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
    cmd = [sys.executable, "-m", "shardcron", "run", str(config), "--registry", url]
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
            ok = ok and per_job < TARGET_PER_JOB_KB
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
            "target: ≤ 50 MiB at 1 job, < 30 KiB per extra job, threads bounded",
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
    return [table, boot, targets(runs, counts), *herd.run(zk, tmp, quick)]


TARGET_P99_RATIO_1000 = 1.5
MIN_FIRES_RUN_5000 = 0.99
# A worker's Python threads share one GIL: past this share of a core, its fires wait for
# the interpreter, not for ZooKeeper or the other core.
GIL_BOUND_PERCENT = 90.0


def _judge(jobs: int, ours: ManyResult, base: ManyResult) -> tuple[str, str]:
    """(the target, met or MISSED with the reasons) for one job count of issue 14."""
    ours_late, base_late = ours.lateness, base.lateness
    problems = []
    if not ours.complete:
        problems.append(f"{ours.started:,}/{jobs:,} jobs started in {ours.cap:g} s")
    if jobs == 100:
        target = "p50 and p99 ≤ APScheduler's"
        if ours.complete and not ours_late.p50 <= base_late.p50:
            problems.append(f"p50 {ms(ours_late.p50)} > {ms(base_late.p50)} ms")
        if ours.complete and not ours_late.p99 <= base_late.p99:
            problems.append(f"p99 {ms(ours_late.p99)} > {ms(base_late.p99)} ms")
    elif jobs == 1000:
        target = f"100 % of fires run, p99 ≤ {TARGET_P99_RATIO_1000:g}× APScheduler's"
        limit = TARGET_P99_RATIO_1000 * base_late.p99
        if ours.complete and ours.runs < ours.expected:
            problems.append(f"{ours.fires_run:.1%} of fires ran")
        if ours.complete and not ours_late.p99 <= limit:
            problems.append(f"p99 {ms(ours_late.p99)} > {ms(limit)} ms")
    else:
        target = f"every job started, ≥ {MIN_FIRES_RUN_5000:.0%} of fires run"
        if ours.complete and not ours.fires_run >= MIN_FIRES_RUN_5000:
            problems.append(f"{ours.fires_run:.1%} of fires ran")
            if ours.cpu_percent >= GIL_BOUND_PERCENT:
                problems.append(
                    f"the worker used {ours.cpu_percent:.0f} % of a core: bound by its GIL"
                )
    if not base.complete:
        problems.append("no APScheduler baseline (it did not start)")
    return target, f"{MISSED}: " + "; ".join(problems) if problems else MET


def _fires(result: ManyResult) -> str:
    return f"{result.fires_run:.1%}" if result.complete else "–"


def _cpu(result: ManyResult) -> str:
    return f"{result.cpu_percent:.0f}" if result.complete else "–"


def targets(runs: Runs, counts: tuple[int, ...]) -> Table:
    """4c: issue 14's targets for N every-second jobs in one process, from the runs of 4a."""
    table = Table(
        "4c. Scale targets: N every-second jobs in one process on ZooKeeper, vs APScheduler 3 "
        "in the same run",
        [
            "jobs",
            "jobs started (s)",
            "fires run: shardcron / APScheduler",
            "p50 ms: shardcron / APScheduler",
            "ratio p50",
            "p99 ms: shardcron / APScheduler",
            "ratio p99",
            "CPU % of a core: shardcron / APScheduler",
            "target",
            "verdict",
        ],
    )
    for jobs in (n for n in counts if n in (100, 1000, 5000)):
        ours, base = runs.get(Engine.ZOOKEEPER, jobs), runs.get(Engine.APSCHEDULER, jobs)
        target, outcome = _judge(jobs, ours, base)
        started = (
            f"{jobs:,} ({num(ours.launch_to_ready, 1)})"
            if ours.complete
            else f"{ours.started:,} (not all in {ours.cap:g})"
        )
        table.add(
            f"{jobs:,}",
            started,
            f"{_fires(ours)} / {_fires(base)}",
            f"{ms(ours.lateness.p50)} / {ms(base.lateness.p50)}",
            ratio(ours.lateness.p50, base.lateness.p50),
            f"{ms(ours.lateness.p99)} / {ms(base.lateness.p99)}",
            ratio(ours.lateness.p99, base.lateness.p99),
            f"{_cpu(ours)} / {_cpu(base)}",
            target,
            outcome,
        )
    table.notes.append(
        "The same processes as 4a and 2b: one fresh process per engine and job count, "
        "the lateness window after start-up and a warm-up. CPU: the process's user and "
        "system time over the window; its Python threads share one GIL, so a worker near "
        "100 % of a core runs no faster on more cores."
    )
    return table
