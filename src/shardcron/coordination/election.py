"""Leader election on ``leader/election/instance``.

The leader is whoever created that ephemeral node; creation is atomic in the registry,
so no latch is needed around it. Instances re-elect when the node is deleted (the
leader's session ended or it abdicated) and the leader abdicates when its server is
DISABLED, since a disabled host must not steer sharding it takes no part in.
"""

from __future__ import annotations

from shardcron.coordination.paths import JobPaths
from shardcron.errors import NodeExistsError
from shardcron.registry import Registry, TreeCache


def leader(cache: TreeCache, paths: JobPaths) -> str | None:
    value = cache.get(paths.election_instance)
    return value.decode() if value else None


def try_elect(registry: Registry, paths: JobPaths, instance: str) -> bool:
    """Become leader if there is none; True only if this call made this instance leader."""
    try:
        registry.create(paths.election_instance, instance.encode(), ephemeral=True)
        return True
    except NodeExistsError:
        return False


def abdicate(registry: Registry, paths: JobPaths) -> None:
    """Give up leadership, only if this session holds it."""
    stat = registry.stat(paths.election_instance)
    if stat is not None and stat.ephemeral_owner == registry.session_id:
        registry.delete(paths.election_instance)
