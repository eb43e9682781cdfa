"""How long do instances take to see a new layout of a big job, and at what cost?

``python -m bench.probe_layout [--items 10000] [--instances 10] [--interval 5]``

N Schedulers in this process, each with its own ZooKeeper session, run one job of
``--items`` items (monitorExecution off, a fire every ``--interval`` s) on a throwaway
ZooKeeper. Once every instance's cache shows the first layout, one more instance joins.
Printed: launch to the first layout seen everywhere; from the join, and from the moment
the leader cleared ``leader/sharding/necessary``, to every instance (the new one too)
seeing the new layout in its cache; the watch events each session received meanwhile
and the requests it made.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import threading
import time
from typing import Any

from kazoo.client import KazooClient

from shardcron.config.job import JobConfig
from shardcron.coordination.paths import JobPaths
from shardcron.coordination.strategies import avg_allocation, order_instances
from shardcron.model import ShardingContext
from shardcron.registry.zookeeper import ZooKeeperRegistry
from shardcron.scheduler.process import Scheduler
from shardcron.testing.zookeeper import ZooKeeperServer, unique_namespace

JOB = "big"
PATHS = JobPaths(JOB)


def noop(ctx: ShardingContext) -> None:
    pass


class Counted:
    """Counts the watch events one session receives, and the changes per applied batch."""

    def __init__(self, registry: ZooKeeperRegistry) -> None:
        self.events = 0
        self.fetches: list[int] = []
        caches = registry._caches
        notify, apply = caches.notify, caches._apply_batch

        def counted_notify(events: list[tuple[int, str]]) -> None:
            self.events += len(events)
            notify(events)

        def counted_apply(batch: Any) -> None:
            self.fetches.append(len(batch.changes))
            apply(batch)

        caches.notify = counted_notify  # type: ignore[method-assign]
        caches._apply_batch = counted_apply  # type: ignore[method-assign]


def instance_id(n: int) -> str:
    return f"127.0.0.1@-@{30000 + n}"


def expected(instances: list[str], items: int) -> dict[int, bytes]:
    assignment = avg_allocation(order_instances(instances), JOB, items)
    return {i: owner.encode() for owner, owned in assignment.items() for i in owned}


def shows(scheduler: Scheduler, layout: dict[int, bytes]) -> bool:
    runtime = scheduler.runtimes.get(JOB)
    if runtime is None or runtime._cache is None:
        return False
    cache = runtime.cache
    last = max(layout)
    if cache.get(PATHS.item_instance(last)) != layout[last]:
        return False
    return all(cache.get(PATHS.item_instance(i)) == owner for i, owner in layout.items())


def wait_all(schedulers: list[Scheduler], layout: dict[int, bytes], cap: float) -> float:
    left = list(schedulers)
    deadline = time.monotonic() + cap
    while left and time.monotonic() < deadline:
        left = [s for s in left if not shows(s, layout)]
        if left:
            time.sleep(0.05)
    return time.time() if not left else math.nan


def start(url: str, n: int, args: argparse.Namespace) -> Scheduler:
    scheduler = Scheduler(url, instance_id=instance_id(n))
    config = JobConfig(
        job_name=JOB,
        cron=f"0/{args.interval} * * * * ?",
        sharding_total_count=args.items,
        monitor_execution=False,
        overwrite=True,
    )
    scheduler.add_job(config, noop)
    scheduler.start()
    return scheduler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--instances", type=int, default=10)
    parser.add_argument("--interval", type=int, default=5)
    parser.add_argument("--cap", type=float, default=60.0)
    args = parser.parse_args()
    logging.basicConfig(
        level=os.environ.get("PROBE_LOG", "ERROR"),
        format="%(asctime)s %(threadName)s %(name)s %(message)s",
    )
    with ZooKeeperServer() as zk:
        namespace = unique_namespace("layout")
        url = f"zk://{zk.connect_string}/{namespace}"
        admin = KazooClient(zk.connect_string, timeout=30)
        admin.start()
        cleared = threading.Event()
        cleared_at: list[float] = []
        flag = f"/{namespace}{PATHS.sharding_necessary}"
        schedulers: list[Scheduler] = []
        try:
            launched = time.time()
            schedulers = [start(url, n, args) for n in range(args.instances)]
            first = expected([instance_id(n) for n in range(args.instances)], args.items)
            seen = wait_all(schedulers, first, args.cap)
            print(f"launch -> first layout in every cache: {seen - launched:.2f}s", flush=True)
            counters = [Counted(s.registry) for s in schedulers]  # type: ignore[arg-type]
            requests = [s.registry.request_count for s in schedulers]

            def on_flag(event: Any) -> None:
                if admin.exists(flag, watch=on_flag) is None and event is not None:
                    cleared_at.append(time.time())
                    cleared.set()

            time.sleep(args.interval / 2)  # join between two fires
            joined = time.time()
            newcomer = start(url, args.instances, args)
            admin.exists(flag, watch=on_flag)
            schedulers.append(newcomer)
            counters.append(Counted(newcomer.registry))  # type: ignore[arg-type]
            requests.append(0)
            second = expected([instance_id(n) for n in range(args.instances + 1)], args.items)
            seen = wait_all(schedulers, second, args.cap)
            cleared.wait(1)
            flag_at = cleared_at[0] if cleared_at else math.nan
            events = [c.events for c in counters]
            made = [s.registry.request_count - r for s, r in zip(schedulers, requests, strict=True)]
            moved = sum(1 for i in first if first[i] != second[i])
            print(
                f"items={args.items} instances={args.instances}+1 moved={moved}: "
                f"join -> flag cleared {flag_at - joined:.2f}s, "
                f"flag cleared -> new layout in every cache {seen - flag_at:.2f}s, "
                f"join -> seen {seen - joined:.2f}s; watch events per old session "
                f"{sum(events[:-1]) / (len(events) - 1):.0f}, requests per old session "
                f"{sum(made[:-1]) / (len(made) - 1):.0f}",
                flush=True,
            )
            batches = [len(c.fetches) for c in counters[:-1]]
            if any(batches):
                print(f"change batches applied per old session: {batches}", flush=True)
        finally:
            for scheduler in schedulers:
                scheduler.stop(grace=2)
            admin.stop()
            admin.close()


if __name__ == "__main__":
    main()
