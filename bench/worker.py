"""A bench worker process: one or more shardcron instances running the bench jobs.

``python -m bench.worker SPEC.json`` starts one :class:`~shardcron.scheduler.Scheduler`
per instance id in the spec, each with its own registry session (several instances may
share a process, as the resharding benchmark needs 50 of them on 2 cores), and runs until
SIGTERM, then stops them the way ``shardcron run`` does.

With a ``status`` file, a thread appends one JSON line at every half second: the
process's resident memory and thread count, and each instance's registry
``request_count``. Half seconds sit between fires, so two lines bracket whole fires.
The first line comes once every instance has started (its jobs registered), unless
``status_from_launch`` asks for lines from the moment the schedulers begin to start.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.jobs import LEDGER_ENV, recorder
from shardcron.config.job import JobConfig
from shardcron.scheduler.process import Scheduler

STOP_GRACE_SECONDS = 2.0


@dataclass(frozen=True)
class JobSpec:
    name: str
    items: int
    cron: str = "* * * * * ?"
    monitor: bool = True
    failover: bool = False
    misfire: bool = True
    hold: float = 0.0
    strategy: str | None = None  # None: the default, AVG_ALLOCATION

    def config(self) -> JobConfig:
        return JobConfig(
            job_name=self.name,
            sharding_total_count=self.items,
            cron=self.cron,
            monitor_execution=self.monitor,
            failover=self.failover,
            misfire=self.misfire,
            job_sharding_strategy_type=self.strategy,
            overwrite=True,
        )


@dataclass(frozen=True)
class WorkerSpec:
    registry: str
    instances: list[str]
    jobs: list[JobSpec]
    ledger: str
    status: str = ""
    start_at: float = 0.0  # epoch seconds; 0 starts at once
    status_from_launch: bool = False  # status lines while the jobs register, too

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)))

    @classmethod
    def read(cls, path: Path) -> WorkerSpec:
        data = json.loads(path.read_text())
        data["jobs"] = [JobSpec(**job) for job in data["jobs"]]
        return cls(**data)


def proc_status(pid: int | str = "self") -> dict[str, int]:
    """``VmRSS`` (KiB) and ``Threads`` from ``/proc/PID/status``; empty once it is gone."""
    found: dict[str, int] = {}
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return found
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "Threads"):
            found[key] = int(value.split()[0])
    return found


def proc_cpu_seconds(pid: int | str = "self") -> float:
    """User + system CPU time of a process so far (``/proc/PID/stat``); NaN once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return math.nan
    fields = text.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _report_status(path: Path, schedulers: dict[str, Scheduler], stop: threading.Event) -> None:
    with path.open("a") as out:
        while True:
            now = time.time()
            # Wake at the next half second: mid-way between two whole-second fires.
            delay = (int(now) + 0.5 - now) % 1.0 or 1.0
            if stop.wait(delay):
                return
            status = proc_status()
            line = {
                "t": time.time(),
                "rss_kb": status.get("VmRSS", 0),
                "threads": status.get("Threads", 0),
                "cpu": time.process_time(),
                "requests": {i: s.registry.request_count for i, s in schedulers.items()},
            }
            out.write(json.dumps(line) + "\n")
            out.flush()


def main(argv: list[str]) -> int:
    spec = WorkerSpec.read(Path(argv[1]))
    # Warnings only, as the Java baseline ran with slf4j-simple at WARN.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    os.environ[LEDGER_ENV] = spec.ledger
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    schedulers: dict[str, Scheduler] = {}
    for instance in spec.instances:
        scheduler = Scheduler(spec.registry, instance_id=instance)
        for job in spec.jobs:
            scheduler.add_job(job.config(), recorder(instance, job.hold))
        schedulers[instance] = scheduler
    # Everything is imported and built; several processes can now start in the same instant.
    while not stop.is_set() and time.time() < spec.start_at:
        stop.wait(min(spec.start_at - time.time(), 0.5))
    status = threading.Thread(
        target=_report_status, args=(Path(spec.status), schedulers, stop), daemon=True
    )
    if spec.status and spec.status_from_launch:
        status.start()
    for scheduler in schedulers.values():
        scheduler.start(connect_timeout=30)
    print(f"started {len(schedulers)} instance(s)", file=sys.stderr, flush=True)
    if spec.status and not spec.status_from_launch:
        status.start()
    while not stop.wait(0.5):
        pass
    stoppers = [
        threading.Thread(target=s.stop, args=(STOP_GRACE_SECONDS,)) for s in schedulers.values()
    ]
    for thread in stoppers:
        thread.start()
    for thread in stoppers:
        thread.join()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
