"""A real ZooKeeper ensemble on loopback for tests: kill and restart any member, the leader too.

Usage::

    with ZooKeeperEnsemble(3) as ensemble:
        client = KazooClient(ensemble.connect_string, timeout=3)
        client.start()
        leader = ensemble.leader()
        leader.stop(kill=True)  # the survivors elect a new leader; sessions move to them
        ensemble.wait_quorum()
        leader.start()  # rejoins with its data

Each member is a :class:`~shardcron.testing.ZooKeeperServer` with its own data dir, ``myid``
and client port; quorum and election ports are on 127.0.0.1 too. Who leads is read from the
``srvr`` four-letter command.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

from shardcron.errors import ShardcronError
from shardcron.testing.zookeeper import HOST, Started, ZooKeeperServer, _free_port


class ZooKeeperEnsemble(Started):
    """``size`` ZooKeeper servers forming one quorum. Drive it from one thread."""

    def __init__(self, size: int = 3, *, tick_time_ms: int = 200, log_level: str = "warn") -> None:
        if size < 3 or size % 2 == 0:
            raise ShardcronError(f"ZooKeeperEnsemble size={size}: use an odd size of 3 or more")
        # Every port is fixed up front: each member's config names all the others.
        peers = {myid: (_free_port(), _free_port()) for myid in range(1, size + 1)}
        quorum = {
            f"server.{myid}": f"{HOST}:{peer}:{election}"
            for myid, (peer, election) in peers.items()
        }
        ticks: dict[str, str | int] = {
            # Members under a busy CI machine need time to sync; a dead one is noticed in
            # syncLimit ticks.
            "initLimit": 50,
            "syncLimit": 10,
            # Members and clients talk over loopback only.
            "quorumListenOnAllIPs": "false",
        }
        self.servers = [
            ZooKeeperServer(
                port=_free_port(),
                myid=myid,
                tick_time_ms=tick_time_ms,
                log_level=log_level,
                extra_config={**quorum, **ticks},
            )
            for myid in peers
        ]

    @property
    def connect_string(self) -> str:
        return ",".join(server.connect_string for server in self.servers)

    def start(self, timeout: float = 60.0) -> None:
        """Start every member, then wait until all of them serve (a quorum is formed)."""
        for server in self.servers:
            server.start(wait=False)
        deadline = time.monotonic() + timeout
        for server in self.servers:
            server.wait_ready(max(1.0, deadline - time.monotonic()))

    def close(self) -> None:
        for server in self.servers:
            with contextlib.suppress(ShardcronError):
                server.close()

    def modes(self) -> dict[int, str]:
        """Each member's role by index: ``leader``, ``follower`` or ``down``."""
        return {index: server.mode() for index, server in enumerate(self.servers)}

    def leader(self, timeout: float = 30.0) -> ZooKeeperServer:
        """The member that leads now (waits, with a deadline, while an election runs)."""
        index = self._wait(lambda modes: [i for i, m in modes.items() if m == "leader"], timeout)
        return self.servers[index[0]]

    def followers(self) -> list[ZooKeeperServer]:
        return [self.servers[i] for i, mode in self.modes().items() if mode == "follower"]

    def wait_quorum(self, timeout: float = 30.0) -> None:
        """Wait until every running member serves, as leader or follower."""

        def serving(modes: dict[int, str]) -> list[int]:
            running = {i for i, s in enumerate(self.servers) if s.running}
            ok = {i for i, m in modes.items() if m in ("leader", "follower")}
            return sorted(ok) if running <= ok and "leader" in modes.values() else []

        self._wait(serving, timeout)

    def _wait(self, check: Callable[[dict[int, str]], list[int]], timeout: float) -> list[int]:
        deadline = time.monotonic() + timeout
        while True:
            modes = self.modes()
            found = check(modes)
            if found:
                return found
            if time.monotonic() > deadline:
                raise ShardcronError(f"ensemble not ready in {timeout}s: modes {modes}")
            time.sleep(0.1)  # polling the members' srvr answers, with a deadline


@contextlib.contextmanager
def zookeeper_ensemble(size: int = 3, *, tick_time_ms: int = 200) -> Iterator[ZooKeeperEnsemble]:
    """A started ensemble, closed on exit. A member that cannot start raises ShardcronError."""
    with ZooKeeperEnsemble(size, tick_time_ms=tick_time_ms) as ensemble:
        yield ensemble
