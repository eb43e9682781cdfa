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

import logging

from shardcron.errors import NodeExistsError, RegistryError, TransactionError
from shardcron.paths import JobPaths
from shardcron.registry import Registry, SetData

log = logging.getLogger(__name__)

_ATTEMPTS = 5  # concurrent stops rewrite the list with a version check


def parse_stopped(value: bytes | None) -> set[str]:
    if not value:
        return set()
    return {each for each in value.decode("utf-8", "replace").split(",") if each}


def mark_stopped(registry: Registry, job: str, instance: str) -> None:
    """Record that ``instance`` stopped ``job`` on purpose; a registry failure is only logged
    (the job then shows CRASHED, as before)."""
    paths = JobPaths(job)
    if not registry.connected:
        log.warning("job %s: registry down, the clean stop of %s is not recorded", job, instance)
        return
    try:
        if registry.stat(paths.config) is None:
            return  # the job was removed: writing would bring its node back
        for _ in range(_ATTEMPTS):
            stat = registry.stat(paths.stopped)
            owners = {
                (registry.get(paths.item_instance(int(item))) or b"").decode("utf-8", "replace")
                for item in registry.children(paths.sharding)
                if item.isdigit()
            }
            kept = parse_stopped(registry.get(paths.stopped)) & owners
            value = ",".join(sorted(kept | {instance})).encode()
            try:
                if stat is None:
                    registry.create(paths.stopped, value)
                else:
                    registry.transaction([SetData(paths.stopped, value, stat.version)])
                return
            except (NodeExistsError, TransactionError):
                continue  # another instance stopped at the same moment: read again
        log.warning("job %s: could not record the clean stop of %s", job, instance)
    except RegistryError as exc:
        log.warning("job %s: could not record the clean stop of %s: %s", job, instance, exc)


def stopped_cleanly(owners: set[str], stopped: set[str]) -> bool:
    """For a job without live instances: did every item owner stop on purpose?"""
    return bool(stopped) and owners <= stopped
