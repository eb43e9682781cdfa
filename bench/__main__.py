"""``python -m bench [--quick] [--only SECTION]... [--output FILE]``: run the suite, print
the machine and one Markdown table per measurement, and exit 0 (missed targets are
reported as MISSED, not as a failure)."""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from types import FrameType

from bench import failover, jobs, lateness, resharding, roundtrips, scale
from bench.common import BenchZooKeeper, compile_bytecode, warm_up
from bench.report import MISSED, Table

SECTIONS = ("roundtrips", "lateness", "failover", "scale", "resharding")


def machine(zk: BenchZooKeeper) -> list[str]:
    cpu = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    os_name = platform.system()
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("PRETTY_NAME="):
            os_name = line.split("=", 1)[1].strip('"')
    mem_kb = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kb = int(line.split()[1])
    return [
        f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        f"- CPU: {os.cpu_count()} × {cpu} (nproc {len(os.sched_getaffinity(0))})",
        f"- memory: {mem_kb / 1024 / 1024:.1f} GiB; {os_name}, kernel {platform.release()}",
        (
            f"- Python {platform.python_version()}; kazoo {version('kazoo')}; "
            f"APScheduler {version('APScheduler')}; shardcron {version('shardcron')}; "
            "the tree's bytecode compiled ahead, as an installed package's is"
        ),
        f"- speed: {loop_ns():.0f} ns per step of a plain Python loop (best of 3)",
        (
            f"- job body: {jobs.body_us():.1f} µs a start after its time is taken (its ledger "
            "line built and written; every shardcron and APScheduler row runs it)"
        ),
        (
            f"- ZooKeeper {zk.version()} standalone on loopback: tickTime 500 ms, sessions "
            "1–60 s, fsync on, NIO connection factory (the Java baseline's settings)"
        ),
    ]


def loop_ns() -> float:
    """Nanoseconds per step of a plain Python loop, best of three: the machine's speed on
    interpreted code, which the workers' figures scale with (machines of one kind differ
    up to two times from one session to the next)."""
    best = float("inf")
    for _ in range(3):
        began, total = time.perf_counter(), 0
        for i in range(2_000_000):
            total += i
        best = min(best, time.perf_counter() - began)
    return best / 2_000_000 * 1e9


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # run every finally: worker processes and ZooKeeper stop


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a short smoke run of each section")
    parser.add_argument(
        "--only", action="append", choices=SECTIONS, help="run only these sections (repeatable)"
    )
    parser.add_argument("--output", type=Path, help="also write the report (Markdown) here")
    args = parser.parse_args(argv)
    chosen = args.only or list(SECTIONS)
    signal.signal(signal.SIGTERM, _interrupt)
    began = time.monotonic()
    compile_bytecode()
    tmp = Path(tempfile.mkdtemp(prefix="shardcron-bench-"))
    report: list[str] = []

    def emit(text: str) -> None:
        print(text, flush=True)
        report.append(text)

    try:
        with BenchZooKeeper() as zk:
            emit("## shardcron benchmark" + (" (quick)" if args.quick else "") + "\n")
            emit("\n".join(machine(zk)) + "\n")
            warm_up(zk)
            runs = lateness.Runs(
                zk, tmp, lateness.QUICK_TIMING if args.quick else lateness.FULL_TIMING
            )
            steps: dict[str, Callable[[], list[Table]]] = {
                "roundtrips": lambda: roundtrips.run(zk, tmp, args.quick),
                "lateness": lambda: lateness.run(runs, args.quick),
                "failover": lambda: failover.run(zk, tmp, args.quick),
                "scale": lambda: scale.run(zk, tmp, runs, args.quick),
                "resharding": lambda: resharding.run(zk, tmp, args.quick),
            }
            missed = 0
            for name in SECTIONS:
                if name not in chosen:
                    continue
                started = time.monotonic()
                for table in steps[name]():
                    missed += table.missed()
                    emit(table.render())
                print(f"({name}: {time.monotonic() - started:.0f} s)\n", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    emit(
        f"Total: {time.monotonic() - began:.0f} s; {missed} cell(s) {MISSED}."
        if missed
        else f"Total: {time.monotonic() - began:.0f} s; every target met."
    )
    if args.output:
        args.output.write_text("\n".join(report) + "\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted; workers and ZooKeeper stopped", file=sys.stderr)
        sys.exit(130)
