"""The network-fault harness: a TCP proxy per client in front of a real ZooKeeper."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState
from kazoo.retry import KazooRetry

from shardcron.errors import ShardcronError
from shardcron.testing.ensemble import ZooKeeperEnsemble
from shardcron.testing.proxy import TcpProxy
from shardcron.testing.zookeeper import ZooKeeperServer, unique_namespace
from tests.test_testing import StateLog, poll

Connect = Callable[..., KazooClient]


@pytest.fixture
def proxy(zookeeper: ZooKeeperServer) -> Iterator[TcpProxy]:
    with TcpProxy(zookeeper.port) as made:
        yield made


@pytest.fixture
def connect(zookeeper: ZooKeeperServer) -> Iterator[Connect]:
    """Started clients on one fresh namespace, through ``via`` (a proxy) or directly."""
    namespace = unique_namespace()
    clients: list[KazooClient] = []
    root = KazooClient(hosts=zookeeper.connect_string)
    root.start(timeout=10)
    root.ensure_path(f"/{namespace}")
    root.stop()
    root.close()

    def make(via: TcpProxy | None = None, timeout: float = 3.0) -> KazooClient:
        hosts = via.connect_string if via is not None else zookeeper.connect_string
        client = KazooClient(
            hosts=f"{hosts}/{namespace}",
            timeout=timeout,
            connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=0.2),
        )
        clients.append(client)
        client.start(timeout=10)
        return client

    yield make
    for client in clients:
        client.stop()
        client.close()


def test_proxy_forwards_both_ways(proxy: TcpProxy, connect: Connect) -> None:
    proxied, direct = connect(proxy), connect()
    proxied.create("/node", b"x" * 100_000)  # more than one read's worth
    assert direct.get("/node")[0] == b"x" * 100_000
    direct.set("/node", b"y")
    assert proxied.get("/node")[0] == b"y"
    assert proxy.accepted == 1


def test_reset_drops_the_connection_and_keeps_the_session(
    proxy: TcpProxy, connect: Connect
) -> None:
    owner, observer = connect(proxy), connect()
    owner.create("/eph", ephemeral=True)
    session = owner.client_id[0]
    log = StateLog(owner)

    assert proxy.reset() == 1

    log.wait(KazooState.SUSPENDED)
    log.wait(KazooState.CONNECTED)
    assert KazooState.LOST not in log.states
    assert owner.client_id[0] == session
    assert observer.exists("/eph") is not None


def test_short_blackhole_delays_requests_and_delivers_them(
    proxy: TcpProxy, connect: Connect
) -> None:
    owner = connect(proxy)
    session = owner.client_id[0]
    proxy.blackhole(0.5)
    started = time.monotonic()
    owner.create("/late")  # held, then delivered once the blackhole ends
    assert time.monotonic() - started >= 0.4
    assert owner.client_id[0] == session


def test_blackhole_past_the_session_timeout_expires_the_session(
    proxy: TcpProxy, connect: Connect
) -> None:
    owner, observer = connect(proxy, timeout=1.0), connect()
    owner.create("/eph", ephemeral=True)
    session = owner.client_id[0]
    log = StateLog(owner)

    proxy.blackhole(3.0)

    assert poll(lambda: observer.exists("/eph") is None, timeout=10)
    assert proxy.blackholed  # the server expired it while the link was still cut
    log.wait(KazooState.LOST)
    log.wait(KazooState.CONNECTED)
    assert owner.client_id[0] != session


def test_proxy_resets_clients_while_its_server_is_down() -> None:
    with TcpProxy(_closed_port()) as proxy:
        client = KazooClient(hosts=proxy.connect_string, timeout=1.0)
        with pytest.raises(KazooTimeoutError):
            client.start(timeout=1.0)
        client.stop()
        client.close()
        assert proxy.accepted >= 1


def test_ensemble_size_must_be_odd_and_at_least_three() -> None:
    with pytest.raises(ShardcronError, match="size=2: use an odd size of 3 or more"):
        ZooKeeperEnsemble(2)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_mode_names_a_standalone_server_and_a_stopped_one() -> None:
    server = ZooKeeperServer()
    server.start()
    try:
        assert server.mode() == "standalone"
        server.stop()
        assert server.mode() == "down"
    finally:
        server.close()
