"""5. Resharding at scale: 10,000 items over 50 instances, one instance joins, then leaves.

50 instances, each a Scheduler with its own ZooKeeper session, share 5 ``bench.worker``
processes; a 51st instance runs in a process of its own so it can join and leave. The
job fires every 5 s with monitorExecution off (with it on, every fire would create and
delete 20,000 ``running`` nodes, each change pushed to all 50 sessions' watches: a
million watch events per fire, see the watch-events column of section 1).

The change moment is when the joining instance's node appears, or the leaving one's
(graceful stop) disappears, as a watch on the bench's own session sees it. The delay is
from there to the start of the last item of the first fire in which all 10,000 items ran
on the new assignment (AVG_ALLOCATION over the new instance list, computed with
shardcron's own strategy). The target is the fire interval plus 2 s. "Rejected for size"
is ZooKeeper's ``zk_large_requests_rejected`` counter plus "Len error" lines in its log.
"""

from __future__ import annotations

import math
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from bench.common import (
    BenchZooKeeper,
    LedgerTail,
    Probe,
    registry_url,
    spawn_worker,
    terminate,
)
from bench.report import MISSED, Table, num, verdict
from bench.worker import JobSpec, WorkerSpec
from shardcron.paths import JobPaths
from shardcron.strategies import avg_allocation, order_instances
from shardcron.testing import unique_namespace

JOB = "big"
SESSION_MS = 10_000


@dataclass(frozen=True)
class Scale:
    items: int
    instances: int
    processes: int
    interval: int  # seconds between fires

    @property
    def cron(self) -> str:
        return f"0/{self.interval} * * * * ?"


FULL = Scale(items=10_000, instances=50, processes=5, interval=5)
REFERENCE = Scale(items=1_000, instances=10, processes=2, interval=5)
QUICK = REFERENCE
FULL_CAP, REFERENCE_CAP, QUICK_CAP = 60.0, 30.0, 30.0
TARGET_BEYOND_INTERVAL = 2.0


@dataclass(frozen=True)
class Change:
    kind: str  # "join" or "leave"
    at: float
    done_at: float  # last item start of the first fire on the new assignment
    fire: float  # that fire's scheduled time
    fires_skipped: int  # fires after the change that ran on an old or partial layout

    @property
    def delay(self) -> float:
        return self.done_at - self.at


class Fires:
    """Item runs grouped by the fire they belong to (the latest cron moment before them)."""

    def __init__(self, ledger: Path, interval: int, items: int) -> None:
        self.tail = LedgerTail(ledger)
        self.interval = interval
        self.items = items
        self.by_fire: dict[float, dict[int, tuple[str, float]]] = {}

    def poll(self) -> None:
        for record in self.tail.new():
            if record["phase"] != "start":
                continue
            fire = math.floor(record["start"] / self.interval) * self.interval
            self.by_fire.setdefault(fire, {})[record["item"]] = (
                record["instance"],
                record["start"],
            )

    def first_on(self, layout: dict[int, str], after: float) -> tuple[float, float, int] | None:
        """(fire, last start, fires skipped) of the first complete fire on ``layout``."""
        self.poll()
        skipped = 0
        newest = max(self.by_fire, default=0.0)
        for fire in sorted(f for f in self.by_fire if f >= after - 0.001):
            runs = self.by_fire[fire]
            if len(runs) == len(layout) and all(runs[i][0] == owner for i, owner in layout.items()):
                return fire, max(start for _, start in runs.values()), skipped
            if fire < newest:  # a finished fire that ran elsewhere, or not at all
                skipped += 1
        return None


def layout(instances: list[str], items: int) -> dict[int, str]:
    assignment = avg_allocation(order_instances(instances), JOB, items)
    return {item: owner for owner, owned in assignment.items() for item in owned}


def _wait_for(fires: Fires, want: dict[int, str], after: float, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = fires.first_on(want, after)
        if found:
            return found
        time.sleep(0.2)
    return None


class NodeWatch:
    """Times when a znode appears or disappears, seen from the bench's own session."""

    def __init__(self, client: KazooClient, path: str) -> None:
        self.seen: dict[str, float] = {}
        self.event = threading.Condition()
        self.client, self.path = client, path
        client.exists(path, watch=self._on_event)

    def _on_event(self, event: Any) -> None:
        with self.event:
            self.seen[event.type] = time.time()
            self.event.notify_all()
        self.client.exists(self.path, watch=self._on_event)

    def wait(self, kind: str, timeout: float) -> float:
        with self.event:
            self.event.wait_for(lambda: kind in self.seen, timeout)
            return self.seen.get(kind, math.nan)


def instance_ids(scale: Scale) -> list[str]:
    return [f"127.0.0.1@-@{20000 + n}" for n in range(scale.instances + 1)]


@dataclass
class Outcome:
    scale: Scale
    changes: list[Change]
    rejected: int  # requests ZooKeeper rejected for size
    setup: float  # launch to the first complete fire; NaN if it never came
    warnings: dict[str, int]  # worker log lines that tell why it did not converge
    cap: float


# Worker log lines worth counting when the layout does not converge.
SYMPTOMS = ("resharding did not finish", "did not load", "resharding transaction raced")


def measure(zk: BenchZooKeeper, tmp: Path, scale: Scale, cap: float) -> Outcome:
    """Launch, then one join and one leave; ``cap`` bounds each wait for a new layout."""
    namespace = unique_namespace("reshard")
    url = registry_url(zk, namespace, SESSION_MS)
    ledger = tmp / f"{namespace}.ledger"
    job = JobSpec(JOB, scale.items, scale.cron, monitor=False)
    ids = instance_ids(scale)
    base = ids[:-1]
    per = math.ceil(len(base) / scale.processes)
    procs: list[subprocess.Popen[bytes]] = []
    admin = KazooClient(zk.connect_string, timeout=30)
    admin.start()
    before = Probe.take(zk)
    len_errors = zk.log_path.read_text(errors="replace").count("Len error")
    fires = Fires(ledger, scale.interval, scale.items)
    changes: list[Change] = []
    setup = math.nan
    try:
        launched = time.time()
        for p in range(scale.processes):
            spec = WorkerSpec(url, base[p * per : (p + 1) * per], [job], str(ledger))
            procs.append(spawn_worker(spec, tmp, f"{namespace}-{p}"))
        first = _wait_for(fires, layout(base, scale.items), launched, cap)
        if first is not None:
            setup = first[1] - launched
            changes = _join_and_leave(fires, admin, namespace, url, ledger, job, ids, tmp, cap)
    finally:
        terminate(procs)
        admin.stop()
        admin.close()
    after = Probe.take(zk)
    logs = "".join(p.read_text(errors="replace") for p in tmp.glob(f"{namespace}-*.log"))
    return Outcome(
        scale=scale,
        changes=changes,
        rejected=after.large_rejected
        - before.large_rejected
        + zk.log_path.read_text(errors="replace").count("Len error")
        - len_errors,
        setup=setup,
        warnings={symptom: logs.count(symptom) for symptom in SYMPTOMS},
        cap=cap,
    )


def _join_and_leave(
    fires: Fires,
    admin: KazooClient,
    namespace: str,
    url: str,
    ledger: Path,
    job: JobSpec,
    ids: list[str],
    tmp: Path,
    cap: float,
) -> list[Change]:
    extra = ids[-1]
    watch = NodeWatch(admin, f"/{namespace}{JobPaths(JOB).instance(extra)}")
    joiner = spawn_worker(WorkerSpec(url, [extra], [job], str(ledger)), tmp, f"{namespace}-j")
    changes = []
    try:
        for kind, instances in (("join", ids), ("leave", ids[:-1])):
            if kind == "leave":
                terminate([joiner])
            at = watch.wait("CREATED" if kind == "join" else "DELETED", 60)
            found = _wait_for(fires, layout(instances, fires.items), at, cap)
            if found is None:
                changes.append(Change(kind, at, math.nan, math.nan, -1))
                continue
            fire, done, skipped = found
            changes.append(Change(kind, at, done, fire, skipped))
    finally:
        terminate([joiner])
    return changes


def run(zk: BenchZooKeeper, tmp: Path, quick: bool) -> list[Table]:
    plans = [(QUICK, QUICK_CAP)] if quick else [(FULL, FULL_CAP), (REFERENCE, REFERENCE_CAP)]
    outcomes = [measure(zk, tmp, scale, cap) for scale, cap in plans]
    table = Table(
        "5. Resharding at scale: a membership change to the first fire on the new layout",
        [
            "items × instances",
            "launch → first full fire (s)",
            "change",
            "change → last item of first fire on new layout (s)",
            "that fire, s after the change",
            "fires skipped",
            "requests rejected for size",
            "target: ≤ interval + 2 s, none rejected",
        ],
    )
    for outcome in outcomes:
        scale = outcome.scale
        label = f"{scale.items:,} × {scale.instances}"
        limit = scale.interval + TARGET_BEYOND_INTERVAL
        if not outcome.changes:
            symptoms = "; ".join(f"{n}× '{s}'" for s, n in outcome.warnings.items() if n)
            table.add(
                label,
                f"never (> {outcome.cap:g} s)",
                "–",
                "–",
                "–",
                "–",
                outcome.rejected,
                f"{MISSED}: the initial layout never ran in full ({symptoms or 'no warnings'})",
            )
            continue
        for change in outcome.changes:
            ok = change.delay <= limit and outcome.rejected == 0
            table.add(
                label,
                num(outcome.setup, 1),
                f"{change.kind} ({scale.instances}{'+1' if change.kind == 'join' else '+1−1'})",
                num(change.delay, 2),
                num(change.fire - change.at, 2),
                change.fires_skipped if change.fires_skipped >= 0 else "never ran",
                outcome.rejected,
                f"{verdict(ok)} (≤ {limit:g} s)",
            )
    table.notes += [
        (
            "Instances share processes (10 per process for 50) plus the joining one in its "
            f"own; each instance has its own ZooKeeper session ({SESSION_MS // 1000} s). The "
            "job fires every 5 s with monitorExecution off."
        ),
        (
            f"The {REFERENCE.items:,} × {REFERENCE.instances} row is a smaller reference "
            "run, not a target of the issue."
        ),
        "No Java baseline: the reference measured resharding with 3 instances only.",
    ]
    return [table]
