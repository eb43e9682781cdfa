"""Helpers for distributed tests: in-process instances (each its own registry session)
and a recording job that tells which instance ran which item, when.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from shardcron.config.job import JobConfig
from shardcron.config.registry import RegistryConfig
from shardcron.model import ShardingContext
from shardcron.registry import Registry
from shardcron.registry.zookeeper import ZooKeeperRegistry
from shardcron.scheduler.process import Scheduler
from shardcron.testing.zookeeper import ZooKeeperServer, unique_namespace


@dataclass(frozen=True)
class Run:
    instance: str
    item: int
    start: float
    end: float
    token: int
    source: str
    task: str = ""  # the fire's task id: fires of one tick can share a token (group commit)


@dataclass
class Recorder:
    """A job body that records every item run; ``hold`` makes items take that long."""

    hold: float = 0.0
    runs: list[Run] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def job_for(self, instance: str) -> Callable[[ShardingContext], None]:
        def job(ctx: ShardingContext) -> None:
            start = time.time()
            if self.hold:
                time.sleep(self.hold)  # the work itself, not synchronisation
            run = Run(
                instance,
                ctx.sharding_item,
                start,
                time.time(),
                ctx.fencing_token,
                ctx.source,
                ctx.task_id,
            )
            with self.changed:
                self.runs.append(run)
                self.changed.notify_all()

        return job

    def since(self, moment: float) -> list[Run]:
        with self.changed:
            return [r for r in self.runs if r.start >= moment]

    def owners_in_fire(self, moment: float, items: int, timeout: float = 15.0) -> dict[int, str]:
        """The item->instance map of the first fire starting after ``moment`` that ran every item."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                by_second: dict[int, dict[int, str]] = {}
                for run in self.runs:
                    if run.start >= moment:
                        by_second.setdefault(int(run.start), {})[run.item] = run.instance
                for second in sorted(by_second):
                    if len(by_second[second]) == items:
                        return by_second[second]
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"no complete fire of {items} items since {moment}: {by_second}"
                    )
                self.changed.wait(left)


def overlaps(runs: list[Run]) -> list[tuple[Run, Run]]:
    """Pairs of runs of the same item on different instances at overlapping times."""
    found = []
    by_item: dict[int, list[Run]] = {}
    for run in runs:
        by_item.setdefault(run.item, []).append(run)
    for item_runs in by_item.values():
        item_runs.sort(key=lambda r: r.start)
        for a, b in itertools.pairwise(item_runs):
            if b.start < a.end and a.instance != b.instance:
                found.append((a, b))
    return found


class Cluster:
    """Several instances of one job, each with its own ZooKeeper session."""

    def __init__(
        self, server: ZooKeeperServer, config: JobConfig, recorder: Recorder, session_ms: int = 3000
    ) -> None:
        self.server = server
        self.namespace = unique_namespace()
        self.config = config
        self.recorder = recorder
        self.session_ms = session_ms
        self.schedulers: dict[str, Scheduler] = {}
        self.admin = self.registry()
        self.admin.start()

    def registry(self) -> Registry:
        return ZooKeeperRegistry(
            RegistryConfig(
                servers=self.server.connect_string,
                namespace=self.namespace,
                session_timeout_ms=self.session_ms,
                base_sleep_ms=100,
                max_sleep_ms=500,
            )
        )

    def start(self, instance: str, config: JobConfig | None = None) -> Scheduler:
        scheduler = Scheduler(self.registry(), instance_id=instance)
        scheduler.add_job(config or self.config, self.recorder.job_for(instance))
        scheduler.start()
        self.schedulers[instance] = scheduler
        return scheduler

    def stop(self, instance: str) -> None:
        self.schedulers.pop(instance).stop(grace=5)

    def close(self) -> None:
        for scheduler in self.schedulers.values():
            scheduler.stop(grace=2)
        self.admin.close()


@contextmanager
def cluster(
    server: ZooKeeperServer, config: JobConfig, recorder: Recorder, session_ms: int = 3000
) -> Iterator[Cluster]:
    made = Cluster(server, config, recorder, session_ms)
    try:
        yield made
    finally:
        made.close()
