"""Who is here: ``servers/{ip}``, ``instances/{id}`` and ``leases/{id}`` of one job.

``servers/{ip}`` is persistent and says whether the host may run the job (ENABLED or
DISABLED, shared by every instance on that IP); ``instances/{id}`` is ephemeral, so it
disappears with the session of a crashed or partitioned instance. An instance is
*available* when its node exists and its server is ENABLED. ``leases/{id}`` (shardcron
only) is ephemeral too, written with the instance node, and no operator removes it: it
tells whether the holder of a claim lives (see :mod:`shardcron.coordination.claims`).
"""

from __future__ import annotations

import contextlib

from shardcron.config.instancerecord import instance_yaml
from shardcron.coordination.paths import JobPaths
from shardcron.errors import JobConflictError, NodeExistsError
from shardcron.model import ServerStatus, instance_ip
from shardcron.registry import Create, Op, Registry, SetData, TreeCache


def server_enabled(cache: TreeCache, paths: JobPaths, ip: str) -> bool:
    return cache.get(paths.server(ip)) == ServerStatus.ENABLED.encode()


def live_instances(cache: TreeCache, paths: JobPaths) -> list[str]:
    return cache.children(paths.instances)


def available_instances(cache: TreeCache, paths: JobPaths) -> list[str]:
    return [i for i in live_instances(cache, paths) if server_enabled(cache, paths, instance_ip(i))]


def server_ops(cache: TreeCache, paths: JobPaths, ip: str, enabled: bool) -> list[Op]:
    """The ops that write ``servers/{ip}`` as ENABLED or DISABLED (none if it already is),
    with its parent if the cache shows none: for a registration in one transaction."""
    status = (ServerStatus.ENABLED if enabled else ServerStatus.DISABLED).encode()
    ops: list[Op] = [] if cache.exists(paths.servers) else [Create(paths.servers)]
    current = cache.get(paths.server(ip))
    if current is None:
        ops.append(Create(paths.server(ip), status))
    elif current != status:
        ops.append(SetData(paths.server(ip), status))
    return ops


def instance_ops(cache: TreeCache, paths: JobPaths, instance: str, ip: str) -> list[Op]:
    """The ops that create this instance's ephemeral nodes, its instance node and its
    lease (see :mod:`shardcron.coordination.claims`), and their parents if missing."""
    ops: list[Op] = [Create(parent) for parent in (paths.instances, paths.leases)]
    ops = [op for op in ops if not cache.exists(op.path)]
    ops.append(
        Create(paths.instance(instance), instance_yaml(instance, ip).encode(), ephemeral=True)
    )
    ops.append(Create(paths.lease(instance), ephemeral=True))
    return ops


def register_server(registry: Registry, paths: JobPaths, ip: str, enabled: bool) -> None:
    status = ServerStatus.ENABLED if enabled else ServerStatus.DISABLED
    registry.put(paths.server(ip), status.encode())


def register_instance(registry: Registry, paths: JobPaths, instance: str, ip: str) -> None:
    """Create this instance's ephemeral node and its lease; refuse an id a live session
    already holds."""
    path = paths.instance(instance)
    try:
        registry.create(path, instance_yaml(instance, ip).encode(), ephemeral=True)
    except NodeExistsError:
        stat = registry.stat(path)
        if stat is not None and stat.ephemeral_owner != registry.session_id:
            raise JobConflictError(
                f"job {paths.job!r}: instance id {instance!r} is already registered by a live "
                "session; stop that instance or start this one with another --instance-id"
            ) from None
    with contextlib.suppress(NodeExistsError):  # ours: an earlier attempt went through
        registry.create(paths.lease(instance), ephemeral=True)
