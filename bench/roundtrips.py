"""1 and 2a. Registry requests per fire, and fire lateness, for the Java baseline's twelve
configurations (plus misfire off, and instances without items).

Method (the baseline's, reference ``elasticjob-java-measured.md`` §0 "Counting ZK
requests"): 1 or 3 ``bench.worker`` processes, one instance each with a 60 s session, run
one job on ``* * * * * ?`` with 0-ms items; after the first complete fire and a warm-up,
``mntr`` + ``srvr`` are read at a half second and again a whole number of seconds later.

* requests/fire = Δ``zk_packets_received`` minus the probes' own 2 packets, divided by
  the number of distinct cron seconds in which items started inside the window. This is
  the baseline's figure (it includes pings); "net" also subtracts idle traffic: the
  packet rate of the same number of sessions whose job never fires, measured first.
* writes/fire = Δ low 32 bits of the zxid (a multi-op transaction is one zxid).
* the cross-check is each instance's own ``Registry.request_count`` (round trips it
  sent; pings excluded), read at the same half seconds.
* lateness = item start minus the whole second it fired for, over every item started in
  the window.

The baseline used a 20 s warm-up and 30 s windows; this suite uses shorter ones to fit
its 10-minute budget (fires are identical from the second one on, so the per-fire
figures do not depend on the window length; the tails have fewer samples).
"""

from __future__ import annotations

import math
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import (
    PROBE_PACKETS,
    PROBE_SENT,
    BenchZooKeeper,
    Probe,
    Spread,
    lateness_ms,
    next_half_second,
    read_jsonl,
    registry_url,
    sleep_until,
    spawn_worker,
    starts,
    terminate,
    wait_until,
)
from bench.report import Table, ms, num, ratio, verdict
from bench.worker import JobSpec, WorkerSpec
from shardcron.testing.zookeeper import unique_namespace

SESSION_MS = 60_000  # the baseline's session timeout
NEVER = "0 0 0 1 1 ? 2099"  # a cron that does not fire during the bench
JOB = "benchJob"


@dataclass(frozen=True)
class Setup:
    instances: int
    items: int
    monitor: bool
    failover: bool
    misfire: bool = True

    @property
    def label(self) -> str:
        return f"{self.instances}×{self.items}"

    def flags(self) -> list[str]:
        return [_on(self.monitor), _on(self.failover), _on(self.misfire)]


def _on(flag: bool) -> str:
    return "on" if flag else "off"


@dataclass(frozen=True)
class Java:
    """ElasticJob-Lite 3.0.4, measured: §1.1 (requests, writes) and §2 (lateness, ms)."""

    requests: float
    per_instance: float
    writes: float
    p50: float
    p99: float
    max: float


# Reference elasticjob-java-measured.md §1.1 (requests/fire, per instance, writes/fire)
# and §2 (item start lateness p50 / p99 / max, ms); misfire was on in every Java run.
JAVA: dict[Setup, Java] = {
    Setup(1, 3, True, False): Java(41.8, 41.8, 6.2, 23.2, 48.6, 48.7),
    Setup(1, 30, True, False): Java(366.0, 366.0, 60.1, 66.4, 121.6, 121.7),
    Setup(3, 3, True, False): Java(76.7, 25.6, 6.1, 31.8, 67.8, 68.7),
    Setup(3, 30, True, False): Java(604.5, 201.5, 59.1, 89.5, 176.8, 191.2),
    Setup(1, 3, True, True): Java(58.0, 58.0, 6.1, 16.6, 52.9, 52.9),
    Setup(1, 30, True, True): Java(490.0, 490.0, 60.1, 79.2, 115.7, 116.2),
    Setup(3, 3, True, True): Java(107.5, 35.8, 6.1, 41.7, 103.7, 106.4),
    Setup(3, 30, True, True): Java(813.9, 271.3, 60.1, 132.4, 290.7, 299.3),
    Setup(1, 3, False, False): Java(12.0, 12.0, 0.1, 12.1, 33.4, 33.6),
    Setup(1, 30, False, False): Java(66.0, 66.0, 0.0, 16.7, 73.2, 73.3),
    Setup(3, 3, False, False): Java(24.1, 8.0, 0.2, 22.6, 38.0, 38.3),
    Setup(3, 30, False, False): Java(78.0, 26.0, 0.0, 33.5, 63.7, 66.3),
}
EXTRA = [
    Setup(1, 3, True, False, misfire=False),
    Setup(3, 30, True, False, misfire=False),
    Setup(3, 1, True, False),  # two of the three instances own no item
]
QUICK = [Setup(1, 3, True, False), Setup(3, 3, True, False)]

TARGET_PER_INSTANCE = 2.0  # requests per fire for an instance with items
TARGET_P50_MS, TARGET_P99_MS = 2.0, 10.0  # at 3×30


@dataclass(frozen=True)
class Timing:
    warmup: float
    window: int


FULL_TIMING = Timing(warmup=1.0, window=5)
QUICK_TIMING = Timing(warmup=1.0, window=3)


@dataclass(frozen=True)
class Own:
    """One instance's own view, per fire: round trips it sent, items it ran, CPU it used."""

    requests: float
    items: float
    cpu_ms: float


@dataclass
class Measured:
    setup: Setup
    fires: int
    packets: int
    idle_packets: float
    notifications: int
    writes: int
    own: dict[str, Own]
    lateness: Spread

    def per_fire(self, count: float) -> float:
        return count / self.fires if self.fires else math.nan

    def requests(self, net: bool = False) -> float:
        return self.per_fire(self.packets - (self.idle_packets if net else 0.0))

    def with_items(self) -> list[float]:
        return [own.requests for own in self.own.values() if own.items > 0]

    def without_items(self) -> list[float]:
        return [own.requests for own in self.own.values() if own.items == 0]

    def cpu_ms(self) -> float:
        return max((own.cpu_ms for own in self.own.values()), default=math.nan)


def instance_ids(count: int) -> list[str]:
    # One host and one IP with a process per instance, like the baseline's JVMs.
    return [f"127.0.0.1@-@{1001 + k}" for k in range(count)]


def _start(
    zk: BenchZooKeeper, tmp: Path, setup: Setup, cron: str
) -> tuple[list[Path], Path, list[subprocess.Popen[bytes]]]:
    namespace = unique_namespace("rt")
    url = registry_url(zk, namespace, SESSION_MS)
    ledger = tmp / f"{namespace}.ledger"
    job = JobSpec(JOB, setup.items, cron, setup.monitor, setup.failover, setup.misfire)
    statuses, procs = [], []
    for instance in instance_ids(setup.instances):
        status = tmp / f"{namespace}-{instance.split('@-@')[1]}.status"
        spec = WorkerSpec(url, [instance], [job], str(ledger), str(status))
        procs.append(spawn_worker(spec, tmp, status.stem))
        statuses.append(status)
    return statuses, ledger, procs


def idle_rate(zk: BenchZooKeeper, tmp: Path, instances: int, timing: Timing) -> float:
    """Packets per second that ``instances`` connected sessions send when nothing fires."""
    setup = Setup(instances, 1, True, False)
    statuses, _, procs = _start(zk, tmp, setup, NEVER)
    try:
        wait_until(lambda: all(read_jsonl(s) for s in statuses), 60, "idle workers")
        time.sleep(timing.warmup)
        t0 = next_half_second(time.time())
        sleep_until(t0)
        before = Probe.take(zk)
        sleep_until(t0 + timing.window)
        after = Probe.take(zk)
    finally:
        terminate(procs)
    return (after.received - before.received - PROBE_PACKETS) / (after.at - before.at)


def _full_fire(ledger: Path, items: int) -> bool:
    seconds: dict[int, set[int]] = {}
    for record in starts(ledger):
        seconds.setdefault(int(record["start"]), set()).add(record["item"])
    return any(len(got) == items for got in seconds.values())


def measure(
    zk: BenchZooKeeper, tmp: Path, setup: Setup, timing: Timing, idle_per_second: float
) -> Measured:
    statuses, ledger, procs = _start(zk, tmp, setup, "* * * * * ?")
    try:
        wait_until(lambda: _full_fire(ledger, setup.items), 60, f"a full fire of {setup.label}")
        time.sleep(timing.warmup)
        t0 = next_half_second(time.time())
        sleep_until(t0)
        before = Probe.take(zk)
        sleep_until(t0 + timing.window)
        after = Probe.take(zk)
        time.sleep(0.6)  # let the status lines of t1 land
    finally:
        terminate(procs)
    window = [r for r in starts(ledger) if before.at <= r["start"] <= after.at]
    fires = len({int(r["start"]) for r in window})
    own: dict[str, Own] = {}
    for status in statuses:
        own.update(_own(status, ledger, before.at, after.at))
    received = after.received - before.received
    return Measured(
        setup=setup,
        fires=fires,
        packets=received - PROBE_PACKETS,
        idle_packets=idle_per_second * (after.at - before.at),
        # Every request gets one response; whatever else the server sent was a watch event.
        notifications=(after.sent - before.sent - PROBE_SENT) - (received - PROBE_PACKETS),
        writes=(after.zxid & 0xFFFFFFFF) - (before.zxid & 0xFFFFFFFF),
        own=own,
        lateness=Spread.of([lateness_ms(r["start"]) for r in window]),
    )


def _own(status: Path, ledger: Path, t0: float, t1: float) -> dict[str, Own]:
    """Per instance, per fire, between the status lines nearest to ``t0`` and ``t1``."""
    lines = read_jsonl(status)
    first = min(lines, key=lambda line: abs(line["t"] - t0))
    last = min(lines, key=lambda line: abs(line["t"] - t1))
    runs = [r for r in starts(ledger) if first["t"] <= r["start"] <= last["t"]]
    fires = len({int(r["start"]) for r in runs}) or math.nan
    found = {}
    cpu_ms = (last["cpu"] - first["cpu"]) * 1000 / fires
    for instance, count in last["requests"].items():
        mine = sum(1 for r in runs if r["instance"] == instance)
        found[instance] = Own((count - first["requests"][instance]) / fires, mine / fires, cpu_ms)
    return found


def run(zk: BenchZooKeeper, tmp: Path, quick: bool) -> list[Table]:
    timing = QUICK_TIMING if quick else FULL_TIMING
    setups = QUICK if quick else [*JAVA, *EXTRA]
    # One idle window, for 3 sessions; pings are per session, so 1 session sends a third.
    per_session = idle_rate(zk, tmp, 3, timing) / 3
    results = [measure(zk, tmp, s, timing, per_session * s.instances) for s in setups]
    return [requests_table(results, per_session, timing), lateness_table(results)]


def requests_table(results: list[Measured], per_session: float, timing: Timing) -> Table:
    table = Table(
        "1. Registry requests per fire (ZooKeeper mntr), vs ElasticJob-Lite 3.0.4",
        [
            "inst×items",
            "monitor",
            "failover",
            "misfire",
            "requests/fire (cluster)",
            "net of idle",
            "per instance with items (own count)",
            "per instance without items",
            "writes/fire",
            "watch events pushed/fire",
            "CPU ms/fire per process",
            "Java requests/fire",
            "ratio",
            "Java writes/fire",
            "target ≤ 2 per instance with items, 0 without",
        ],
    )
    for m in results:
        java = JAVA.get(m.setup)
        with_items, without = m.with_items(), m.without_items()
        ok = all(c <= TARGET_PER_INSTANCE + 0.05 for c in with_items) and all(
            c <= 0.05 for c in without
        )
        net = m.requests(net=True)
        mntr_ok = net / m.setup.instances <= TARGET_PER_INSTANCE + 0.05 if not without else ok
        table.add(
            m.setup.label,
            *m.setup.flags(),
            num(m.requests()),
            num(net),
            num(max(with_items, default=math.nan), 2),
            num(max(without, default=math.nan), 2),
            num(m.per_fire(m.writes)),
            num(m.per_fire(m.notifications)),
            num(m.cpu_ms()),
            num(java.requests) if java else "–",
            ratio(m.requests(), java.requests) if java else "–",
            num(java.writes) if java else "–",
            verdict(ok and mntr_ok),
        )
    table.notes += [
        (
            f"Windows of {timing.window} s after the first full fire and a {timing.warmup:g} s "
            "warm-up; one process per instance, 60 s sessions, fsync on, tickTime 500 ms."
        ),
        (
            "requests/fire (cluster) is the baseline's method: Δzk_packets_received − 2 probe "
            "packets, ÷ cron seconds with item starts in the window; it includes pings."
        ),
        (
            "net of idle subtracts the packets that the same number of connected sessions "
            f"send when their job never fires ({per_session:.3f} packets/s per session, "
            "measured first over one window with 3 sessions)."
        ),
        (
            "per instance columns are each instance's own Registry.request_count per fire "
            "(the cross-check; max over instances)."
        ),
        (
            "Java writes/fire counts every create/delete; shardcron's claim and completion are "
            "one multi-op transaction (one zxid) each."
        ),
        (
            "watch events pushed/fire = Δzk_packets_sent − Δzk_packets_received (probes "
            "excluded): what the "
            "server pushed to the instances' persistent watches (no request needed, but each "
            "costs the receiving process CPU). CPU is the busiest worker process's user+system "
            "time per fire (Java, reference §1.3: 40–160 ms per JVM per fire)."
        ),
    ]
    return table


def lateness_table(results: list[Measured]) -> Table:
    table = Table(
        "2a. Fire lateness (item start − scheduled second), same runs, vs ElasticJob-Lite 3.0.4",
        [
            "inst×items",
            "monitor",
            "failover",
            "misfire",
            "samples",
            "p50 ms",
            "p90 ms",
            "p99 ms",
            "max ms",
            "Java p50/p99/max ms",
            "ratio p50",
            "ratio p99",
            "target (3×30): p50 ≤ 2, p99 ≤ 10 ms",
        ],
    )
    for m in results:
        java = JAVA.get(m.setup)
        late = m.lateness
        target = "–"
        if m.setup.instances == 3 and m.setup.items == 30:
            target = verdict(late.p50 <= TARGET_P50_MS and late.p99 <= TARGET_P99_MS)
        table.add(
            m.setup.label,
            *m.setup.flags(),
            late.n,
            ms(late.p50),
            ms(late.p90),
            ms(late.p99),
            ms(late.max),
            f"{java.p50:g} / {java.p99:g} / {java.max:g}" if java else "–",
            ratio(late.p50, java.p50) if java else "–",
            ratio(late.p99, java.p99) if java else "–",
            target,
        )
    table.notes.append(
        "3 instances = 3 worker processes plus ZooKeeper on the same cores, as in the baseline."
    )
    return table
