"""The per-job chart of recent runs: one bar per finished item run, oldest on the left.

A bar's height is the run's duration on a scale from zero to the longest run shown, its
colour the outcome. Bars are evenly spaced in start order rather than placed on a time
axis: the items of one fire start within milliseconds of each other and would otherwise
cover each other. The first and last start times label the axis, and each bar's tooltip
gives its exact start, item, server and duration.

Only geometry is computed here; the template draws it as inline SVG (no script needed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from shardcron.console.formats import when
from shardcron.tracing.history import RunPoint

WIDTH = 1000
HEIGHT = 120
GAP = 0.2  # share of each slot left empty between bars
MIN_BAR = 1.5  # a run that took no measurable time still shows


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    success: bool
    tooltip: str


@dataclass(frozen=True, slots=True)
class RunChart:
    width: int
    height: int
    bars: tuple[Bar, ...]
    max_seconds: float
    first: datetime | None
    last: datetime | None
    failures: int


def run_chart(points: Sequence[RunPoint], width: int = WIDTH, height: int = HEIGHT) -> RunChart:
    longest = max((p.seconds for p in points), default=0.0)
    scale = max(longest, 1e-3)
    slot = width / max(len(points), 1)
    bars = []
    for index, point in enumerate(points):
        tall = max(MIN_BAR, height * max(point.seconds, 0.0) / scale)
        outcome = "ok" if point.success else "FAILED"
        bars.append(
            Bar(
                x=index * slot + slot * GAP / 2,
                y=height - tall,
                width=slot * (1 - GAP),
                height=tall,
                success=point.success,
                tooltip=(
                    f"{when(point.start_time)} item {point.sharding_item} "
                    f"on {point.ip}: {point.seconds:.3f} s, {outcome} ({point.execution_source})"
                ),
            )
        )
    return RunChart(
        width=width,
        height=height,
        bars=tuple(bars),
        max_seconds=longest,
        first=points[0].start_time if points else None,
        last=points[-1].start_time if points else None,
        failures=sum(not p.success for p in points),
    )
