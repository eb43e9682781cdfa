"""Clean stops, remembered so that a job nobody runs any more is STOPPED, not CRASHED.

A crash and a clean stop leave the same registry behind: every ephemeral node is gone. So
an instance that stops a job on purpose (the worker shuts down, or an operator shuts the
job down) adds its id to the persistent ``/{job}/stopped`` node, a comma-separated list.
A job with no live instance is STOPPED when every instance that still owns an item is on
that list, and CRASHED otherwise (an owner vanished without saying goodbye).

The list keeps only ids that still own items, so it never grows beyond the item owners.
Java ignores the node (it reads only the nodes it knows).
"""

from __future__ import annotations

from shardcron.coordination.paths import JobPaths
from shardcron.registry import Create, Node, Op, SetData, TreeCache


def parse_stopped(value: bytes | None) -> set[str]:
    if not value:
        return set()
    return {each for each in value.decode("utf-8", "replace").split(",") if each}


def item_owners(cache: TreeCache, paths: JobPaths) -> set[str]:
    """The instances that own an item, as ``cache`` shows the layout."""
    return {
        (cache.get(paths.item_instance(int(item))) or b"").decode("utf-8", "replace")
        for item in cache.children(paths.sharding)
        if item.isdigit()
    }


def mark_op(paths: JobPaths, cache: TreeCache, instance: str, stopped: Node | None) -> Op:
    """The op that adds ``instance`` to the job's list, as read (``stopped``: its value and
    stat, None if absent), kept to the item owners ``cache`` shows: read from the
    registry, they would cost a stop a round trip per item (10,000 for a big job). Written
    at the version read, so that two instances stopping at once do not drop each other's
    id: the one refused reads again (:mod:`shardcron.coordination.deregistration`)."""
    kept = parse_stopped(stopped[0] if stopped else None) & item_owners(cache, paths)
    value = ",".join(sorted(kept | {instance})).encode()
    if stopped is None:
        return Create(paths.stopped, value)
    return SetData(paths.stopped, value, stopped[1].version)


def stopped_cleanly(owners: set[str], stopped: set[str]) -> bool:
    """For a job without live instances: did every item owner stop on purpose?"""
    return bool(stopped) and owners <= stopped
