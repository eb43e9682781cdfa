from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState, WatchedEvent

from shardcron.errors import ShardcronError
from shardcron.testing import zookeeper as testing
from shardcron.testing.zookeeper import (
    ZooKeeperServer,
    drop_connection,
    expire_session,
    unique_namespace,
    zookeeper_server,
)

pytestmark = pytest.mark.zookeeper

Connect = Callable[..., KazooClient]


@pytest.fixture(scope="module")
def zk() -> Iterator[ZooKeeperServer]:
    with zookeeper_server() as server:
        yield server


@pytest.fixture
def connect(zk: ZooKeeperServer) -> Iterator[Connect]:
    """Started clients chrooted to one fresh namespace, stopped after the test."""
    namespace = unique_namespace()
    clients: list[KazooClient] = []
    root = KazooClient(hosts=zk.connect_string)
    root.start(timeout=10)
    root.ensure_path(f"/{namespace}")
    root.stop()
    root.close()
    hosts = f"{zk.connect_string}/{namespace}"

    def make(timeout: float = 3.0) -> KazooClient:
        client = KazooClient(hosts=hosts, timeout=timeout)
        clients.append(client)
        client.start(timeout=10)
        return client

    yield make
    for client in clients:
        client.stop()
        client.close()


class StateLog:
    """Records a client's state changes; wait() blocks until a wanted state shows up."""

    def __init__(self, client: KazooClient) -> None:
        self.states: list[KazooState] = []
        self._changed = threading.Condition()
        client.add_listener(self._on_state)

    def _on_state(self, state: KazooState) -> None:
        with self._changed:
            self.states.append(state)
            self._changed.notify_all()

    def wait(self, state: KazooState, timeout: float = 10.0) -> None:
        with self._changed:
            assert self._changed.wait_for(lambda: state in self.states, timeout), self.states


def poll(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)  # polling interval of a deadline loop, not a synchronisation point
    return True


def test_expire_session_deletes_ephemerals_and_client_sees_lost(connect: Connect) -> None:
    owner, observer = connect(), connect()
    owner.create("/eph", b"x", ephemeral=True)
    old_session = owner.client_id[0]
    deleted = threading.Event()

    def on_change(event: WatchedEvent) -> None:
        if event.type == "DELETED":
            deleted.set()

    assert observer.exists("/eph", watch=on_change) is not None
    log = StateLog(owner)

    expire_session(owner)

    log.wait(KazooState.LOST)  # listeners run in turn: ours may not have been called yet
    assert deleted.wait(10)
    assert observer.exists("/eph") is None
    # kazoo reconnects by itself, with a new session.
    log.wait(KazooState.CONNECTED)
    assert poll(lambda: owner.client_id is not None and owner.client_id[0] != old_session)


def test_drop_connection_keeps_session_and_ephemerals(connect: Connect) -> None:
    owner, observer = connect(), connect()
    owner.create("/eph", b"x", ephemeral=True)
    session = owner.client_id[0]
    log = StateLog(owner)

    drop_connection(owner)

    log.wait(KazooState.CONNECTED)
    assert log.states[:2] == [KazooState.SUSPENDED, KazooState.CONNECTED]
    assert KazooState.LOST not in log.states
    assert owner.client_id[0] == session
    assert observer.exists("/eph") is not None
    assert owner.get("/eph")[0] == b"x"


def test_helpers_refuse_a_client_that_is_not_connected(zk: ZooKeeperServer) -> None:
    client = KazooClient(hosts=zk.connect_string)
    with pytest.raises(ShardcronError, match="connected client"):
        expire_session(client)
    with pytest.raises(ShardcronError, match="connected client"):
        drop_connection(client)


def test_four_letter_words_and_mntr(zk: ZooKeeperServer, connect: Connect) -> None:
    assert zk.four_letter("ruok") == "imok"
    assert zk.four_letter("stat").startswith("Zookeeper version")
    before = zk.mntr()
    assert before["zk_version"].startswith("3.")
    assert before["zk_server_state"] == "standalone"

    client = connect()
    for i in range(5):
        client.create(f"/n{i}")
    after = zk.mntr()

    assert int(after["zk_packets_received"]) >= int(before["zk_packets_received"]) + 5
    assert int(after["zk_num_alive_connections"]) >= 1
    assert f"{zk.port}" in zk.four_letter("conf")


def test_server_config_allows_short_sessions(zk: ZooKeeperServer) -> None:
    client = KazooClient(hosts=zk.connect_string, timeout=1.0)
    client.start(timeout=10)
    try:
        # The server grants the 1 s we asked for, instead of clamping it to 2 * tickTime = 4 s.
        sid = f"sid=0x{client.client_id[0]:x}"
        [line] = [line for line in zk.four_letter("cons").splitlines() if sid in line]
        assert "to=1000," in line
    finally:
        client.stop()
        client.close()
    assert "minSessionTimeout=400" in zk.four_letter("conf")


def test_server_listens_on_127_0_0_1_only(zk: ZooKeeperServer) -> None:
    # All of 127/8 reaches loopback on Linux, so a wildcard bind would accept this.
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.2", zk.port), timeout=5).close()


def test_restart_keeps_data_port_and_sessions() -> None:
    with ZooKeeperServer() as server:
        connect_string = server.connect_string
        # A long session and a short reconnect back-off, so a slow machine cannot expire it.
        client = KazooClient(
            hosts=connect_string,
            timeout=30.0,
            connection_retry={"max_tries": -1, "max_delay": 0.5},
        )
        client.start(timeout=10)
        try:
            client.create("/persistent", b"kept", makepath=True)
            client.create("/ephemeral", ephemeral=True)
            session = client.client_id[0]

            server.restart(kill=True)

            assert server.connect_string == connect_string
            assert poll(lambda: client.connected, timeout=45)
            assert client.client_id[0] == session
            assert client.get("/persistent")[0] == b"kept"
            assert client.exists("/ephemeral") is not None
        finally:
            client.stop()
            client.close()
        server.stop()
        assert not server.running
        server.start()
        reader = KazooClient(hosts=connect_string)
        reader.start(timeout=10)
        try:
            assert reader.get("/persistent")[0] == b"kept"
            assert reader.exists("/ephemeral") is None  # its owner closed its session
        finally:
            reader.stop()
            reader.close()
    assert not server.running


def test_close_removes_the_work_dir() -> None:
    server = ZooKeeperServer()
    server.start()
    workdir = server.workdir
    assert (workdir / "zoo.cfg").is_file()
    assert "INFO" in server.log_path.read_text()
    server.close()
    assert not server.running
    assert not workdir.exists()


def test_failed_start_reports_the_server_log() -> None:
    # A fixed port that someone else already listens on: ZooKeeper cannot bind and exits.
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        server = ZooKeeperServer(port=blocker.getsockname()[1])
        try:
            with pytest.raises(ShardcronError, match="Address already in use"):
                server.start(timeout=30)
            assert not server.running
        finally:
            server.close()


def test_missing_zookeeper_gives_install_hint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("ZOOKEEPER_PATH", raising=False)
    monkeypatch.setattr(testing, "_DEFAULT_JAR_DIRS", (tmp_path,))
    with pytest.raises(ShardcronError, match="ZooKeeper not found: apt-get install -y zookeeper"):
        testing.find_zookeeper()


def test_find_zookeeper_honours_zookeeper_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "zookeeper-3.8.4.jar").touch()
    monkeypatch.setenv("ZOOKEEPER_PATH", str(tmp_path))
    assert testing.find_zookeeper() == tmp_path / "lib"


def test_unique_namespace_is_fresh_and_slash_free() -> None:
    names = {unique_namespace("job") for _ in range(100)}
    assert len(names) == 100
    assert all(name.startswith("job-") and "/" not in name for name in names)
