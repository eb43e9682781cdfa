"""What a fault run must show, read from the workers' ledger and the registry.

For a job that fires every second with failover on:

* overlaps: two instances ran one item at overlapping times. Allowed only when the older run
  was *fenced* (its ``claim_is_current()`` said False at its end), its fencing token is lower
  than the newer run's, and its worker was cut off from ZooKeeper (a stall or blackhole that
  could cost its session) while it ran, before the newer run started;
* lost item-fires: a fire (one item, one second) after which the item did not start anywhere
  within the failover window (session timeout + 3 s), plus runs cut short (their process
  ended, or their claim was lost) that did not run again within that window. Fires
  skipped during a failover shorter than the window are not lost: the item runs again;
* revoked claims: runs told by ``claim_is_current()`` that their claim was gone although their
  worker was not cut off from ZooKeeper: someone else removed or took a live claim;
* stuck items: items that did not start at all in the last seconds of the run;
* stale nodes: ``running``, ``failover``, ``failovering``, ``processing`` or failover queue
  nodes left once every worker has stopped;
* longest recovery: the longest time an item went without starting, beyond its 1 s period.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from shardcron.coordination.paths import JobPaths
from shardcron.registry import Registry
from tests.cluster import Run
from tests.workers import Workers

PERIOD = 1.0  # the jobs fire every second


@dataclass
class Verdict:
    name: str
    runs: int = 0
    fenced: int = 0
    overlaps: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    stuck: list[int] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    revoked: list[str] = field(default_factory=list)
    longest_recovery: float = 0.0
    faults: list[str] = field(default_factory=list)
    sources: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        sources = ", ".join(f"{k} {v}" for k, v in sorted(self.sources.items()))
        return (
            f"nemesis {self.name}: {len(self.faults)} faults ({'; '.join(self.faults)}); "
            f"{self.runs} item runs ({sources}), {self.fenced} fenced; "
            f"overlaps {len(self.overlaps)}, lost item-fires {len(self.lost)}, "
            f"revoked claims {len(self.revoked)}, "
            f"stuck jobs {int(bool(self.stuck))} (items {self.stuck}), "
            f"stale nodes {len(self.stale)}, longest recovery {self.longest_recovery:.2f}s"
        )

    def problems(self) -> str:
        """Every violation, one per line, for the assertion message."""
        lines = [f"overlap: {o}" for o in self.overlaps]
        lines += [f"lost: {x}" for x in self.lost]
        lines += [f"revoked claim: {x}" for x in self.revoked]
        lines += [f"stuck item {i}" for i in self.stuck]
        lines += [f"stale node {p}" for p in self.stale]
        return "\n".join(lines)

    @property
    def ok(self) -> bool:
        return not (self.overlaps or self.lost or self.revoked or self.stuck or self.stale)


@dataclass
class Ledger:
    runs: list[Run]
    fenced: set[tuple[str, int, float]]  # their claim check said False at their end
    cut: set[tuple[str, int, float]]  # never recorded an end: their process ended, or not yet


def read_ledger(w: Workers) -> Ledger:
    """Every run in the ledger, keyed by (instance, item, start) in the sets.

    An unfinished run of a process that has ended stopped when it ended (the worker's exit
    time); one of a live process is still running (ends at infinity).
    """
    exits = {x.instance: x.exited for x in w.workers.values() if x.exited is not None}
    runs, cut = [], set()
    for run in w.runs(unfinished=True):
        if run.end == math.inf:
            cut.add(_key(run))
            if run.instance in exits:
                run = Run(
                    run.instance, run.item, run.start, exits[run.instance], run.token, run.source
                )
        runs.append(run)
    fenced = {
        (r["instance"], r["item"], r["start"])
        for r in w.records()
        if r["phase"] == "end" and r.get("current") is False
    }
    return Ledger(runs, fenced, cut)


def _key(run: Run) -> tuple[str, int, float]:
    return (run.instance, run.item, run.start)


def _show(run: Run, origin: float) -> str:
    end = "..." if run.end == math.inf else f"{run.end - origin:.2f}"
    return f"{run.instance} [{run.start - origin:.2f}, {end}] token {run.token} {run.source}"


Spans = dict[str, list[tuple[float, float]]]


def find_overlaps(
    runs: list[Run], fenced: set[tuple[str, int, float]], cut_off: Spans, origin: float
) -> list[str]:
    found = []
    by_item: dict[int, list[Run]] = {}
    for run in runs:
        by_item.setdefault(run.item, []).append(run)
    for item, item_runs in sorted(by_item.items()):
        item_runs.sort(key=lambda r: r.start)
        for a, b in itertools.combinations(item_runs, 2):
            if b.start >= a.end or a.instance == b.instance:
                continue
            stalled = _cut_off_during(a, cut_off, until=b.start)
            if stalled and _key(a) in fenced and a.token < b.token:
                continue  # a stale run, cut off past its session, told its claim was gone
            found.append(f"item {item}: {_show(a, origin)} and {_show(b, origin)}")
    return found


def _cut_off_during(run: Run, cut_off: Spans, until: float) -> bool:
    """Whether ``run``'s worker was cut off from ZooKeeper after it started, before ``until``."""
    return any(start < until and run.start < end for start, end in cut_off.get(run.instance, []))


def find_revoked(
    runs: list[Run], fenced: set[tuple[str, int, float]], cut_off: Spans, origin: float
) -> list[str]:
    return [
        f"item {run.item}: {_show(run, origin)}"
        for run in runs
        if _key(run) in fenced and not _cut_off_during(run, cut_off, until=run.end)
    ]


def find_lost(
    runs: list[Run],
    cut: set[tuple[str, int, float]],
    fenced: set[tuple[str, int, float]],
    items: int,
    begin: float,
    end: float,
    window: float,
) -> tuple[list[str], float]:
    """Lost item-fires in [begin, end) and the longest recovery; see the module docstring."""
    lost = []
    longest = 0.0
    for item in range(items):
        starts = sorted(r.start for r in runs if r.item == item)
        for second in range(math.ceil(begin), math.floor(end - window)):
            if not any(second <= s <= second + window for s in starts):
                lost.append(f"item {item} fire at {second - begin:.0f}s: no run within {window}s")
        inside = [begin] + [s for s in starts if begin <= s <= end] + [end]
        gaps = (b - a for a, b in itertools.pairwise(inside))
        longest = max(longest, max(gaps, default=0.0) - PERIOD)
    for run in runs:
        if _key(run) not in cut | fenced or run.start > end - window:
            continue
        # A process that ended stopped its run then; a fenced run lost its claim at some
        # point after it started (its recorded end comes after the claim check).
        ended = _key(run) not in fenced and run.end != math.inf
        since = run.end if ended else run.start
        again = [r.start for r in runs if r.item == run.item and since < r.start]
        if not any(s <= since + window for s in again) and since + window <= end:
            lost.append(f"item {run.item}: cut run {_show(run, begin)} not run again in time")
    return lost, max(longest, 0.0)


def find_stuck(runs: list[Run], items: int, end: float, window: float) -> list[int]:
    return [
        i
        for i in range(items)
        if not any(end - window <= r.start <= end for r in runs if r.item == i)
    ]


def find_stale(admin: Registry, paths: JobPaths, items: int) -> list[str]:
    """Coordination nodes left once every worker has stopped."""
    stale = [paths.failover_item(int(n)) for n in admin.children(paths.failover_items)]
    if admin.stat(paths.sharding_processing) is not None:
        stale.append(paths.sharding_processing)
    for item in range(items):
        for path in (paths.running(item), paths.failover(item), paths.failovering(item)):
            if admin.stat(path) is not None:
                stale.append(path)
    return stale


def judge(
    name: str,
    w: Workers,
    *,
    items: int,
    begin: float,
    end: float,
    window: float,
    stuck_window: float,
    faults: Iterable[str],
    cut_off: Spans | None = None,
) -> Verdict:
    """Check the ledger of a run that went from ``begin`` to ``end`` (times from time.time())."""
    ledger = read_ledger(w)
    fenced = ledger.fenced
    runs = [r for r in ledger.runs if r.end >= begin]  # runs going at the first fault count
    lost, longest = find_lost(runs, ledger.cut, fenced, items, begin, end, window)
    cut_off = cut_off or {}
    sources: dict[str, Any] = {}
    for run in runs:
        sources[run.source] = sources.get(run.source, 0) + 1
    return Verdict(
        name=name,
        runs=len(runs),
        fenced=sum(1 for r in runs if _key(r) in fenced),
        overlaps=find_overlaps(runs, fenced, cut_off, begin),
        revoked=find_revoked(runs, fenced, cut_off, begin),
        lost=lost,
        stuck=find_stuck(runs, items, end, stuck_window),
        longest_recovery=longest,
        faults=list(faults),
        sources=sources,
    )
