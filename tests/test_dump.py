"""The dump text, its IP masking, and the ``dump@{job}`` TCP service on a live cluster."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from shardcron.config.job import JobConfig
from shardcron.observability.dump import DumpServer, dump_job, mask_ips, request_dump
from shardcron.operations.admin import Admin
from shardcron.registry import Registry
from shardcron.registry.memory import MemoryRegistry
from shardcron.testing.zookeeper import ZooKeeperServer
from tests.cluster import Recorder, cluster
from tests.helpers import wait_until

A, B = "10.0.0.1@-@7001", "10.0.0.12@-@7002"


@pytest.fixture
def memory() -> Iterator[Registry]:
    made = MemoryRegistry(namespace="dump")
    made.start()
    try:
        yield made
    finally:
        made.close()


def test_ips_are_numbered_by_first_appearance_over_the_whole_dump() -> None:
    entries = [
        ("/job/servers/10.0.0.12", "ENABLED"),
        ("/job/instances/10.0.0.1@-@7001", "jobInstanceId: 10.0.0.1@-@7001\nserverIp: 10.0.0.1"),
        ("/job/sharding/0/instance", "10.0.0.12@-@7002"),
        ("/job/config", "jobParameter: v1.2.3.4.5 at 999.1.1.1 or 192.168.0.255:80"),
    ]

    assert mask_ips(entries) == [
        ("/job/servers/ip1", "ENABLED"),
        ("/job/instances/ip2@-@7001", "jobInstanceId: ip2@-@7001\nserverIp: ip2"),
        ("/job/sharding/0/instance", "ip1@-@7002"),
        ("/job/config", "jobParameter: v1.2.3.4.5 at 999.1.1.1 or ip3:80"),
    ]


def test_the_dump_walks_the_tree_depth_first_in_reverse_name_order(memory: Registry) -> None:
    memory.put("/job", b"myapp:job")
    memory.put("/job/config", b"shardingTotalCount: 2\n")
    memory.put("/job/servers/10.0.0.1", b"ENABLED")
    memory.put("/job/servers/10.0.0.12", b"DISABLED")
    memory.put("/job/sharding/0/instance", A.encode())
    memory.put("/job/sharding/1/instance", B.encode())
    memory.put("/job/sharding/1/running", B.encode())
    memory.put("/other/config", b"x")

    assert dump_job(memory, "job", mask=False) == (
        "/job/sharding | \n"
        "/job/sharding/1 | \n"
        "/job/sharding/1/running | 10.0.0.12@-@7002\n"
        "/job/sharding/1/instance | 10.0.0.12@-@7002\n"
        "/job/sharding/0 | \n"
        "/job/sharding/0/instance | 10.0.0.1@-@7001\n"
        "/job/servers | \n"
        "/job/servers/10.0.0.12 | DISABLED\n"
        "/job/servers/10.0.0.1 | ENABLED\n"
        "/job/config | shardingTotalCount: 2\n"
        "\n"
    )
    masked = dump_job(memory, "job")
    assert "10.0.0" not in masked
    assert "/job/servers/ip1 | DISABLED\n/job/servers/ip2 | ENABLED\n" in masked
    assert dump_job(memory, "missing") == "\n"  # as Java answers for an unknown job


def ask(port: int, line: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(line)
        chunks = []
        while chunk := conn.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks)


def test_the_dump_service_answers_for_a_running_job(zookeeper: ZooKeeperServer) -> None:
    ids = ("127.0.0.1@-@7101", "127.0.0.2@-@7102")
    config = JobConfig(job_name="report", sharding_total_count=2)  # one-off: a stable tree
    with cluster(zookeeper, config, Recorder()) as c:
        for instance in ids:
            c.start(instance)
        server = DumpServer(c.admin, port=0).start()
        try:
            answer = ask(server.port, b"dump@report\n").decode()

            assert answer == dump_job(c.admin, "report")
            assert answer == request_dump("127.0.0.1", server.port, "report")
            assert answer == Admin(c.admin).dump("report")
            # Numbered in dump order: servers come first, 127.0.0.2 before 127.0.0.1.
            assert "/report/servers/ip1 | ENABLED\n/report/servers/ip2 | ENABLED\n" in answer
            assert "/report/instances/ip2@-@7101 | jobInstanceId: ip2@-@7101\nserverIp: ip2\n" in (
                answer
            )
            assert "127.0.0." not in answer
            assert answer.endswith("\n")
            assert ask(server.port, b"dump@nothing\n") == b"\n"
            assert ask(server.port, b"status\n") == b""  # anything else: no answer
        finally:
            server.stop()
        with pytest.raises(OSError):
            ask(server.port, b"dump@report\n")


def test_the_dump_shows_running_items_as_they_run(zookeeper: ZooKeeperServer) -> None:
    recorder = Recorder(hold=1.0)
    config = JobConfig(job_name="slow", cron="* * * * * ?", sharding_total_count=1)
    with cluster(zookeeper, config, recorder) as c:
        c.start("127.0.0.1@-@7201")
        server = DumpServer(c.admin, port=0).start()
        try:
            wait_until(
                lambda: (
                    "/slow/sharding/0/running | ip1@-@7201\n"
                    in request_dump("127.0.0.1", server.port, "slow")
                ),
                what="item 0 running in the dump",
            )
        finally:
            server.stop()
