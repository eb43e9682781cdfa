"""Result tables: Markdown, so the printed output pastes straight into docs/performance.md."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

MISSED = "MISSED"
MET = "met"


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, *cells: object) -> None:
        self.rows.append([str(c) for c in cells])

    def missed(self) -> int:
        return sum(cell.startswith(MISSED) for row in self.rows for cell in row)

    def render(self) -> str:
        widths = [len(h) for h in self.headers]
        for row in self.rows:
            widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]

        def line(cells: list[str]) -> str:
            return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

        out = [f"### {self.title}", "", line(self.headers)]
        out.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
        out += [line(row) for row in self.rows]
        if self.notes:
            out.append("")
            out += [f"- {note}" for note in self.notes]
        return "\n".join(out) + "\n"


def verdict(ok: bool) -> str:
    return MET if ok else MISSED


def num(value: float, digits: int = 1) -> str:
    if math.isnan(value):
        return "–"
    return f"{value:,.{digits}f}"


def ms(value: float) -> str:
    """Milliseconds with precision that suits the size."""
    if math.isnan(value):
        return "–"
    if value < 10:
        return f"{value:.2f}"
    if value < 100:
        return f"{value:.1f}"
    return f"{value:,.0f}"


def ratio(ours: float, theirs: float) -> str:
    """ours ÷ baseline, e.g. ``0.05×`` (smaller is better for every figure in this suite)."""
    if math.isnan(ours) or math.isnan(theirs) or theirs == 0:
        return "–"
    value = ours / theirs
    return f"{value:.3f}×" if value < 0.1 else f"{value:.2f}×"
