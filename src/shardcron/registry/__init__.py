"""The registry: the only seam between coordination code and storage.

Coordination modules speak to a :class:`Registry`; two backends implement it:
:mod:`shardcron.registry.zookeeper` (production, through kazoo) and
:mod:`shardcron.registry.memory` (in-process, for the embedded quick start and fast
tests). Both pass the same contract suite (``tests/test_registry_contract.py``).

Semantics every backend keeps (ZooKeeper's):

* Paths are absolute inside the namespace (``/job/config``); the namespace is a chroot.
* Ephemeral nodes belong to the session that created them and vanish when it ends.
* A transaction applies all of its ops or none; the failing op is reported.
* Tree caches see every change below their root in the order the registry applied
  them, on one event thread per registry; listeners must not block.
* ``request_count`` counts round trips to the server (cache reads cost none).
"""

from __future__ import annotations

import logging

from shardcron.config.registry import RegistryConfig, parse_registry_url
from shardcron.errors import RegistryError
from shardcron.registry.contract import (
    MAX_TRANSACTION_BYTES,
    Answer,
    CacheSpec,
    Check,
    Create,
    Delete,
    EventType,
    Lock,
    Node,
    NodeEvent,
    NodeListener,
    Op,
    OpResult,
    Registry,
    SessionListener,
    SessionState,
    SetData,
    Stat,
    TreeCache,
    fitting,
    group_of,
    op_bytes,
    prefix_bytes,
    settle,
)
from shardcron.registry.memory import MemoryRegistry
from shardcron.registry.zookeeper import ZooKeeperRegistry

log = logging.getLogger(__name__)


# Loud on purpose: a second process on its own embedded registry runs every item again.
EMBEDDED_WARNING = (
    "EMBEDDED REGISTRY: jobs are coordinated inside this process only; other processes do not "
    "share its work and would run every item again. For several workers use a ZooKeeper: "
    "--registry zk://HOST:PORT/NAMESPACE or SHARDCRON_REGISTRY (shardcron zookeeper starts one)"
)


def open_registry(target: Registry | RegistryConfig | str | None) -> Registry:
    """A registry from an object, a config, a ``zk://`` or ``memory://`` URL, or None (embedded)."""
    if target is None or isinstance(target, str | RegistryConfig):
        config = (
            parse_registry_url(target or "memory://")
            if not isinstance(target, RegistryConfig)
            else target
        )
        if config.is_memory:
            log.warning(EMBEDDED_WARNING)
            return MemoryRegistry(
                namespace=config.namespace, session_timeout=config.session_timeout_ms / 1000
            )
        return ZooKeeperRegistry(config)
    return target


__all__ = [
    "MAX_TRANSACTION_BYTES",
    "Answer",
    "CacheSpec",
    "Check",
    "Create",
    "Delete",
    "EventType",
    "Lock",
    "Node",
    "NodeEvent",
    "NodeListener",
    "Op",
    "OpResult",
    "Registry",
    "RegistryError",
    "SessionListener",
    "SessionState",
    "SetData",
    "Stat",
    "TreeCache",
    "fitting",
    "group_of",
    "op_bytes",
    "open_registry",
    "prefix_bytes",
    "settle",
]
