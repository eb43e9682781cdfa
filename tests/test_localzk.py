"""``shardcron zookeeper`` as a subprocess: a local server, its connect string, Ctrl-C, the
data dir, and the install hint when ZooKeeper is missing."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from kazoo.client import KazooClient

from shardcron.testing.zookeeper import ZooKeeperServer
from tests.workers import CHILD_PYTHONPATH, ROOT


class Command:
    """``shardcron zookeeper ...`` with its stdout lines readable against a deadline."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, cwd: Path = ROOT) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "shardcron", "zookeeper", *args],
            env={**os.environ, "PYTHONPATH": CHILD_PYTHONPATH, **(env or {})},
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def line_starting(self, prefix: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while True:
            line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            assert line is not None, f"exited first: {self.stderr()}"
            if line.startswith(prefix):
                return line

    def stderr(self) -> str:
        assert self.process.stderr is not None
        self.process.wait(timeout=30)
        return self.process.stderr.read()

    def interrupt(self) -> int:
        self.process.send_signal(signal.SIGINT)
        return self.process.wait(timeout=30)


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_serves_on_loopback_prints_the_connect_string_and_stops_on_ctrl_c(
    tmp_path: Path,
) -> None:
    data = tmp_path / "zk"
    command = Command("--port", "0", "--data-dir", "zk", "--namespace", "shop", cwd=tmp_path)
    try:
        url = command.line_starting("connect string: ").removeprefix("connect string: ")
        assert command.line_starting("  export ") == f"  export SHARDCRON_REGISTRY={url}"
        host_port = url.removeprefix("zk://").removesuffix("/shop")
        assert host_port.startswith("127.0.0.1:")
        client = KazooClient(host_port, timeout=10)
        client.start(timeout=30)
        client.create("/shop/kept", b"yes", makepath=True)
        client.stop()
        client.close()
    finally:
        code = command.interrupt()
    assert code == 0, command.stderr()
    port = int(host_port.rpartition(":")[2])
    assert not port_open(port)
    assert (data / "zoo.cfg").is_file() and (data / "data" / "version-2").is_dir()
    # The same data dir brings the data back.
    again = Command("--port", "0", "--data-dir", str(data))  # relative or absolute alike
    try:
        url = again.line_starting("connect string: ").removeprefix("connect string: ")
        client = KazooClient(url.removeprefix("zk://").rpartition("/")[0], timeout=10)
        client.start(timeout=30)
        assert client.get("/shop/kept")[0] == b"yes"
        client.stop()
        client.close()
    finally:
        assert again.interrupt() == 0


def test_missing_zookeeper_says_how_to_install_it(tmp_path: Path) -> None:
    command = Command("--port", "0", env={"ZOOKEEPER_HOME": str(tmp_path)})
    assert command.process.wait(timeout=60) == 1
    [line] = command.stderr().splitlines()
    assert line.startswith("error: ZooKeeper not found: apt-get install -y zookeeper (Debian, ")
    assert "Apache ZooKeeper binary tarball" in line
    assert "set ZOOKEEPER_HOME to its directory" in line
    assert str(tmp_path) in line


def test_a_taken_port_is_one_line_naming_the_option(zookeeper: ZooKeeperServer) -> None:
    command = Command("--port", str(zookeeper.port))
    assert command.process.wait(timeout=60) == 1
    assert command.stderr().splitlines() == [
        (
            f"error: port {zookeeper.port} on 127.0.0.1 is in use (another ZooKeeper?); "
            "pick another with --port N, or --port 0 for any free port"
        )
    ]
