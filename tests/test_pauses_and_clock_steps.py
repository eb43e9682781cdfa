"""Worker processes (``shardcron run``) paused shorter than their session, or whose wall
clock steps back and forward, against a real ZooKeeper.

Every item-fire is matched to what became of it: a run for that fire (the ledger line
carries ``ctx.scheduled_fire_time``) or a skip recorded in the worker's trace database,
naming the fire, as a user reads it with ``shardcron run --tracing URL``.
"""

from __future__ import annotations

import math
import re
import signal
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from shardcron.coordination.misfires import MISSED
from shardcron.coordination.paths import JobPaths
from shardcron.registry import Registry
from shardcron.registry.zookeeper import ZooKeeperRegistry
from shardcron.testing.zookeeper import ZooKeeperServer, unique_namespace
from tests.clocks import WallClock
from tests.cluster import Run, overlaps
from tests.conftest import zk_config
from tests.helpers import wait_until
from tests.workers import Workers, registered, workers

pytestmark = pytest.mark.zookeeper

A, B = "127.0.0.1@-@5201", "127.0.0.2@-@5202"
PATHS = JobPaths("ledger")
# Longer than any pause below, so the paused worker keeps its session.
SESSION_MS = 6000
SKIPPED = re.compile(
    r"items \[(?P<items>[\d, ]+)\] of the fire of (?P<fire>\S+) skipped "
    r"\((?P<reason>.*)\); (?P<what>misfired|not run)"
)


def job(items: int, misfire: bool, **extra: object) -> dict[str, dict[str, object]]:
    return {
        "ledger": {
            "callable": "tests.jobs:ledger",
            "cron": "* * * * * ?",
            "shardingTotalCount": items,
            "misfire": misfire,
            **extra,
        }
    }


@dataclass(frozen=True)
class Skip:
    item: int
    fire: float
    reason: str
    misfire: bool


def tracing(w: Workers, instance: str) -> list[str]:
    """``shardcron run`` options that trace ``instance``'s fires to a database of its own."""
    return ["--tracing", f"sqlite:///{trace_db(w, instance)}"]


def trace_db(w: Workers, instance: str) -> Path:
    return w.tmp / f"trace-{instance.replace('@-@', '_')}.db"


def skips(w: Workers, instance: str) -> list[Skip]:
    """The item-fires ``instance`` recorded as skipped, one per item and fire."""
    try:
        with sqlite3.connect(trace_db(w, instance)) as db:
            rows = db.execute(
                "SELECT message FROM JOB_STATUS_TRACE_LOG WHERE state = 'TASK_FINISHED'"
            ).fetchall()
    except sqlite3.OperationalError:  # no database or table yet: nothing traced yet
        return []
    found = []
    for (message,) in rows:
        m = SKIPPED.match(message or "")
        if m is None:
            continue
        fire = datetime.fromisoformat(m["fire"]).timestamp()
        for item in m["items"].split(", "):
            found.append(Skip(int(item), fire, m["reason"], m["what"] == "misfired"))
    return found


def runs(w: Workers) -> list[dict[str, Any]]:
    """Ledger lines of the item runs that started."""
    return [r for r in w.records() if r["phase"] == "start"]


def monotonic_runs(w: Workers) -> list[Run]:
    """Finished runs on the monotonic clock, which every process shares and no step of a
    wall clock moves: overlaps between processes whose wall clocks differ."""
    ends = {r["run"]: r for r in w.records() if r["phase"] == "end"}
    return [
        Run(r["instance"], r["item"], r["mono"], ends[r["run"]]["mono_end"], r["token"], "")
        for r in runs(w)
        if r["run"] in ends
    ]


def session_of(admin: Registry, instance: str) -> int | None:
    stat = admin.stat(PATHS.instance(instance))
    return None if stat is None else stat.ephemeral_owner


def into_a_second(low: float, high: float) -> float:
    """Wait until the wall clock is between ``low`` and ``high`` into a second; now."""
    return wait_until(lambda: low < time.time() % 1 < high and time.time(), 2, "the moment")


def settled(w: Workers, items: int) -> tuple[dict[int, str], float]:
    """Once both workers run their items: who owns which, and the first fire after."""

    def layout() -> dict[int, str] | None:
        latest: dict[int, dict[str, Any]] = {}
        for r in runs(w):
            if r["source"] == "NORMAL_TRIGGER":
                latest[r["item"]] = r
        owners = {i: r["instance"] for i, r in latest.items()}
        return owners if len(owners) == items and set(owners.values()) == {A, B} else None

    owners = wait_until(layout, 30, "items on both workers")
    return owners, max(r["fire"] for r in runs(w)) + 1


def accounted(
    w: Workers, items: int, first: float, last: float, skipped: list[Skip]
) -> dict[tuple[int, float], int]:
    """Checks every item-fire of seconds ``first``..``last``: run once by a normal fire,
    or recorded skipped; never run twice. The normal runs of each."""
    normal = Counter((r["item"], r["fire"]) for r in runs(w) if r["source"] == "NORMAL_TRIGGER")
    twice = {k: n for k, n in normal.items() if n > 1}
    assert twice == {}, f"item-fires run twice: {twice}"
    recorded = {(s.item, s.fire) for s in skipped}
    lost = [
        (item, fire)
        for fire in range(int(first), int(last) + 1)
        for item in range(items)
        if (item, fire) not in normal and (item, fire) not in recorded
    ]
    assert lost == [], f"item-fires neither run nor recorded: {lost}"
    return dict(normal)


@pytest.mark.parametrize("misfire", [True, False], ids=["misfire", "no-misfire"])
def test_a_fire_due_while_a_worker_is_paused_is_recorded_skipped_then_run_once_as_a_misfire(
    zookeeper: ZooKeeperServer, tmp_path: Path, misfire: bool
) -> None:
    """A pause shorter than the session timeout (SIGSTOP, as a long GC pause or a VM
    frozen for a moment): the fire due during it is not run late. The paused worker
    records it skipped, naming it, and with misfire on runs it once, as a misfire, right
    after; nothing runs twice or on two workers at once, and the session survives."""
    namespace = unique_namespace("pause")
    admin = ZooKeeperRegistry(zk_config(zookeeper, namespace))
    admin.start()
    try:
        with workers(
            tmp_path, zookeeper.connect_string, namespace, job(2, misfire), SESSION_MS
        ) as w:
            for instance in (A, B):
                w.start(instance, args=tracing(w, instance))
            wait_until(lambda: registered(admin, "ledger", B), 30, "B registered")
            owners, first = settled(w, 2)
            (paused_item,) = (i for i, owner in owners.items() if owner == B)
            session = session_of(admin, B)

            stopped = into_a_second(0.1, 0.3)
            w.workers[B].kill(signal.SIGSTOP)
            missed = math.floor(stopped) + 1  # due 0.7-0.9 s into the pause
            resume_at = missed + 1.4  # the pause itself: over a second past that fire
            time.sleep(resume_at - time.time())  # the pause itself, not a synchronisation
            w.workers[B].kill(signal.SIGCONT)
            resumed = time.time()

            skipped = wait_until(
                lambda: [s for s in skips(w, B) if s.fire == missed], 10, "the skip recorded"
            )
            # Fires well after the pause, on both workers: every fire before them is settled.
            last = math.floor(resumed) + 3
            wait_until(
                lambda: {r["item"] for r in runs(w) if r["fire"] > last} == {0, 1},
                10,
                "fires after the pause",
            )
            if misfire:
                wait_until(
                    lambda: [r for r in runs(w) if r["source"] == "MISFIRE"], 10, "the re-run"
                )
            assert session_of(admin, B) == session, "the paused worker lost its session"
    finally:
        admin.close()

    every_skip = skips(w, A) + skips(w, B)
    normal = accounted(w, 2, first, last, every_skip)
    assert skipped == [Skip(paused_item, missed, MISSED, misfire)]
    # The next fire, due 0.4 s before the resume, runs late; on a loaded machine it may be
    # released over a second late as well, and be skipped too.
    also = [s for s in every_skip if first <= s.fire <= last and s not in skipped]
    assert also in ([], [Skip(paused_item, missed + 1, MISSED, misfire)])
    assert not {(s.item, s.fire) for s in skipped + also} & set(normal)  # none ran late
    reruns = [r for r in runs(w) if r["source"] == "MISFIRE"]
    if misfire:
        (rerun,) = reruns
        latest = max(s.fire for s in skipped + also)
        assert (rerun["instance"], rerun["item"], rerun["fire"]) == (B, paused_item, latest)
        assert rerun["start"] - resumed < 1.5  # right after the pause
    else:
        assert reruns == []
    assert overlaps(w.runs()) == []
    # Its connection held too: no reconnection, no new session.
    assert (
        re.search(r"registry session (SUSPENDED|RECONNECTED|EXPIRED)", w.workers[B].output())
        is None
    )


def test_a_worker_whose_wall_clock_steps_back_then_forward_runs_no_fire_twice(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    """The wall clock of one worker steps back 3 s, later forward 4 s (an NTP step), its
    monotonic clock does not. After the step back its fires wait until its clock reaches
    their seconds again: none runs twice. After the step forward the fires it jumped over
    are recorded skipped, each named, and each item runs once more, as a misfire. The
    time-diff check measures the clock again after each step."""
    namespace = unique_namespace("step")
    admin = ZooKeeperRegistry(zk_config(zookeeper, namespace))
    admin.start()
    clock = WallClock(tmp_path)
    try:
        config = job(4, True, maxTimeDiffSeconds=2)
        with workers(tmp_path, zookeeper.connect_string, namespace, config, 3000) as w:
            w.start(A, args=tracing(w, A))
            w.start(B, extra_env=clock.environment(), args=tracing(w, B))
            wait_until(lambda: registered(admin, "ledger", B), 30, "B registered")
            owners, first = settled(w, 4)
            stepped_items = {i for i, owner in owners.items() if owner == B}

            # Back: B's clock reads 3 s earlier. The fires of its last 3 seconds come again.
            into_a_second(0.2, 0.4)
            back = time.monotonic()
            before = max(r["fire"] for r in runs(w) if r["instance"] == B)
            clock.step(-3)
            wait_until(
                lambda: any(r["fire"] >= before + 3 for r in runs(w) if r["instance"] == B),
                10,
                "B's fires after its clock caught up",
            )
            resumed = min(r["mono"] for r in runs(w) if r["instance"] == B and r["fire"] > before)
            # Nothing of B's ran while its clock went over its last 3 seconds again.
            assert resumed - back > 2.5

            # Forward: B's clock jumps 4 s, from 3 s behind to 1 s ahead.
            into_a_second(0.2, 0.4)
            forward = max(r["fire"] for r in runs(w) if r["instance"] == B)
            clock.step(+1)
            last = forward + 7
            wait_until(
                lambda: {r["item"] for r in runs(w) if r["fire"] > last} == set(owners),
                15,
                "fires after the step on both workers",
            )
            wait_until(
                lambda: {r["item"] for r in runs(w) if r["source"] == "MISFIRE"} == stepped_items,
                10,
                "the re-runs",
            )
    finally:
        admin.close()

    every_skip = skips(w, A) + skips(w, B)
    accounted(w, 4, first, last, every_skip)
    # The seconds B's clock jumped over: the 4th may still be released within a second of
    # its time, and run (late) instead.
    jumped = sorted({s.fire for s in every_skip})
    assert jumped == [forward + n for n in range(1, len(jumped) + 1)]
    assert 3 <= len(jumped) <= 5  # the 5th: the next fire, released late on a loaded machine
    assert sorted((s.item, s.fire) for s in every_skip) == [
        (i, f) for i in sorted(stepped_items) for f in jumped
    ]
    assert {s.reason for s in every_skip} == {MISSED}
    reruns = [r for r in runs(w) if r["source"] == "MISFIRE"]
    assert sorted((r["instance"], r["item"], r["fire"]) for r in reruns) == [
        (B, i, jumped[-1]) for i in sorted(stepped_items)
    ]
    assert overlaps(monotonic_runs(w)) == []
    # What the operator of the stepped worker reads in its log: each step, and, as the
    # job has a maxTimeDiffSeconds, how far off the clock is from the first fire after
    # the step back until the step forward brings it back within the limit.
    lines = w.workers[B].output().splitlines()
    (back_at,) = [n for n, line in enumerate(lines) if "wall clock stepped back by 3.0 s" in line]
    (forward_at,) = [
        n for n, line in enumerate(lines) if "wall clock stepped forward by 4.0 s" in line
    ]
    skewed = [n for n, line in enumerate(lines) if "local clock differs" in line]
    assert skewed, "the clock's skew was not reported after the step back"
    assert all(back_at < n < forward_at for n in skewed)
    assert all("from the registry's by +3.0s" in lines[n] for n in skewed)
    assert "local clock differs" not in w.workers[A].output()
