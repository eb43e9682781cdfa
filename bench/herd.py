"""4d. A herd: N jobs × 2 items, all due in the same second, on 2 worker processes.

Two ``bench.worker`` processes start at once, one instance each with its own ZooKeeper
session (10 s, shardcron's default), and run the same N jobs of 2 items (job body
``bench.jobs`` record, every setting at its default: monitorExecution and misfire on).
Every job has the same cron, one second every ``interval`` seconds (``7,27,47 * * * * ?``
for 20 s), phased so that no job fires in the first ``first_after`` seconds after launch:
every due moment is a herd of N jobs, as at the top of the minute.

* **registered**: launch (just before the first worker's ``exec``) to the first moment at
  which every job has both workers' ``instances/{id}`` node, as ZooKeeper itself lists its
  ephemeral nodes (the ``dump`` four-letter word, polled every half second). A run that
  has not registered every job within the cap is measured anyway.
* **herds**: the first due moment H at least a second after registration (or after the
  cap), the jobs' first fire: each job's leader writes its first layout for both
  workers ahead of it (5 s before its claim, once no worker has joined for a second;
  ElasticJob writes it at the first fire), or with it if registration ended too late
  for that; and the one after it, a steady herd. Each herd's window is
  [H − 0.5 s, H + interval − 0.5 s).
* **item-fires run**: distinct (job, item) pairs whose first ledger start falls in
  [H, H + interval − 0.5 s), out of N × 2; **lateness** is that start minus H (not taken
  modulo the second: a herd can run more than a second late).
* **requests per instance per tick**: the instance's own ``Registry.request_count``
  (every request kazoo sent, pings excluded) over the herd's window, read by the worker
  at the two half seconds. The cross-check is ZooKeeper's own count of the packets it
  received on that instance's session over the same window (``cons``; it includes
  pings). The target, "at most 2 round trips plus chunks", is read here as at most one
  claim and one completion request per started 1,000 item-fires the instance ran in that
  herd: 2 × ⌈item-fires / 1,000⌉ (a chunk of 1,000 items' ops stays far below
  ZooKeeper's 1 MiB request limit). It is judged on the steady herd only: the first herd
  may also carry the sharding.
* **CPU**: user + system seconds of each worker and of ZooKeeper's JVM over the window.
* **graceful stop**: half an interval after the steady herd's next one (nothing runs),
  SIGTERM to both workers at once, as a deploy stops them: seconds until both exited
  (killed after STOP_CAP_SECONDS), and the jobs whose ``stopped`` list then names both
  workers, i.e. that show STOPPED rather than CRASHED. No target: reported.
"""

from __future__ import annotations

import math
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import (
    BenchZooKeeper,
    Spread,
    read_jsonl,
    registry_url,
    sleep_until,
    spawn_worker,
    starts,
    terminate,
)
from bench.report import MET, MISSED, Table, ms, num
from bench.worker import JobSpec, WorkerSpec, proc_cpu_seconds
from shardcron.config.registry import RegistryConfig
from shardcron.coordination.paths import JobPaths
from shardcron.registry.zookeeper import ZooKeeperRegistry
from shardcron.testing.zookeeper import unique_namespace

SESSION_MS = 10_000  # shardcron's default
INSTANCES = ("127.0.0.1@-@7201", "127.0.0.1@-@7202")
TARGET_REGISTERED_S = 20.0
# How long the bench waits for a graceful stop before it kills the workers: an
# orchestrator's grace (Kubernetes gives 30 s).
STOP_CAP_SECONDS = 30.0
TARGET_P99_MS = 250.0
ITEMS_PER_CHUNK = 1000


@dataclass(frozen=True)
class Plan:
    jobs: int
    items: int
    interval: int  # seconds between herds; divides 60
    first_after: int  # no herd sooner than this after launch
    register_cap: float  # measure the herds after this even if registration is not done


FULL = Plan(jobs=10_000, items=2, interval=20, first_after=20, register_cap=60.0)
QUICK = Plan(jobs=500, items=2, interval=10, first_after=10, register_cap=30.0)


@dataclass(frozen=True)
class Probe:
    """One moment of the run: ZooKeeper's per-session packet counts and CPU times."""

    at: float
    received: dict[int, int]  # session id -> packets received by the server
    worker_cpu: list[float]  # seconds, per worker process
    zk_cpu: float

    @classmethod
    def take(cls, zk: BenchZooKeeper, procs: list[subprocess.Popen[bytes]]) -> Probe:
        return cls(
            time.time(),
            zk.received_by_session(),
            [proc_cpu_seconds(p.pid) for p in procs],
            proc_cpu_seconds(zk.pid),
        )


@dataclass(frozen=True)
class Herd:
    at: float
    first: bool  # the first after registration: each job shards for both workers on it
    expected: int
    lateness: Spread  # ms, over the item-fires that ran
    ran: dict[str, int]  # item-fires run, per instance
    own: dict[str, float]  # requests the instance sent over the window (NaN: no status)
    packets: dict[str, float]  # packets ZooKeeper received on its session (NaN: unknown)
    worker_cpu: list[float]
    zk_cpu: float

    @property
    def runs(self) -> int:
        return sum(self.ran.values())

    def allowance(self, instance: str) -> int:
        return 2 * math.ceil(self.ran.get(instance, 0) / ITEMS_PER_CHUNK)


@dataclass
class Outcome:
    plan: Plan
    cron: str
    registered_at: float  # seconds after launch; NaN if not within the cap
    registered: int  # jobs registered on every worker at that moment (or at the cap)
    herds: list[Herd] = field(default_factory=list)
    stopped_in: float = math.nan  # SIGTERM to the last worker's exit, seconds
    killed: int = 0  # workers still running STOP_CAP_SECONDS after SIGTERM
    stops_recorded: int = 0  # jobs whose `stopped` list names both workers after


def _registered(zk: BenchZooKeeper, namespace: str) -> int:
    """Jobs whose ``instances`` hold a node of every bench instance, per ZooKeeper."""
    prefix = f"/{namespace}/"
    seen: dict[str, set[str]] = {}
    for paths in zk.ephemerals().values():
        for path in paths:
            if not path.startswith(prefix):
                continue
            parts = path[len(prefix) :].split("/")
            if len(parts) == 3 and parts[1] == "instances":
                seen.setdefault(parts[0], set()).add(parts[2])
    return sum(1 for found in seen.values() if found.issuperset(INSTANCES))


def _sessions(zk: BenchZooKeeper, namespace: str) -> dict[str, int]:
    """Each bench instance's session id: the owner of its ``instances/{id}`` nodes."""
    found: dict[str, int] = {}
    for session, paths in zk.ephemerals().items():
        for path in paths:
            if path.startswith(f"/{namespace}/") and "/instances/" in path:
                found[path.rsplit("/", 1)[1]] = session
                break
    return found


def _cron(first: int, interval: int) -> str:
    seconds = sorted({(first + k * interval) % 60 for k in range(60 // interval)})
    return f"{','.join(str(s) for s in seconds)} * * * * ?"


def _alive(procs: list[subprocess.Popen[bytes]], logs: list[Path]) -> None:
    for proc, log in zip(procs, logs, strict=True):
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"herd worker exited ({proc.returncode}): {tail}")


def measure(zk: BenchZooKeeper, tmp: Path, plan: Plan) -> Outcome:
    namespace = unique_namespace("herd")
    url = registry_url(zk, namespace, SESSION_MS)
    ledger = tmp / f"{namespace}.ledger"
    statuses = [tmp / f"{namespace}-{n}.status" for n in range(len(INSTANCES))]
    logs = [tmp / f"{namespace}-{n}.log" for n in range(len(INSTANCES))]
    first_herd = math.ceil(time.time() + plan.first_after + 1)
    cron = _cron(first_herd, plan.interval)
    jobs = [JobSpec(f"h{n:05d}", plan.items, cron) for n in range(plan.jobs)]
    specs = [
        WorkerSpec(url, [instance], jobs, str(ledger), str(status), status_from_launch=True)
        for instance, status in zip(INSTANCES, statuses, strict=True)
    ]
    procs: list[subprocess.Popen[bytes]] = []
    probes: list[Probe] = []
    launched = time.time()
    try:
        for n, spec in enumerate(specs):
            procs.append(spawn_worker(spec, tmp, f"{namespace}-{n}"))
        outcome = Outcome(plan, cron, math.nan, 0)
        deadline = launched + plan.register_cap
        while time.time() < deadline:
            _alive(procs, logs)
            outcome.registered = _registered(zk, namespace)
            if outcome.registered == plan.jobs:
                outcome.registered_at = time.time() - launched
                break
            time.sleep(0.5)
        ready = launched + outcome.registered_at if outcome.registered == plan.jobs else deadline
        later = max(0, math.ceil((ready + 1.0 - first_herd) / plan.interval))
        herds = [first_herd + (later + k) * plan.interval for k in range(2)]
        sessions = _sessions(zk, namespace)
        for moment in [*herds, herds[-1] + plan.interval]:
            sleep_until(moment - 0.5)
            _alive(procs, logs)
            probes.append(Probe.take(zk, procs))
        time.sleep(0.7)  # the workers' status lines of the last half second land
        sleep_until(herds[-1] + plan.interval * 1.5)  # between two herds: nothing runs
        outcome.stopped_in, outcome.killed = _stop(procs)
        outcome.stops_recorded = _stops_recorded(zk, namespace, jobs)
    finally:
        terminate(procs)
    records = starts(ledger)
    lines = [read_jsonl(status) for status in statuses]
    for k, moment in enumerate(herds):
        outcome.herds.append(
            _herd(moment, k == 0, plan, records, lines, sessions, probes[k], probes[k + 1])
        )
    return outcome


def _stop(procs: list[subprocess.Popen[bytes]]) -> tuple[float, int]:
    """SIGTERM every worker at once (a deploy stopping them): seconds until the last one
    exited, and how many had not within STOP_CAP_SECONDS (terminate kills those)."""
    began = time.time()
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    killed = 0
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, began + STOP_CAP_SECONDS - time.time()))
        except subprocess.TimeoutExpired:
            killed += 1
    return time.time() - began, killed


def _stops_recorded(zk: BenchZooKeeper, namespace: str, jobs: list[JobSpec]) -> int:
    """Jobs whose ``stopped`` list names both workers: shown STOPPED, not CRASHED."""
    registry = ZooKeeperRegistry(RegistryConfig(servers=zk.connect_string, namespace=namespace))
    registry.start()
    try:
        found = registry.get_with_stats([JobPaths(job.name).stopped for job in jobs])
    finally:
        registry.close()
    both = {instance.encode() for instance in INSTANCES}
    return sum(1 for node in found if node is not None and set(node[0].split(b",")) == both)


def _nearest(lines: list[dict[str, Any]], at: float) -> dict[str, Any] | None:
    return min(lines, key=lambda line: abs(line["t"] - at), default=None)


def _herd(
    moment: float,
    first: bool,
    plan: Plan,
    records: list[dict[str, Any]],
    statuses: list[list[dict[str, Any]]],
    sessions: dict[str, int],
    before: Probe,
    after: Probe,
) -> Herd:
    end = moment + plan.interval - 0.5
    firsts: dict[tuple[str, int], dict[str, Any]] = {}
    for record in records:
        if moment <= record["start"] < end:
            key = (record["job"], record["item"])
            if key not in firsts or record["start"] < firsts[key]["start"]:
                firsts[key] = record
    ran = Counter(r["instance"] for r in firsts.values())
    own: dict[str, float] = {}
    for instance, lines in zip(INSTANCES, statuses, strict=True):
        start, stop = _nearest(lines, moment - 0.5), _nearest(lines, end)
        if start is None or stop is None or start is stop:
            own[instance] = math.nan
        else:
            own[instance] = stop["requests"][instance] - start["requests"][instance]
    packets: dict[str, float] = {}
    for instance in INSTANCES:
        session = sessions.get(instance)
        if session is None or session not in before.received or session not in after.received:
            packets[instance] = math.nan
        else:
            packets[instance] = after.received[session] - before.received[session]
    return Herd(
        at=moment,
        first=first,
        expected=plan.jobs * plan.items,
        lateness=Spread.of([(r["start"] - moment) * 1000 for r in firsts.values()]),
        ran={instance: ran.get(instance, 0) for instance in INSTANCES},
        own=own,
        packets=packets,
        worker_cpu=[b - a for a, b in zip(before.worker_cpu, after.worker_cpu, strict=True)],
        zk_cpu=after.zk_cpu - before.zk_cpu,
    )


def _per_instance(values: dict[str, float]) -> str:
    return " / ".join(num(values[i], 0) for i in INSTANCES)


def _judge(herd: Herd) -> str:
    problems = []
    if herd.runs < herd.expected:
        problems.append(f"{herd.runs:,}/{herd.expected:,} item-fires ran")
    if not herd.lateness.p99 <= TARGET_P99_MS:
        problems.append(f"p99 {ms(herd.lateness.p99)} > {TARGET_P99_MS:g} ms")
    if not herd.first:
        for instance in INSTANCES:
            limit = herd.allowance(instance)
            if math.isnan(herd.own[instance]):
                problems.append("requests not measured (no status lines from the worker)")
            elif herd.own[instance] > limit:
                problems.append(f"{num(herd.own[instance], 0)} requests > {limit} per tick")
    return f"{MISSED}: " + "; ".join(problems) if problems else MET


def table(outcome: Outcome) -> Table:
    plan = outcome.plan
    result = Table(
        f"4d. Herd: {plan.jobs:,} jobs × {plan.items} items due in the same second, "
        f"on {len(INSTANCES)} workers",
        [
            "step",
            "launch → every job registered on both workers (s)",
            "item-fires run",
            "lateness p50 / p99 / max ms",
            "requests per instance per tick (own count)",
            "packets ZooKeeper received per session per tick",
            "CPU s per tick: workers / ZooKeeper",
            (
                f"target: registered ≤ {TARGET_REGISTERED_S:g} s; every item-fire runs, "
                f"p99 ≤ {TARGET_P99_MS:g} ms, ≤ 2 requests per instance per tick plus chunks"
            ),
        ],
    )
    if outcome.registered == plan.jobs:
        ok = outcome.registered_at <= TARGET_REGISTERED_S
        verdict = MET if ok else f"{MISSED}: {outcome.registered_at:.1f} s"
        registered = num(outcome.registered_at, 1)
    else:
        verdict = f"{MISSED}: {outcome.registered:,}/{plan.jobs:,} in {plan.register_cap:g} s"
        registered = f"not reached in {plan.register_cap:g} s"
    result.add("registration", registered, "–", "–", "–", "–", "–", verdict)
    for herd in outcome.herds:
        late = herd.lateness
        limits = " / ".join(str(herd.allowance(i)) for i in INSTANCES)
        result.add(
            "first herd after registration (first layouts)" if herd.first else "next herd (steady)",
            "–",
            f"{herd.runs:,}/{herd.expected:,} ({herd.runs / herd.expected:.1%})",
            f"{ms(late.p50)} / {ms(late.p99)} / {ms(late.max)}",
            _per_instance(herd.own) + ("" if herd.first else f" (limit {limits})"),
            _per_instance(herd.packets),
            " / ".join(num(cpu, 1) for cpu in herd.worker_cpu) + f" / {num(herd.zk_cpu, 1)}",
            _judge(herd),
        )
    stop = (
        f"both exited in {outcome.stopped_in:.1f} s"
        if not outcome.killed
        else f"{outcome.killed} not exited in {STOP_CAP_SECONDS:g} s"
    )
    result.add(
        "graceful stop (SIGTERM to both at once)",
        "–",
        f"{stop}; clean stop recorded for {outcome.stops_recorded:,}/{plan.jobs:,} jobs",
        "–",
        "–",
        "–",
        "–",
        "no target",
    )
    result.notes += [
        (
            f"Cron `{outcome.cron}` (one herd every {plan.interval} s, none in the first "
            f"{plan.first_after} s); 2 worker processes, one instance and one "
            f"{SESSION_MS // 1000} s ZooKeeper session each; monitorExecution and misfire on."
        ),
        (
            "Registered: every job's `instances/{id}` node of both workers, as ZooKeeper's "
            "`dump` lists its ephemeral nodes; a job's first layout is written ahead of its "
            "first fire once registration is quiet (5 s before the claim), or with it."
        ),
        (
            "A tick is one herd: from the half second before it to the half second before "
            "the next. Own count = the instance's Registry.request_count (pings excluded); "
            "packets = ZooKeeper's `cons` count for that session (pings included). "
            f"Chunks: one claim and one completion request per {ITEMS_PER_CHUNK:,} "
            "item-fires of the instance (limit 2 × ⌈item-fires / 1,000⌉), judged on the "
            "steady herd only."
        ),
        (
            "Graceful stop: half an interval after the herd that follows the steady one, "
            "SIGTERM to both workers at once; recorded = the job's `stopped` list names "
            f"both workers (it shows STOPPED, not CRASHED); killed after {STOP_CAP_SECONDS:g} s."
        ),
    ]
    return result


def run(zk: BenchZooKeeper, tmp: Path, quick: bool) -> list[Table]:
    return [table(measure(zk, tmp, QUICK if quick else FULL))]
