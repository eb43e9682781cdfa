"""Plumbing shared by the benchmarks: the ZooKeeper server, worker processes, the ledger,
percentiles and waiting.

The server is configured like the Java baseline's (reference ``elasticjob-java-measured.md``
§0): standalone ZooKeeper 3.8 on loopback, ``tickTime=500``, sessions 1–60 s, every
four-letter word allowed, and fsync on every write (the default; the test harness turns
it off, so :class:`BenchZooKeeper` puts it back).
"""

from __future__ import annotations

import compileall
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from bench.worker import WorkerSpec
from shardcron.testing.zookeeper import ZooKeeperServer

ROOT = Path(__file__).resolve().parent.parent
NIO_FACTORY = "org.apache.zookeeper.server.NIOServerCnxnFactory"
T = TypeVar("T")


class BenchZooKeeper(ZooKeeperServer):
    """A :class:`ZooKeeperServer` with the Java measurement's settings."""

    def __init__(self) -> None:
        super().__init__(
            tick_time_ms=500,
            min_session_timeout_ms=1000,
            max_session_timeout_ms=60_000,
            heap_mb=1024,
            # zkServer.sh's default connection factory, as the baseline ran it.
            java_options=["-Dzookeeper.serverCnxnFactory=" + NIO_FACTORY],
            # The baseline ran with fsync on (the harness turns it off for tests).
            extra_config={"forceSync": "yes", "initLimit": 10, "syncLimit": 5},
        )

    def version(self) -> str:
        return self.mntr().get("zk_version", "?").split("-")[0]

    @property
    def pid(self) -> int:
        """The server JVM's process id (its CPU time is read from ``/proc``)."""
        if self._proc is None:
            raise RuntimeError("ZooKeeper is not running")
        return self._proc.pid

    def received_by_session(self) -> dict[int, int]:
        """Packets the server has received on each open connection, by session id (``cons``;
        a connection's count includes its connect request and its pings)."""
        return {
            int(sid, 16): int(received)
            for received, sid in _CONS_LINE.findall(self.four_letter("cons", timeout=30))
        }

    def ephemerals(self) -> dict[int, list[str]]:
        """Every ephemeral node the server holds, by owner session id (``dump``)."""
        found: dict[int, list[str]] = {}
        current: list[str] | None = None
        listing = False
        for line in self.four_letter("dump", timeout=30).splitlines():
            if line.startswith("Sessions with Ephemerals"):
                listing = True
            elif line.startswith("Connections dump"):
                break
            elif listing and line.startswith("0x") and line.endswith(":"):
                current = found.setdefault(int(line[2:-1], 16), [])
            elif listing and current is not None and line.startswith("\t/"):
                current.append(line[1:])
        return found


_CONS_LINE = re.compile(r"recved=(\d+),sent=\d+,sid=0x([0-9a-fA-F]+)")


@dataclass(frozen=True)
class Probe:
    """ZooKeeper's own counters at one moment (two four-letter words: ``mntr``, ``srvr``)."""

    at: float
    received: int
    sent: int
    zxid: int
    large_rejected: int

    @classmethod
    def take(cls, zk: ZooKeeperServer) -> Probe:
        at = time.time()
        mntr = zk.mntr()
        srvr = zk.four_letter("srvr")
        zxid = next(
            int(line.split(":")[1].strip(), 16)
            for line in srvr.splitlines()
            if line.startswith("Zxid:")
        )
        return cls(
            at,
            int(mntr["zk_packets_received"]),
            int(mntr["zk_packets_sent"]),
            zxid,
            int(mntr.get("zk_large_requests_rejected", "0")),
        )


# A probe pair counts two of its own packets received, and three sent, between the two
# mntr readings (measured on an idle server).
PROBE_PACKETS = 2
PROBE_SENT = 3


def registry_url(zk: ZooKeeperServer, namespace: str, session_ms: int) -> str:
    return (
        f"zk://{zk.connect_string}/{namespace}?sessionTimeoutMilliseconds={session_ms}"
        "&baseSleepTimeMilliseconds=100&maxSleepTimeMilliseconds=500"
    )


def compile_bytecode() -> None:
    """Write the bytecode of this tree's ``src`` and ``bench`` before any process starts.
    An installed package comes with it (pip compiles wheels), but an editable checkout
    run with ``PYTHONDONTWRITEBYTECODE`` (as this machine's shell sets it) has none: every
    worker then compiled all of shardcron at start, about 0.5 s of a core each, five
    workers at once in the 10,000 × 50 launch."""
    for folder in ("src", "bench"):
        compileall.compile_dir(ROOT / folder, quiet=1)


def python_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of the processes the bench starts: this tree's ``src`` ahead of the
    installed package, so that a copy of another revision measures that revision's code
    in its workers too, not the checkout the virtualenv was installed from."""
    path = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    return {**os.environ, "PYTHONPATH": path, **(extra or {})}


def spawn(
    cmd: Sequence[str], log: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            list(cmd),
            env=python_env(env),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
        )


def spawn_worker(spec: WorkerSpec, tmp: Path, name: str) -> subprocess.Popen[bytes]:
    path = tmp / f"{name}.json"
    spec.write(path)
    return spawn([sys.executable, "-m", "bench.worker", str(path)], tmp / f"{name}.log")


def terminate(procs: Iterable[subprocess.Popen[bytes]], timeout: float = 20.0) -> None:
    """SIGTERM (a graceful stop that closes the sessions), then wait; SIGKILL stragglers."""
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line being written right now
    return records


def starts(ledger: Path) -> list[dict[str, Any]]:
    return [r for r in read_jsonl(ledger) if r["phase"] == "start"]


def wait_until(check: Callable[[], T | None], timeout: float, what: str) -> T:
    """Poll ``check`` until it returns something truthy; raise at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


def sleep_until(moment: float) -> None:
    while (left := moment - time.time()) > 0:
        time.sleep(min(left, 0.5))


def next_half_second(after: float) -> float:
    """The next ``x.5`` wall-clock moment: between two whole-second fires."""
    return math.floor(after) + 0.5 + (1.0 if after % 1.0 >= 0.5 else 0.0)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Spread:
    """p50 / p90 / p99 / max of a sample, in the sample's unit."""

    n: int
    p50: float
    p90: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        return cls(
            len(values),
            percentile(values, 50),
            percentile(values, 90),
            percentile(values, 99),
            max(values) if values else math.nan,
        )


def lateness_ms(start: float) -> float:
    """Item start minus the whole second it fired for (every-second cron, < 1 s late)."""
    return (start - math.floor(start)) * 1000


def warm_up(zk: ZooKeeperServer, rounds: int = 40, batch: int = 250) -> None:
    """Run the server's request paths some ten thousand times before measuring anything.

    A fresh ZooKeeper JVM serves its first thousands of writes several times slower than
    a warm one (the JIT has not compiled them yet); the baseline's server had served many
    runs before each measurement.
    """
    from kazoo.client import KazooClient

    client = KazooClient(zk.connect_string, timeout=30)
    client.start(timeout=30)
    try:
        client.ensure_path("/bench-warm-up")
        for n in range(rounds):
            paths = [f"/bench-warm-up/n{n}-{i}" for i in range(batch)]
            for pending in [client.create_async(p, b"x") for p in paths]:
                pending.get(timeout=30)
            for pending in [client.exists_async(p) for p in paths]:
                pending.get(timeout=30)
            for i in range(0, batch, 25):
                txn = client.transaction()
                for p in paths[i : i + 25]:
                    txn.delete(p)
                txn.set_data("/bench-warm-up", b"")
                txn.commit()
        client.delete("/bench-warm-up", recursive=True)
    finally:
        client.stop()
        client.close()


class LedgerTail:
    """Reads a growing ledger incrementally (a 10,000-item fire is 10,000 lines)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def new(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with self.path.open("rb") as ledger:
            ledger.seek(self._offset)
            data = ledger.read()
        self._offset += len(data)
        data, self._partial = self._partial + data, b""
        lines = data.split(b"\n")
        self._partial = lines.pop()  # an unfinished last line, or b""
        return [json.loads(line) for line in lines if line.strip()]
