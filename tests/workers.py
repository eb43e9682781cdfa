"""Worker processes (``shardcron run``) for multi-process tests, and their shared ledger."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

import shardcron
from shardcron.registry import Registry
from shardcron.testing.proxy import TcpProxy
from tests.cluster import Run

ROOT = Path(__file__).resolve().parent.parent
# Child processes import the shardcron this process imported (this checkout's src/, or a
# mutated copy of it: see test_mutations) and the test job modules (ROOT), not whatever
# shardcron the interpreter has installed.
SRC = Path(shardcron.__file__).resolve().parent.parent
CHILD_PYTHONPATH = os.pathsep.join([str(SRC), str(ROOT)])


@dataclass
class Worker:
    instance: str
    process: subprocess.Popen[bytes]
    log: Path
    proxy: TcpProxy | None = None  # its own link to ZooKeeper, for network faults
    exited: float | None = field(default=None, init=False)  # when the process ended

    def __post_init__(self) -> None:
        # A thread blocked in wait() notes the exit within milliseconds: an unfinished run
        # of a process that ended stopped no later than that.
        def watch() -> None:
            self.process.wait()
            self.exited = time.time()

        threading.Thread(target=watch, name=f"exit-{self.instance}", daemon=True).start()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        self.process.send_signal(sig)

    def alive(self) -> bool:
        return self.process.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace")


class Workers:
    """Starts ``shardcron run`` processes on one namespace; every item run lands in one ledger."""

    def __init__(
        self,
        tmp: Path,
        connect: str,
        namespace: str,
        jobs: dict[str, dict[str, object]],
        session_ms: int,
        hold: float = 0.0,
        proxied: bool = False,
    ) -> None:
        """With ``proxied``, every worker reaches ``connect`` (one host:port) through its own
        :class:`TcpProxy`, so a network fault can hit one worker alone."""
        self.tmp = tmp
        self.connect = connect
        self.namespace = namespace
        self.session_ms = session_ms
        self.proxied = proxied
        self.url = self.url_for(connect)
        self.ledger = tmp / "ledger.jsonl"
        self.config = tmp / "jobs.yaml"
        self.config.write_text(yaml.safe_dump({"jobs": jobs}))
        self.hold = hold
        self.workers: dict[str, Worker] = {}

    def url_for(self, connect: str) -> str:
        return (
            f"zk://{connect}/{self.namespace}?sessionTimeoutMilliseconds={self.session_ms}"
            "&baseSleepTimeMilliseconds=100&maxSleepTimeMilliseconds=500"
        )

    def start(
        self, instance: str, extra_env: dict[str, str] | None = None, args: Sequence[str] = ()
    ) -> Worker:
        """Start ``shardcron run`` as ``instance``; ``args`` are extra options (``--grace``)."""
        proxy = None
        if self.proxied:
            proxy = TcpProxy(int(self.connect.rpartition(":")[2]))
            proxy.start()
        log = self.tmp / f"{instance.replace('@-@', '_')}.{len(self.workers)}.log"
        env = {
            **os.environ,
            "PYTHONPATH": CHILD_PYTHONPATH,
            "SHARDCRON_LEDGER": str(self.ledger),
            "SHARDCRON_INSTANCE": instance,
            "SHARDCRON_HOLD": str(self.hold),
            **(extra_env or {}),
        }
        cmd = [
            sys.executable,
            "-m",
            "shardcron",
            "run",
            str(self.config),
            "--registry",
            self.url if proxy is None else self.url_for(proxy.connect_string),
            "--instance-id",
            instance,
            *args,
        ]
        with log.open("wb") as out:
            process = subprocess.Popen(
                cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True
            )
        worker = Worker(instance, process, log, proxy)
        self.workers[instance] = worker
        return worker

    def records(self) -> list[dict[str, Any]]:
        if not self.ledger.exists():
            return []
        return [json.loads(line) for line in self.ledger.read_text().splitlines() if line.strip()]

    def runs(self, unfinished: bool = False) -> list[Run]:
        """Item runs from the ledger; with ``unfinished``, runs that never ended count too
        (ending at infinity: an interrupted run overlaps everything after its start)."""
        records = self.records()
        ends = {r["run"]: r for r in records if r["phase"] == "end"}
        runs = []
        for r in records:
            if r["phase"] != "start":
                continue
            end = ends.get(r["run"])
            if end is None and not unfinished:
                continue
            finish = float("inf") if end is None else end["end"]
            runs.append(Run(r["instance"], r["item"], r["start"], finish, r["token"], r["source"]))
        return runs

    def interrupted(self) -> list[Run]:
        return [r for r in self.runs(unfinished=True) if r.end == float("inf")]

    def stop_all(self) -> None:
        for worker in self.workers.values():
            if worker.alive():
                worker.kill(signal.SIGTERM)
        for worker in self.workers.values():
            try:
                worker.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                worker.kill(signal.SIGKILL)
                worker.process.wait()
        for worker in self.workers.values():
            if worker.proxy is not None:
                worker.proxy.close()


@contextmanager
def workers(
    tmp: Path,
    connect: str,
    namespace: str,
    jobs: dict[str, dict[str, object]],
    session_ms: int = 2000,
    hold: float = 0.0,
    proxied: bool = False,
) -> Iterator[Workers]:
    made = Workers(tmp, connect, namespace, jobs, session_ms, hold, proxied)
    try:
        yield made
    finally:
        made.stop_all()


def registered(admin: Registry, job: str, instance: str) -> bool:
    return admin.stat(f"/{job}/instances/{instance}") is not None
