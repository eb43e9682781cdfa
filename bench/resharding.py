"""5. Resharding at scale: 10,000 items over 50 instances, one instance joins, then leaves.

50 instances, each a Scheduler with its own ZooKeeper session, share 5 ``bench.worker``
processes; a 51st instance runs in a process of its own so it can join and leave. The
job fires every 5 s with monitorExecution off (with it on, every fire would create and
delete 20,000 ``running`` nodes, each change pushed to all 50 sessions' watches: a
million watch events per fire, see the watch-events column of section 1).

The change moment is when the joining instance's node appears, or the leaving one's
(graceful stop) disappears, as a watch on the bench's own session sees it. The delay is
from there to the start of the last item of the first fire in which all 10,000 items ran
on the new assignment (the job's strategy over the new instance list, computed with
shardcron's own code: AVG_ALLOCATION, the default). The target is the fire interval
plus 2 s. The full run measures 10,000 × 50 a second time with RENDEZVOUS, the
low-movement strategy (a 51st instance gives 277 items a new owner, where
AVG_ALLOCATION gives 4,904), judged on the same join and leave target. "Rejected for
size" is ZooKeeper's ``zk_large_requests_rejected`` counter plus "Len error" lines in
its log.
The launch row is the time from the first worker's ``exec`` to the last item start of the
first fire in which all items ran on the initial layout; its target (10 s) applies to
10,000 × 50.

5b follows each run phase by phase, polled from the bench's own session every half
second: all instances' nodes present, the layout written (the resharding flags gone and
three sample items, first, middle and last, owned as the strategy says), the first
complete fire. Over the whole run it counts ZooKeeper's requests, watch events pushed
(Δ``zk_packets_sent`` − Δ``zk_packets_received``) and the CPU seconds of the workers, of
ZooKeeper's JVM and of the whole machine (``/proc/stat``: the cores are shared), and the
workers' peak resident memory; the bottleneck it names is read from those figures. The
full run adds 100,000 items over 100 instances (10 processes, one fire every 20 s), with
no target: each wait is capped, and the run stops early if the workers' memory reaches
6 GiB or the machine's available memory falls below 3 GiB.
"""

from __future__ import annotations

import math
import os
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from bench.common import (
    BenchZooKeeper,
    LedgerTail,
    Probe,
    registry_url,
    spawn_worker,
    terminate,
)
from bench.report import MISSED, Table, num, verdict
from bench.worker import JobSpec, WorkerSpec, proc_cpu_seconds, proc_status
from shardcron.coordination.paths import JobPaths
from shardcron.coordination.strategies import order_instances, resolve_strategy
from shardcron.testing.zookeeper import unique_namespace

JOB = "big"
SESSION_MS = 10_000


@dataclass(frozen=True)
class Scale:
    items: int
    instances: int
    processes: int
    interval: int  # seconds between fires
    strategy: str | None = None  # None: the default, AVG_ALLOCATION

    @property
    def cron(self) -> str:
        return f"0/{self.interval} * * * * ?"

    @property
    def label(self) -> str:
        return f"{self.items:,} × {self.instances}" + (
            f" ({self.strategy})" if self.strategy else ""
        )


FULL = Scale(items=10_000, instances=50, processes=5, interval=5)
# The same with the low-movement strategy: a join gives 277 items a new owner, not 4,904.
FULL_RENDEZVOUS = Scale(items=10_000, instances=50, processes=5, interval=5, strategy="RENDEZVOUS")
REFERENCE = Scale(items=1_000, instances=10, processes=2, interval=5)
HUGE = Scale(items=100_000, instances=100, processes=10, interval=20)
QUICK = REFERENCE
FULL_CAP, REFERENCE_CAP, QUICK_CAP = 60.0, 30.0, 30.0
HUGE_LAUNCH_CAP, HUGE_CAP = 150.0, 60.0  # launch, then each of join and leave
TARGET_BEYOND_INTERVAL = 2.0
TARGET_LAUNCH_S = {FULL: 10.0}  # launch → first complete fire, where the issue sets one
RSS_LIMIT_KB = 6 * 1024 * 1024  # all workers together
MIN_AVAILABLE_KB = 3 * 1024 * 1024  # the machine's MemAvailable


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


def layout(instances: list[str], items: int, strategy: str | None) -> dict[int, str]:
    assignment = resolve_strategy(strategy)(order_instances(instances), JOB, items)
    return {item: owner for owner, owned in assignment.items() for item in owned}


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has been busy so far, all cores (``/proc/stat``)."""
    ticks = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    return (sum(ticks) - idle) / os.sysconf("SC_CLK_TCK")


def mem_available_kb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    return 0


class Monitor:
    """Samples a run every half second: the workers' CPU time and memory (with the memory
    guard), and the phases of the launch as the bench's own session sees the registry."""

    def __init__(
        self, admin: KazooClient, namespace: str, scale: Scale, base: list[str], launched: float
    ) -> None:
        self.admin, self.launched = admin, launched
        self.root = f"/{namespace}"
        self.paths = JobPaths(JOB)
        self.base = base
        want = layout(base, scale.items, scale.strategy)
        self.samples = {item: want[item] for item in {0, scale.items // 2, scale.items - 1}}
        self.pids: list[int] = []
        self.cpu: dict[int, float] = {}
        self.peak_rss_kb = 0
        self.stopped = ""  # why the run stopped early, if it did
        self.registered = math.nan  # seconds after launch: every base instance's node
        self.written = math.nan  # seconds after launch: the initial layout in the registry
        self.written_by = False  # written is an upper bound: the first fire came first
        self.instances_seen = 0  # the most instance nodes seen before all were there
        self._launching = True  # the phases are polled until the first complete fire
        self._next = 0.0

    def watch(self, proc: subprocess.Popen[bytes]) -> None:
        self.pids.append(proc.pid)

    @property
    def worker_cpu(self) -> float:
        return sum(self.cpu.values())

    def tick(self, force: bool = False) -> bool:
        """Sample when half a second has passed; False once the run must stop."""
        now = time.monotonic()
        if now < self._next and not force:
            return not self.stopped
        self._next = now + 0.5
        rss = 0
        for pid in self.pids:
            cpu = proc_cpu_seconds(pid)
            if not math.isnan(cpu):
                self.cpu[pid] = cpu
            rss += proc_status(pid).get("VmRSS", 0)
        self.peak_rss_kb = max(self.peak_rss_kb, rss)
        available = mem_available_kb()
        if not self.stopped and rss > RSS_LIMIT_KB:
            self.stopped = f"stopped early: the workers' memory reached {rss / 1024**2:.1f} GiB"
        elif not self.stopped and available < MIN_AVAILABLE_KB:
            self.stopped = (
                f"stopped early: the machine's available memory fell to "
                f"{available / 1024**2:.1f} GiB (workers: {rss / 1024**2:.1f} GiB)"
            )
        self._phases()
        return not self.stopped

    def launched_fully(self, done: float) -> None:
        """The first complete fire's last item started at ``done``: the launch's phases
        end. A layout the half-second poll had not seen yet was written by then; a poll
        now, later than ``done``, would time it later than that fire (and later polls
        would see the join's layout instead)."""
        self._launching = False
        if math.isnan(self.written):
            self.written, self.written_by = done - self.launched, True

    def _phases(self) -> None:
        if not self._launching:
            return
        paths, root = self.paths, self.root
        try:
            if math.isnan(self.registered):
                found = len(self.admin.get_children(root + paths.instances))
                self.instances_seen = max(self.instances_seen, found)
                if found >= len(self.base):
                    self.registered = time.time() - self.launched
            if not math.isnan(self.registered) and math.isnan(self.written):
                flags = (paths.sharding_necessary, paths.sharding_processing)
                if any(self.admin.exists(root + flag) for flag in flags):
                    return
                for item, owner in self.samples.items():
                    if self.admin.get(root + paths.item_instance(item))[0] != owner.encode():
                        return
                self.written = time.time() - self.launched
        except KazooException:  # a node not there yet, or a slow answer: next tick
            return


def _wait_for(
    fires: Fires, want: dict[int, str], after: float, timeout: float, monitor: Monitor
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and monitor.tick():
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


@dataclass(frozen=True)
class Usage:
    """What a whole run (launch to the end of the last wait) cost."""

    wall: float  # seconds
    worker_cpu: float  # seconds, all worker processes
    zk_cpu: float  # seconds, ZooKeeper's JVM
    machine_cpu: float  # seconds, every process on the machine
    bench_cpu: float  # seconds, this process (ledger reading, polling)
    requests: int  # packets ZooKeeper received
    watch_events: int  # packets it sent beyond one answer per request
    writes: int  # zxids
    peak_rss_kb: int  # all workers together

    @property
    def capacity(self) -> float:
        return (os.cpu_count() or 1) * self.wall


@dataclass
class Outcome:
    scale: Scale
    changes: list[Change]
    rejected: int  # requests ZooKeeper rejected for size
    setup: float  # launch to the first complete fire; NaN if it never came
    warnings: dict[str, int]  # worker log lines that tell why it did not converge
    cap: float
    launch_cap: float = 0.0
    registered: float = math.nan  # launch to every instance's node
    written: float = math.nan  # launch to the initial layout in the registry
    written_by: bool = False  # written is an upper bound (the poll had not seen it yet)
    stopped: str = ""  # why the run stopped early (memory guard)
    instances_seen: int = 0  # the most instance nodes seen while not all were there
    usage: Usage | None = None


# Worker log lines worth counting when the layout does not converge, and what they mean.
SYMPTOMS = {
    "did not load": "a job's tree cache did not load in time, so it did not start there",
    "missed by": "fires that came too late to run",
    "items of gone instances": "owners gone from the layout",
    "left half-done": "a resharding cut short",
    "resharding did not finish": "followers gave up waiting for the layout",
    "resharding transaction raced": "a resharding raced another",
}


def measure(
    zk: BenchZooKeeper, tmp: Path, scale: Scale, cap: float, launch_cap: float | None = None
) -> Outcome:
    """Launch, then one join and one leave; ``cap`` bounds each wait for a new layout
    (``launch_cap`` the first one, ``cap`` by default)."""
    launch_cap = cap if launch_cap is None else launch_cap
    namespace = unique_namespace("reshard")
    url = registry_url(zk, namespace, SESSION_MS)
    ledger = tmp / f"{namespace}.ledger"
    job = JobSpec(JOB, scale.items, scale.cron, monitor=False, strategy=scale.strategy)
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
    zk_cpu, busy, own = proc_cpu_seconds(zk.pid), machine_busy_seconds(), time.process_time()
    try:
        launched = time.time()
        monitor = Monitor(admin, namespace, scale, base, launched)
        for p in range(scale.processes):
            spec = WorkerSpec(url, base[p * per : (p + 1) * per], [job], str(ledger))
            procs.append(spawn_worker(spec, tmp, f"{namespace}-{p}"))
            monitor.watch(procs[-1])
        first = _wait_for(
            fires, layout(base, scale.items, scale.strategy), launched, launch_cap, monitor
        )
        if first is not None:
            setup = first[1] - launched
            monitor.launched_fully(first[1])
            changes = _join_and_leave(
                fires, admin, namespace, url, ledger, job, ids, tmp, cap, monitor
            )
        monitor.tick(force=True)
        end = Probe.take(zk)
        usage = Usage(
            wall=end.at - launched,
            worker_cpu=monitor.worker_cpu,
            zk_cpu=proc_cpu_seconds(zk.pid) - zk_cpu,
            machine_cpu=machine_busy_seconds() - busy,
            bench_cpu=time.process_time() - own,
            requests=end.received - before.received,
            watch_events=(end.sent - before.sent) - (end.received - before.received),
            writes=(end.zxid & 0xFFFFFFFF) - (before.zxid & 0xFFFFFFFF),
            peak_rss_kb=monitor.peak_rss_kb,
        )
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
        launch_cap=launch_cap,
        registered=monitor.registered,
        written=monitor.written,
        written_by=monitor.written_by,
        stopped=monitor.stopped,
        instances_seen=monitor.instances_seen,
        usage=usage,
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
    monitor: Monitor,
) -> list[Change]:
    extra = ids[-1]
    watch = NodeWatch(admin, f"/{namespace}{JobPaths(JOB).instance(extra)}")
    joiner = spawn_worker(WorkerSpec(url, [extra], [job], str(ledger)), tmp, f"{namespace}-j")
    monitor.watch(joiner)
    changes = []
    try:
        for kind, instances in (("join", ids), ("leave", ids[:-1])):
            if monitor.stopped:
                break
            if kind == "leave":
                monitor.tick(force=True)  # the joiner's CPU time, before it exits
                terminate([joiner])
            at = watch.wait("CREATED" if kind == "join" else "DELETED", 60)
            found = _wait_for(fires, layout(instances, fires.items, job.strategy), at, cap, monitor)
            if found is None:
                changes.append(Change(kind, at, math.nan, math.nan, -1))
                continue
            fire, done, skipped = found
            changes.append(Change(kind, at, done, fire, skipped))
    finally:
        terminate([joiner])
    return changes


def _symptoms(outcome: Outcome) -> str:
    return "; ".join(f"{n}× '{s}'" for s, n in outcome.warnings.items() if n)


def _judged(scale: Scale) -> bool:
    """Whether table 5 holds this scale to its targets (100,000 × 100 is reported only)."""
    return scale != HUGE


def changes_table(outcomes: list[Outcome]) -> Table:
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
            "target: launch ≤ 10 s (10,000 × 50); change ≤ interval + 2 s, none rejected",
        ],
    )
    for outcome in outcomes:
        scale = outcome.scale
        label = scale.label
        limit = scale.interval + TARGET_BEYOND_INTERVAL
        if not outcome.changes:
            symptoms = _symptoms(outcome) or "no warnings"
            reason = f"the initial layout never ran in full ({symptoms})"
            table.add(
                label,
                f"never ({outcome.stopped})"
                if outcome.stopped
                else f"never (> {outcome.launch_cap:g} s)",
                "–",
                "–",
                "–",
                "–",
                outcome.rejected,
                f"{MISSED}: {reason}" if _judged(scale) else f"– (no target): {reason}",
            )
            continue
        launch_target = TARGET_LAUNCH_S.get(scale)
        table.add(
            label,
            num(outcome.setup, 1),
            f"launch (0 → {scale.instances})",
            "–",
            "–",
            "–",
            outcome.rejected,
            f"{verdict(outcome.setup <= launch_target)} (≤ {launch_target:g} s)"
            if launch_target is not None
            else "–",
        )
        for change in outcome.changes:
            ok = change.delay <= limit and outcome.rejected == 0
            table.add(
                label,
                num(outcome.setup, 1),
                f"{change.kind} ({scale.instances}{'+1' if change.kind == 'join' else '+1−1'})",
                num(change.delay, 2) if not math.isnan(change.delay) else f"> {outcome.cap:g}",
                num(change.fire - change.at, 2),
                change.fires_skipped if change.fires_skipped >= 0 else "never ran",
                outcome.rejected,
                f"{verdict(ok)} (≤ {limit:g} s)" if _judged(scale) else "– (no target)",
            )
    table.notes += [
        (
            "Instances share processes (10 per process) plus the joining one in its "
            f"own; each instance has its own ZooKeeper session ({SESSION_MS // 1000} s). The "
            "job fires every 5 s (100,000 × 100: every 20 s) with monitorExecution off."
        ),
        (
            f"The {REFERENCE.items:,} × {REFERENCE.instances} row is a smaller reference "
            "run, not a target of the issue; 100,000 × 100 (full run only) has no target."
        ),
        (
            "Rows without a strategy use the default, AVG_ALLOCATION (ElasticJob's); the "
            "RENDEZVOUS row (full run only) is the same job with shardcron's low-movement "
            "strategy, which Java workers cannot run."
        ),
        "No Java baseline: the reference measured resharding with 3 instances only.",
    ]
    return table


def _seconds(value: float, outcome: Outcome) -> str:
    if not math.isnan(value):
        return num(value, 1)
    if outcome.stopped and outcome.usage is not None:
        return f"not reached (stopped at {outcome.usage.wall:.0f} s)"
    return f"not reached in {outcome.launch_cap:g} s"


def bottleneck(outcome: Outcome) -> str:
    """The limit the run's own figures point at: the phase that did not finish, whether
    the cores were saturated and by whom, and the workers' own warnings."""
    usage = outcome.usage
    parts = [outcome.stopped] if outcome.stopped else []
    if math.isnan(outcome.registered):
        parts.append(
            f"not every instance registered (at most {outcome.instances_seen} of "
            f"{outcome.scale.instances})"
        )
    elif math.isnan(outcome.written):
        parts.append(f"instances registered at {outcome.registered:.0f} s, layout never written")
    elif math.isnan(outcome.setup):
        parts.append(f"layout written at {outcome.written:.0f} s, but no fire ran every item on it")
    if usage is not None and usage.capacity > 0:
        cores = os.cpu_count() or 1
        busy = min(1.0, usage.machine_cpu / usage.capacity)  # clock ticks round up
        others = usage.machine_cpu - usage.worker_cpu - usage.zk_cpu - usage.bench_cpu
        name, spent = max(
            (
                ("the workers", usage.worker_cpu),
                ("ZooKeeper", usage.zk_cpu),
                ("the bench itself", usage.bench_cpu),
                ("other processes on the machine", others),
            ),
            key=lambda x: x[1],
        )
        share = f"{name} used the most: {spent:.0f} of {usage.capacity:.0f} core-seconds"
        if busy >= 0.85:
            parts.append(f"CPU-bound: the {cores} cores were {busy:.0%} busy; {share}")
        else:
            parts.append(f"not CPU-bound ({busy:.0%} of the {cores} cores busy); {share}")
    for symptom, meaning in SYMPTOMS.items():
        if count := outcome.warnings.get(symptom, 0):
            parts.append(f"workers logged {count}× '{symptom}' ({meaning})")
    return "; ".join(parts)


def phases_table(outcomes: list[Outcome]) -> Table:
    table = Table(
        "5b. Resharding runs phase by phase, what they cost, and the bottleneck",
        [
            "items × instances",
            "launch → all instances registered (s)",
            "→ layout written (s)",
            "→ first complete fire (s)",
            "run wall (s)",
            "requests to ZooKeeper",
            "watch events pushed",
            "CPU s: workers / ZooKeeper / bench / whole machine",
            "workers' peak RSS GiB",
            "bottleneck (no target)",
        ],
    )
    for outcome in outcomes:
        usage = outcome.usage
        table.add(
            outcome.scale.label,
            _seconds(outcome.registered, outcome),
            ("≤ " if outcome.written_by else "") + _seconds(outcome.written, outcome),
            _seconds(outcome.setup, outcome),
            num(usage.wall, 0) if usage else "–",
            f"{usage.requests:,}" if usage else "–",
            f"{usage.watch_events:,}" if usage else "–",
            (
                f"{usage.worker_cpu:.0f} / {usage.zk_cpu:.0f} / {usage.bench_cpu:.0f} / "
                f"{usage.machine_cpu:.0f} (of {usage.capacity:.0f})"
                if usage
                else "–"
            ),
            num(usage.peak_rss_kb / 1024**2, 2) if usage else "–",
            bottleneck(outcome),
        )
    table.notes += [
        (
            "Phases are polled every half second from the bench's own session; a run covers "
            "the launch and, when the first complete fire came, one join and one leave. "
            "'≤': the first complete fire came before a poll saw the layout, which was "
            "written by then."
        ),
        (
            "Requests = Δzk_packets_received (pings included); watch events pushed = "
            "Δzk_packets_sent − Δzk_packets_received. The whole machine's CPU includes "
            "every other process on these cores; 'CPU-bound' means at least 85 % busy."
        ),
        (
            f"100,000 × {HUGE.instances} runs only in the full bench: launch capped at "
            f"{HUGE_LAUNCH_CAP:g} s, join and leave at {HUGE_CAP:g} s each; it stops early if "
            f"the workers reach {RSS_LIMIT_KB // 1024**2} GiB or the machine has less than "
            f"{MIN_AVAILABLE_KB // 1024**2} GiB available."
        ),
    ]
    return table


def run(zk: BenchZooKeeper, tmp: Path, quick: bool) -> list[Table]:
    plans: list[tuple[Scale, float, float]] = (
        [(QUICK, QUICK_CAP, QUICK_CAP)]
        if quick
        else [
            (FULL, FULL_CAP, FULL_CAP),
            (FULL_RENDEZVOUS, FULL_CAP, FULL_CAP),
            (REFERENCE, REFERENCE_CAP, REFERENCE_CAP),
            (HUGE, HUGE_CAP, HUGE_LAUNCH_CAP),
        ]
    )
    outcomes = [measure(zk, tmp, scale, cap, launch) for scale, cap, launch in plans]
    return [changes_table(outcomes), phases_table(outcomes)]
