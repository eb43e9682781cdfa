"""Fixtures: one real ZooKeeper server for the whole run, and both registry backends.

The server is started by the suite itself; if it cannot start, every ZooKeeper test
errors (never skips), so CI fails loudly.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import kazoo.protocol.connection
import kazoo.retry
import pytest

from shardcron.config import secrecy
from shardcron.config.registry import RegistryConfig
from shardcron.registry import Registry
from shardcron.registry.memory import MemoryRegistry
from shardcron.registry.memoryserver import MemoryServer
from shardcron.registry.zookeeper import ZooKeeperRegistry
from shardcron.testing.zookeeper import (
    ZooKeeperServer,
    drop_connection,
    expire_session,
    unique_namespace,
)


@pytest.fixture(scope="session", autouse=True)
def kazoo_draws_from_its_own_random() -> None:
    """Every live kazoo connection draws a jitter from the ``random`` module each time
    round its loop; Hypothesis takes a change of that module's state during a property
    test for a strategy using it, and warns. Clients of the ZooKeeper tests run beside
    the property tests, so kazoo gets a generator of its own."""
    kazoo.protocol.connection.random = random.Random()
    kazoo.retry.random = random.Random()


@pytest.fixture(scope="session")
def zookeeper() -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def zk_config(server: ZooKeeperServer, namespace: str, session_ms: int = 4000) -> RegistryConfig:
    return RegistryConfig(
        servers=server.connect_string,
        namespace=namespace,
        session_timeout_ms=session_ms,
        connection_timeout_ms=10000,
        base_sleep_ms=100,
        max_sleep_ms=1000,
        max_retries=3,
    )


@dataclass
class Backend:
    """Makes sessions on one namespace of one backend, and injects faults into them."""

    name: str
    new: Callable[[], Registry]
    expire: Callable[[Registry], None]
    drop: Callable[[Registry], None]
    opened: list[Registry] = field(default_factory=list)

    def session(self) -> Registry:
        registry = self.new()
        registry.start()
        self.opened.append(registry)
        return registry


def memory_backend() -> Backend:
    server = MemoryServer()

    def drop(_registry: Registry) -> None:
        server.set_up(False)
        server.set_up(True)

    return Backend(
        "memory",
        new=lambda: MemoryRegistry(server, "contract"),
        expire=lambda r: server.expire(r.session_id),
        drop=drop,
    )


def zookeeper_backend(server: ZooKeeperServer) -> Backend:
    namespace = unique_namespace()

    def client_of(registry: Registry) -> object:
        assert isinstance(registry, ZooKeeperRegistry)
        return registry.client

    return Backend(
        "zookeeper",
        new=lambda: ZooKeeperRegistry(zk_config(server, namespace)),
        expire=lambda r: expire_session(client_of(r)),
        drop=lambda r: drop_connection(client_of(r)),
    )


@pytest.fixture(params=["memory", "zookeeper"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "memory":
        made = memory_backend()
    else:
        made = zookeeper_backend(request.getfixturevalue("zookeeper"))
    try:
        yield made
    finally:
        for registry in made.opened:
            registry.close()


# Figures that fault suites state for the CI log (overlaps, lost item-fires, recoveries):
# printed in pytest's closing summary even when every test passed.
FIGURES: list[str] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FIGURES:
        terminalreporter.section("fault suite figures")
        for line in FIGURES:
            terminalreporter.write_line(line)


@pytest.fixture(autouse=True)
def _isolated_worker_secrets() -> Iterator[None]:
    """A config file's ``worker.secrets`` are process-wide on purpose (one worker per
    process); the suite loads many files in one process, so each test starts afresh."""
    saved = dict(secrecy._local)
    yield
    secrecy._local.clear()
    secrecy._local.update(saved)
