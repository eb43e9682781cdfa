"""How long does one process take to register N jobs on a real ZooKeeper?

``python -m bench.probe_registration 1000 5000 [--cron '* * * * * ?'] [--profile FILE]``

One :class:`~shardcron.scheduler.Scheduler` with N no-op jobs (one item each) on a
throwaway ZooKeeper (:class:`shardcron.testing.ZooKeeperServer`). Prints, per N: the
time ``start()`` takes, then until every job is registered (its instance node exists)
and until every job has elected a leader, and the requests made. With
``--profile`` the ``start()`` call runs under cProfile and the stats go to FILE.
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import math
import time

from kazoo.client import KazooClient

from shardcron.config.job import JobConfig
from shardcron.model import ShardingContext
from shardcron.scheduler.process import Scheduler
from shardcron.testing.zookeeper import ZooKeeperServer, unique_namespace

INSTANCE = "127.0.0.1@-@1"


def noop(ctx: ShardingContext) -> None:
    pass


def count_done(admin: KazooClient, namespace: str, jobs: int, what: str) -> int:
    """Jobs whose ``what`` node exists (async exists, pipelined)."""
    paths = {
        "instance": "/{ns}/j{n}/instances/" + INSTANCE,
        "leader": "/{ns}/j{n}/leader/election/instance",
    }[what]
    pending = [admin.exists_async(paths.format(ns=namespace, n=n)) for n in range(jobs)]
    return sum(1 for p in pending if p.get(timeout=60) is not None)


def measure(zk: ZooKeeperServer, jobs: int, cron: str, profile: str | None) -> None:
    namespace = unique_namespace("reg")
    scheduler = Scheduler(f"zk://{zk.connect_string}/{namespace}", instance_id=INSTANCE)
    for n in range(jobs):
        config = JobConfig(job_name=f"j{n}", cron=cron, sharding_total_count=1, overwrite=True)
        scheduler.add_job(config, noop)
    admin = KazooClient(zk.connect_string, timeout=30)
    admin.start()
    try:
        began = time.monotonic()
        if profile:
            profiler = cProfile.Profile()
            profiler.runcall(scheduler.start)
            profiler.dump_stats(profile)
        else:
            scheduler.start()
        started = time.monotonic() - began
        registered = elected = float("nan")
        deadline = began + 120
        while time.monotonic() < deadline:
            if math.isnan(registered) and count_done(admin, namespace, jobs, "instance") == jobs:
                registered = time.monotonic() - began
            if not math.isnan(registered) and count_done(admin, namespace, jobs, "leader") == jobs:
                elected = time.monotonic() - began
                break
            time.sleep(0.2)
        requests = scheduler.registry.request_count
        print(
            f"jobs={jobs} start()={started:.2f}s registered={registered:.2f}s "
            f"elected={elected:.2f}s failed={len(scheduler.failed)} "
            f"requests={requests} ({requests / jobs:.1f}/job)",
            flush=True,
        )
    finally:
        scheduler.stop(grace=5)
        admin.stop()
        admin.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("jobs", type=int, nargs="+")
    parser.add_argument("--cron", default="0 0 0 1 1 ? 2099")
    parser.add_argument("--profile")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    with ZooKeeperServer() as zk:
        for jobs in args.jobs:
            measure(zk, jobs, args.cron, args.profile)


if __name__ == "__main__":
    main()
