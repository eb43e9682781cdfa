"""The single-node baseline: APScheduler 3 running N every-second jobs in one process.

``python -m bench.apscheduler_baseline N`` schedules N jobs on ``CronTrigger(second="*")``
with the same job body as the shardcron runs (:func:`bench.jobs.record_plain`), on a
thread pool as large as a shardcron Scheduler's (32), with APScheduler's own defaults
otherwise (misfire grace 1 s, coalescing, one instance per job). It prints ``ready``
once started and runs until SIGTERM. No coordination at all: the floor for one process.
"""

from __future__ import annotations

import signal
import sys
import threading
from datetime import UTC

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger

from bench.jobs import record_plain

POOL_SIZE = 32  # shardcron.scheduler.Scheduler's default max_workers


def main(argv: list[str]) -> int:
    jobs = int(argv[1])
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    scheduler = BackgroundScheduler(
        executors={"default": ThreadPoolExecutor(POOL_SIZE)}, timezone=UTC
    )
    for n in range(jobs):
        name = f"j{n:04d}"
        trigger = CronTrigger(second="*", timezone=UTC)
        scheduler.add_job(record_plain, trigger, args=[name], id=name)
    scheduler.start()
    print("ready", file=sys.stderr, flush=True)
    while not stop.wait(0.5):
        pass
    scheduler.shutdown(wait=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
