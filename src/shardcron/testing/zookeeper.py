"""A real ZooKeeper for tests: start a throwaway server, expire sessions, drop connections.
For testing your own job functions, ``sharding_context`` and ``run_item`` (from
:mod:`shardcron.testing.jobs`) are here too.

Usage::

    with zookeeper_server() as zk:
        client = KazooClient(zk.connect_string, timeout=3)
        client.start()
        client.create("/" + unique_namespace() + "/owner", ephemeral=True, makepath=True)
        expire_session(client)  # the node is gone now

It runs the Debian ``zookeeper`` package's jars directly with ``java``, on a free loopback port,
with its config, data and log in a private temp dir. Fault injection uses the real protocol:
an expired session is really closed on the server, so its ephemeral nodes really vanish.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Self

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.connection import _CONNECTION_DROP
from kazoo.protocol.states import KazooState

from shardcron.errors import ShardcronError

__all__ = [
    "ZooKeeperServer",
    "drop_connection",
    "expire_session",
    "find_zookeeper",
    "unique_namespace",
    "zookeeper_server",
]

INSTALL_HINT = (
    "ZooKeeper not found: apt-get install -y zookeeper (Debian, Ubuntu), or unpack the Apache "
    "ZooKeeper binary tarball (https://zookeeper.apache.org/releases.html) and set "
    "ZOOKEEPER_HOME to its directory; it needs Java 11+"
)
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
HOST = "127.0.0.1"

_DEFAULT_JAR_DIRS = (Path("/usr/share/java"),)
_LOG_NAME = "zookeeper.log"
_RUNNING: set[ZooKeeperServer] = set()


def find_zookeeper() -> Path:
    """The directory holding the ZooKeeper server jars.

    Looks only at ``$ZOOKEEPER_HOME`` or ``$ZOOKEEPER_PATH`` when one is set (a tarball home
    with ``lib/``, or a jar directory): a wrong setting is an error, not a silent fallback.
    Otherwise looks at the Debian package's ``/usr/share/java``.
    """
    candidates: list[Path] = []
    for name in ("ZOOKEEPER_HOME", "ZOOKEEPER_PATH"):
        if env := os.environ.get(name):
            candidates += [Path(env), Path(env) / "lib"]
    candidates = candidates or list(_DEFAULT_JAR_DIRS)
    for directory in candidates:
        if _classpath(directory):
            return directory
    looked = ", ".join(str(c) for c in candidates)
    raise ShardcronError(f"{INSTALL_HINT} (looked for zookeeper jars in {looked})")


def _classpath(jar_dir: Path) -> list[Path]:
    debian_jar = jar_dir / "zookeeper.jar"
    if debian_jar.is_file():
        # Debian's jar names most dependencies in its manifest, but not the slf4j binding
        # (without it the server logs nothing) nor the netty parts the Netty factory needs.
        extras = ("slf4j-simple.jar", "netty-codec.jar", "netty-resolver.jar")
        return [debian_jar, *(jar_dir / name for name in extras if (jar_dir / name).is_file())]
    if any(jar_dir.glob("zookeeper-[0-9]*.jar")):
        return sorted(jar_dir.glob("*.jar"))  # an upstream tarball's lib/: every dependency
    return []


def _find_java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise ShardcronError("Java not found: apt-get install -y default-jre-headless")
    return java


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


class Started:
    """``with`` starts it and closes it: the harness's servers and proxies."""

    def start(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class ZooKeeperServer(Started):
    """One standalone ZooKeeper process on loopback. Not thread-safe; drive it from one thread.

    ``stop()`` keeps the port and data dir, so ``start()`` again (or ``restart()``) brings back
    the same server with its data and sessions: clients that reconnect within their session
    timeout keep their session. ``close()`` also deletes the temp dir.
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        tick_time_ms: int = 200,
        min_session_timeout_ms: int = 400,
        max_session_timeout_ms: int = 60_000,
        log_level: str = "info",  # slf4j-simple: trace, debug, info, warn, error, off
        heap_mb: int = 256,
        java_options: Sequence[str] = (),
        extra_config: Mapping[str, str | int] | None = None,
        workdir: Path | None = None,
        myid: int | None = None,
    ) -> None:
        """``extra_config`` adds or overrides zoo.cfg keys (e.g. ``{"forceSync": "yes"}``);
        ``myid`` makes it a member of an ensemble (see ``shardcron.testing.ensemble``).

        ``workdir`` keeps config, data and log in that directory, which ``close()`` leaves in
        place; by default they go to a temp dir that ``close()`` deletes."""
        self._myid = myid
        self._fixed_port = port is not None
        self._port = port
        self._tick_time_ms = tick_time_ms
        self._min_session_timeout_ms = min_session_timeout_ms
        self._max_session_timeout_ms = max_session_timeout_ms
        self._log_level = log_level
        self._heap_mb = heap_mb
        self._java_options = tuple(java_options)
        self._extra_config = dict(extra_config or {})
        self._own_workdir = workdir is None
        # Absolute: the server runs in this directory, and zoo.cfg names paths inside it.
        self._workdir: Path | None = None if workdir is None else Path(workdir).resolve()
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<ZooKeeperServer {HOST}:{self._port} {state} in {self._workdir}>"

    @property
    def port(self) -> int:
        if self._port is None:
            raise ShardcronError("ZooKeeperServer has no port until start()")
        return self._port

    @property
    def connect_string(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def workdir(self) -> Path:
        if self._workdir is None:
            raise ShardcronError("ZooKeeperServer has no work dir until start()")
        return self._workdir

    @property
    def log_path(self) -> Path:
        return self.workdir / _LOG_NAME

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except (OSError, ShardcronError):
            return "(no server log)"
        return "\n".join(text.splitlines()[-lines:])

    def start(self, timeout: float = 30.0, *, wait: bool = True) -> None:
        """Start the server and wait until it serves requests. A no-op if it is running.

        ``wait=False`` returns once the process is spawned (an ensemble member serves only
        once a quorum is up); ``wait_ready()`` waits later.
        """
        if self.running:
            return
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="shardcron-zk-"))
        self._workdir.mkdir(parents=True, exist_ok=True)
        # A port we picked ourselves can be taken by someone else before Java binds it.
        attempts = 1 if self._fixed_port or self._port is not None else 3
        for attempt in range(attempts):
            if self._port is None or attempt > 0:
                self._port = _free_port()
            try:
                self._launch(timeout, wait)
                return
            except ShardcronError as exc:
                if attempt + 1 == attempts or "Address already in use" not in str(exc):
                    raise

    def _launch(self, timeout: float, wait: bool) -> None:
        config = self._write_config()
        cmd = [
            _find_java(),
            f"-Xmx{self._heap_mb}m",
            "-XX:+UseSerialGC",
            f"-Dzookeeper.log.dir={self.workdir}",
            f"-Dorg.slf4j.simpleLogger.defaultLogLevel={self._log_level}",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
            # The NIO factory can leave a client's socket open and unanswered when it connects
            # while the server is loading its data (ZOOKEEPER-5051): after restart() such a
            # client hangs for its whole session timeout. The Netty factory closes it at once.
            "-Dzookeeper.serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
            *self._java_options,
            "-cp",
            os.pathsep.join(str(p) for p in _classpath(find_zookeeper())),
            MAIN_CLASS,
            str(config),
        ]
        self._log_file = self.log_path.open("ab")
        # Own process group, so stop() can kill anything the JVM spawned along with it.
        self._proc = subprocess.Popen(
            cmd,
            cwd=self.workdir,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        _RUNNING.add(self)
        if wait:
            self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait until the started server serves requests; stop it and raise if it does not."""
        if self._proc is None:
            raise ShardcronError("ZooKeeperServer.wait_ready() needs start() first")
        try:
            self._wait_ready(self._proc, time.monotonic() + timeout)
        except BaseException:
            self.stop(kill=True)
            raise

    def _write_config(self) -> Path:
        settings = {
            "tickTime": self._tick_time_ms,
            "dataDir": self.workdir / "data",
            "clientPort": self.port,
            "clientPortAddress": HOST,
            "maxClientCnxns": 0,
            "minSessionTimeout": self._min_session_timeout_ms,
            "maxSessionTimeout": self._max_session_timeout_ms,
            "admin.enableServer": "false",
            "4lw.commands.whitelist": "*",
            # Tests never need durability across a power cut; fsync per write only slows them.
            "forceSync": "no",
            **self._extra_config,
        }
        if self._myid is not None:
            (self.workdir / "data").mkdir(exist_ok=True)
            (self.workdir / "data" / "myid").write_text(f"{self._myid}\n")
        path = self.workdir / "zoo.cfg"
        path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        return path

    def _wait_ready(self, proc: subprocess.Popen[bytes], deadline: float) -> None:
        while True:
            code = proc.poll()
            if code is not None:
                raise ShardcronError(
                    f"ZooKeeper exited with code {code} while starting; log tail:\n"
                    f"{self.log_tail()}"
                )
            if self._serving():
                return
            if time.monotonic() > deadline:
                raise ShardcronError(
                    f"ZooKeeper did not answer on {self.connect_string} in time; log tail:\n"
                    f"{self.log_tail()}"
                )
            # Waiting on the process doubles as the poll interval and notices an early exit.
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.1)

    def _serving(self) -> bool:
        try:
            # ruok answers before the database is loaded; srvr only once requests are served.
            return self.four_letter("ruok", timeout=1) == "imok" and self.four_letter(
                "srvr", timeout=1
            ).startswith("Zookeeper version")
        except OSError:
            return False

    def stop(self, *, kill: bool = False, timeout: float = 10.0) -> None:
        """Stop the process (SIGTERM, or SIGKILL with ``kill=True`` to simulate a crash).

        Keeps the port and data dir for a later ``start()``.
        """
        proc, self._proc = self._proc, None
        _RUNNING.discard(self)
        # Only signal an unreaped child: once reaped, its pid (the group id) may be reused.
        if proc is not None and proc.poll() is None:
            self._signal(proc, signal.SIGKILL if kill else signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._signal(proc, signal.SIGKILL)
                proc.wait()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    @staticmethod
    def _signal(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        # The group id is the child's pid (start_new_session); it may have exited meanwhile.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the process to exit (None: until it does); its exit code, or None."""
        proc = self._proc
        if proc is None:
            return None
        with contextlib.suppress(subprocess.TimeoutExpired):
            return proc.wait(timeout)
        return None

    def restart(self, *, kill: bool = False, timeout: float = 30.0) -> None:
        """Stop and start again on the same port with the same data."""
        self.stop(kill=kill)
        self.start(timeout=timeout)

    def close(self) -> None:
        """Stop and delete the temp dir. The object can be started again afresh."""
        self.stop()
        if self._workdir is not None and self._own_workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
        if not self._fixed_port:
            self._port = None

    def four_letter(self, command: str, timeout: float = 5.0) -> str:
        """Send a four-letter-word command (``ruok``, ``mntr``, ``stat``, ``cons``...)."""
        chunks: list[bytes] = []
        with socket.create_connection((HOST, self.port), timeout=timeout) as sock:
            sock.sendall(command.encode("ascii"))
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", errors="replace")

    def mode(self) -> str:
        """``leader``, ``follower`` or ``standalone`` (``srvr``); ``down`` if not serving."""
        try:
            answer = self.four_letter("srvr", timeout=2)
        except OSError:
            return "down"
        for line in answer.splitlines():
            key, _, value = line.partition(":")
            if key == "Mode":
                return value.strip()
        return "down"

    def mntr(self) -> dict[str, str]:
        """The ``mntr`` metrics as a dict, e.g. ``zk_version``, ``zk_packets_received``."""
        metrics: dict[str, str] = {}
        for line in self.four_letter("mntr").splitlines():
            key, sep, value = line.partition("\t")
            if sep:
                metrics[key] = value
        return metrics


@atexit.register
def _stop_all() -> None:
    for server in list(_RUNNING):
        server.stop(kill=True)


@contextlib.contextmanager
def zookeeper_server(**options: Any) -> Iterator[ZooKeeperServer]:
    """A started server, closed on exit. ``options`` go to ``ZooKeeperServer``.

    For a session-scoped pytest fixture: ``with zookeeper_server() as zk: yield zk``.
    A server that cannot start raises ``ShardcronError``: tests fail, never skip.
    """
    with ZooKeeperServer(**options) as server:
        yield server


def unique_namespace(prefix: str = "t") -> str:
    """A fresh namespace name (no slashes), so tests sharing one server never collide."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def _hosts(client: KazooClient) -> str:
    parts = []
    for host, port in client.hosts:
        parts.append(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    return ",".join(parts)


def expire_session(client: KazooClient, timeout: float = 10.0) -> None:
    """Make the server expire ``client``'s session; return once ``client`` has seen LOST.

    A second client attaches to the same session (id and password) and closes it, which is a
    real server-side session close: ephemeral nodes go and watchers fire. The client then
    reconnects on its own with a new session.
    """
    client_id = client.client_id
    if client_id is None:
        raise ShardcronError("expire_session needs a connected client")
    lost = threading.Event()

    def on_state(state: KazooState) -> bool:
        if state == KazooState.LOST:
            lost.set()
            return True
        return False

    client.add_listener(on_state)
    deadline = time.monotonic() + timeout
    try:
        # The client may win its session back before the intruder's close lands; then go again.
        while not lost.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ShardcronError(f"session 0x{client_id[0]:x} was not seen to expire in time")
            _close_session(_hosts(client), client_id, remaining)
            lost.wait(min(remaining, 2.0))
    finally:
        client.remove_listener(on_state)


def _close_session(hosts: str, client_id: tuple[int, bytes], timeout: float) -> None:
    intruder = KazooClient(hosts=hosts, client_id=client_id, timeout=max(timeout, 1.0))
    try:
        intruder.start(timeout=timeout)
    except (KazooException, KazooTimeoutError):
        pass  # the caller checks whether the session is gone and retries until its deadline
    finally:
        intruder.stop()
        intruder.close()


def drop_connection(client: KazooClient, timeout: float = 10.0) -> None:
    """Drop ``client``'s TCP connection, keeping its session; return once it has reconnected.

    The client goes SUSPENDED, then CONNECTED again with the same session id.
    """
    if not client.connected:
        raise ShardcronError("drop_connection needs a connected client")
    suspended, reconnected, lost = threading.Event(), threading.Event(), threading.Event()

    def on_state(state: KazooState) -> bool:
        if state == KazooState.SUSPENDED:
            suspended.set()
        elif state == KazooState.LOST:
            lost.set()
        elif state == KazooState.CONNECTED and suspended.is_set():
            reconnected.set()
            return True
        return False

    client.add_listener(on_state)
    try:
        # The same hook kazoo's own test harness uses: the connection loop raises
        # ConnectionDropped, closes the socket and reconnects with the same session.
        client._call(_CONNECTION_DROP, None)
        if not suspended.wait(timeout):
            raise ShardcronError("client did not notice the dropped connection in time")
        if not reconnected.wait(timeout):
            raise ShardcronError("client did not reconnect in time")
        if lost.is_set():
            raise ShardcronError("the session expired while the connection was down")
    finally:
        client.remove_listener(on_state)
