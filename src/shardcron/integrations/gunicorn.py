"""gunicorn hooks that run a scheduler in every worker process.

In ``gunicorn.conf.py``::

    jobs = WorkerScheduler(lambda: scheduler_from_file("jobs.yaml", shared=True))
    post_fork = jobs.post_fork
    worker_exit = jobs.worker_exit

Why ``post_fork``: threads and a ZooKeeper session do not survive ``fork()``, so a scheduler
started in the master (or at import time with ``--preload``) would be broken in every worker.
Each worker starts its own, with its own session and instance id (IP@-@PID).
"""

from __future__ import annotations

from collections.abc import Callable

from shardcron.scheduler.process import Scheduler

CONNECT_TIMEOUT_SECONDS = 30.0


class WorkerScheduler:
    """``post_fork`` makes and starts a scheduler in the new worker; ``worker_exit`` stops it,
    letting running items finish for ``grace`` seconds (keep it below gunicorn's
    ``graceful_timeout``)."""

    def __init__(
        self,
        make: Callable[[], Scheduler],
        *,
        grace: float = 10.0,
        connect_timeout: float = CONNECT_TIMEOUT_SECONDS,
    ) -> None:
        self.make = make
        self.grace = grace
        self.connect_timeout = connect_timeout
        self.scheduler: Scheduler | None = None

    def post_fork(self, _server: object, _worker: object) -> None:
        self.scheduler = self.make()
        self.scheduler.start(self.connect_timeout)

    def worker_exit(self, _server: object, _worker: object) -> None:
        scheduler, self.scheduler = self.scheduler, None
        if scheduler is not None:
            scheduler.stop(self.grace)
