"""Running many seeds on several processes, and the one-line summary CI prints."""

from __future__ import annotations

import gc
import multiprocessing
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from shardcron.simulation.checks import CLOCKS_APART, DATA_LOST, NEVER_LAID_OUT, NOBODY_LEFT
from shardcron.simulation.scenario import Result, run_seed

EXCUSES = (NOBODY_LEFT, NEVER_LAID_OUT, CLOCKS_APART, DATA_LOST)

# Seeds per task: large enough that pickling results costs little, small enough to balance.
CHUNK = 100


@dataclass
class Report:
    seeds: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    actions: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    item_fires: int = 0
    excused: Counter[str] = field(default_factory=Counter)  # see checks.Verdict
    near: dict[str, Counter[str]] = field(default_factory=dict)  # see checks.Verdict
    skipped: Counter[str] = field(default_factory=Counter)
    violations: dict[int, list[str]] = field(default_factory=dict)
    seconds: float = 0.0

    def add(self, other: Report) -> None:
        self.seeds += other.seeds
        self.faults.update(other.faults)
        self.actions.update(other.actions)
        self.errors.update(other.errors)
        self.item_fires += other.item_fires
        self.excused.update(other.excused)
        for kind, counts in other.near.items():
            self.near.setdefault(kind, Counter()).update(counts)
        self.skipped.update(other.skipped)
        self.violations.update(other.violations)

    def failures(self) -> list[str]:
        """One line per failing seed: its first violation and the command replaying it."""
        return [
            f"seed {seed}: {found[0]} ({len(found)} violations); replay: "
            f"python -m shardcron.simulation --seed {seed} --verbose"
            for seed, found in sorted(self.violations.items())
        ]


def from_result(result: Result) -> Report:
    report = Report(
        seeds=1,
        faults=Counter(result.faults),
        actions=Counter(result.actions),
        errors=Counter(result.errors),
        item_fires=result.item_fires,
        excused=Counter(result.excused),
        near={kind: Counter(counts) for kind, counts in result.near.items()},
        skipped=Counter(result.skipped),
    )
    if result.violations:
        report.violations[result.seed] = result.violations
    return report


def _run_chunk(seeds: list[int]) -> Report:
    # A seed allocates many short-lived closures; collecting less often saves ~10%.
    gc.set_threshold(20_000, 20, 20)
    report = Report()
    for seed in seeds:
        report.add(from_result(run_seed(seed)))
    return report


def explore(seeds: Iterable[int], processes: int = 2) -> Report:
    todo = list(seeds)
    chunks = [todo[i : i + CHUNK] for i in range(0, len(todo), CHUNK)]
    started = time.monotonic()
    report = Report()
    if processes <= 1:
        for chunk in chunks:
            report.add(_run_chunk(chunk))
    else:
        # spawn, not fork: the caller (a test run) may have threads holding locks.
        with multiprocessing.get_context("spawn").Pool(processes) as pool:
            for part in pool.imap_unordered(_run_chunk, chunks):
                report.add(part)
    report.seconds = time.monotonic() - started
    return report


def summary(report: Report) -> str:
    def counts(counter: Counter[str]) -> str:
        return ", ".join(f"{k} {v}" for k, v in sorted(counter.items())) or "none"

    line = (
        f"simulation: {report.seeds} seeds in {report.seconds:.1f}s; "
        f"faults: {sum(report.faults.values())} ({counts(report.faults)}); "
        f"operator actions: {sum(report.actions.values())} ({counts(report.actions)}); "
        f"item-fires checked: {report.item_fires}; "
        f"neither run nor recorded (I2's named exceptions): "
        f"{sum(report.excused.values())} ({counts(report.excused)}); "
        f"skipped: {sum(report.skipped.values())} ({counts(report.skipped)}); "
        f"violations: {len(report.violations)}"
    )
    if report.errors:
        line += f"; errors reaching the coordinator: {counts(report.errors)}"
    return line


def by_fault(report: Report) -> str:
    """Per fault or operator action kind: the item-fires due in its shadow and what became
    of them. An item-fire near two kinds counts for both; "none": no fault or action
    began near it (the end of one, a reconnect say, may be near)."""
    lines = []
    for kind, counts in sorted(report.near.items()):
        rest = Counter(counts)
        checked, ran = rest.pop("checked", 0), rest.pop("ran", 0)
        excused = [f"{name} {rest.pop(name)}" for name in EXCUSES if name in rest]
        skipped = ", ".join(f"{reason} {n}" for reason, n in rest.most_common()) or "none"
        lines.append(
            f"  near {kind}: {checked} item-fires, ran {ran}, skipped {sum(rest.values())} "
            f"({skipped}); neither (I2's named exceptions): {', '.join(excused) or 'none'}"
        )
    return "\n".join(lines)
