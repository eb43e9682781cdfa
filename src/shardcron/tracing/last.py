"""The last run of each job, from the execution table: what an operator checks first."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from shardcron.tracing.history import _local, _succeeded, _tables


@dataclass(frozen=True, slots=True)
class LastRun:
    job_name: str
    last_start: datetime | None  # naive local time, as the tables hold it
    last_outcome: str  # "success", "failure" or "running": of the run that started last
    last_success: datetime | None  # when the last successful run completed


def last_runs(engine: Engine) -> dict[str, LastRun]:
    """Per job name: its latest run and its latest success (two grouped queries)."""
    tables = _tables(engine)
    if tables is None:
        return {}
    t = tables.execution
    success_at = sa.case((_succeeded(t), t.c.complete_time), else_=None)
    totals = sa.select(
        t.c.job_name, sa.func.max(t.c.start_time).label("last"), sa.func.max(success_at)
    ).group_by(t.c.job_name)
    latest = totals.subquery()
    outcomes = sa.select(t.c.job_name, t.c.complete_time, t.c.is_success).join(
        latest, sa.and_(t.c.job_name == latest.c.job_name, t.c.start_time == latest.c.last)
    )
    with engine.connect() as conn:
        found = {name: (start, done) for name, start, done in conn.execute(totals).all()}
        outcome: dict[str, str] = {}
        for name, complete, success in conn.execute(outcomes).all():
            now = "running" if complete is None else "success" if success else "failure"
            # Items that started in the same instant: a failure or a run in progress wins.
            if outcome.get(name) in (None, "success"):
                outcome[name] = now
    return {
        name: LastRun(
            job_name=name,
            last_start=None if start is None else _local(start),
            last_outcome=outcome.get(name, "running"),
            last_success=None if done is None else _local(done),
        )
        for name, (start, done) in found.items()
    }
