"""What does the garbage collector cost a busy worker, and what does it scan?

``python -m bench.probe_collector [--jobs 5000] [--settle 8] [--seconds 10] [--young]``

One :class:`~shardcron.scheduler.Scheduler` with N every-second one-item jobs (the
bench's job body, writing its ledger) on a throwaway ZooKeeper with the bench's settings.
After ``--settle`` seconds of steady state it measures ``--seconds``: item starts a
second (by source: an overloaded worker skips fires and runs some as misfires), CPU per
item start and the share of a core, the process's threads, and, per generation, the
collections a second, the time in them and the objects they freed (``gc.callbacks``). A
young collection that frees nothing scanned only fires in flight.

With ``--young`` the probe also counts the young generation's objects by kind at the
start of each young collection (functions and partials by what they call, cells by what
they hold, lists and tuples by length and content), averaged over the collections. This
slows the worker: read its counts, not its timings.
"""

from __future__ import annotations

import argparse
import collections
import gc
import itertools
import json
import logging
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import BenchZooKeeper, registry_url
from bench.jobs import LEDGER_ENV, recorder
from shardcron.config.job import JobConfig
from shardcron.scheduler.process import Scheduler
from shardcron.testing.zookeeper import unique_namespace

INSTANCE = "127.0.0.1@-@1"


def kind(obj: object) -> str:
    name = type(obj).__qualname__
    if name in ("function", "method", "partial"):
        fn = getattr(obj, "__func__", None) or getattr(obj, "func", None) or obj
        return f"{name} {getattr(fn, '__qualname__', '?')}"
    if name == "cell":
        try:
            return f"cell of {type(obj.cell_contents).__qualname__}"  # type: ignore[attr-defined]
        except ValueError:
            return "cell, empty"
    if isinstance(obj, list | tuple):
        return f"{name}[{len(obj)}] " + ",".join(type(x).__qualname__ for x in obj[:4])
    return name


class Collections:
    """Times every collection; counts the young generation by kind when asked."""

    def __init__(self, young: bool) -> None:
        self.on = False
        self.young = young
        self.kinds: collections.Counter[str] = collections.Counter()
        self.counted = 0
        self.done: list[tuple[int, float, int]] = []  # generation, seconds, freed
        self._began = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if not self.on:
            return
        if phase == "start":
            if self.young and info["generation"] == 0:
                self.counted += 1
                self.kinds.update(kind(o) for o in gc.get_objects(0))
            self._began = time.perf_counter()
        else:
            self.done.append(
                (info["generation"], time.perf_counter() - self._began, info["collected"])
            )


def item_starts(ledger: Path) -> int:
    with ledger.open("rb") as lines:
        return sum(1 for _ in lines)


def by_source(ledger: Path, first: int, end: int) -> collections.Counter[str]:
    """The sources (normal, misfire, ...) of ledger lines ``first`` to ``end``: read after
    the window, as parsing them costs CPU."""
    with ledger.open("rb") as lines:
        window = itertools.islice(lines, first, end)
        return collections.Counter(json.loads(line)["source"] for line in window)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--settle", type=float, default=8.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--young", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    probe = Collections(args.young)
    gc.callbacks.append(probe)
    with tempfile.TemporaryDirectory() as tmp, BenchZooKeeper() as zk:
        ledger = Path(tmp) / "ledger"
        os.environ[LEDGER_ENV] = str(ledger)
        url = registry_url(zk, unique_namespace("gc"), 60_000)
        scheduler = Scheduler(url, instance_id=INSTANCE)
        for n in range(args.jobs):
            config = JobConfig(
                job_name=f"j{n}", sharding_total_count=1, cron="* * * * * ?", overwrite=True
            )
            scheduler.add_job(config, recorder(INSTANCE, 0.0))
        began = time.monotonic()
        scheduler.start(connect_timeout=30)
        print(f"started {args.jobs} jobs in {time.monotonic() - began:.1f} s", flush=True)
        try:
            time.sleep(args.settle)
            starts, cpu, began = item_starts(ledger), time.process_time(), time.monotonic()
            probe.on = True
            time.sleep(args.seconds)
            probe.on = False
            first, starts = starts, item_starts(ledger) - starts
            cpu, took = time.process_time() - cpu, time.monotonic() - began
            threads = threading.active_count()
        finally:
            scheduler.stop(2)
        sources = by_source(ledger, first, first + starts)
    print(f"{args.jobs} every-second jobs, {took:.1f} s after {args.settle:g} s of steady state")
    print(f"item starts a second: {starts / took:,.0f}")
    for source, count in sources.most_common():
        print(f"  {source}: {count / took:,.0f} a second")
    print(f"CPU per item start: {cpu / max(starts, 1) * 1000:.3f} ms, {cpu / took:.0%} of a core")
    print(f"threads: {threads}")
    for generation in (0, 1, 2):
        mine = [(s, freed) for g, s, freed in probe.done if g == generation]
        if mine:
            spent = sum(s for s, _ in mine)
            print(
                f"generation {generation}: {len(mine) / took:.1f} collections a second, "
                f"{spent / took * 1000:.0f} ms a second, {spent / len(mine) * 1000:.1f} ms each, "
                f"{sum(f for _, f in mine):,} objects freed"
            )
    if probe.counted:
        total = sum(probe.kinds.values()) / probe.counted
        print(f"young generation at a collection: {total:,.0f} objects; by kind:")
        for name, count in probe.kinds.most_common(40):
            print(f"{count / probe.counted:9,.0f}  {name}")


if __name__ == "__main__":
    main()
