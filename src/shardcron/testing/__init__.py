"""Testing with shardcron: unit-test your jobs (:mod:`.jobs`), a throwaway ZooKeeper
(:mod:`.zookeeper`), an ensemble (:mod:`.ensemble`), and a TCP proxy for network faults
(:mod:`.proxy`).

May import: everything up to :mod:`shardcron.execution`.
"""

from __future__ import annotations

from shardcron.testing.jobs import run_item, sharding_context
from shardcron.testing.zookeeper import (
    ZooKeeperServer,
    drop_connection,
    expire_session,
    find_zookeeper,
    unique_namespace,
    zookeeper_server,
)

__all__ = [
    "ZooKeeperServer",
    "drop_connection",
    "expire_session",
    "find_zookeeper",
    "run_item",
    "sharding_context",
    "unique_namespace",
    "zookeeper_server",
]
