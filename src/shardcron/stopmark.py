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
import random
import time

from shardcron.errors import NodeExistsError, RegistryError, TransactionError
from shardcron.paths import JobPaths
from shardcron.registry import Registry, SetData, TreeCache

log = logging.getLogger(__name__)

# Concurrent stops rewrite the list with a version check, one winner per round: a fleet
# of 50 instances stopping together takes up to 50 rounds, so the loop is bounded by
# time, with a little jitter to spread the rounds, not by a count of attempts.
_DEADLINE_SECONDS = 5.0
_JITTER_SECONDS = 0.005
# Its own generator: the module's shared one is seeded and checked by test frameworks
# (Hypothesis warns when a background thread draws from it mid-test).
_jitter = random.Random()


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


def mark_stopped(registry: Registry, cache: TreeCache, job: str, instance: str) -> None:
    """Record that ``instance`` stopped ``job`` on purpose; a registry failure is only logged
    (the job then shows CRASHED, as before). The owners come from the job's ``cache``: read
    from the registry, a stop would cost a round trip per item (10,000 for a big job)."""
    paths = JobPaths(job)
    if not registry.connected:
        log.warning("job %s: registry down, the clean stop of %s is not recorded", job, instance)
        return
    try:
        if registry.stat(paths.config) is None:
            return  # the job was removed: writing would bring its node back
        deadline = time.monotonic() + _DEADLINE_SECONDS
        while time.monotonic() < deadline:
            stat = registry.stat(paths.stopped)
            kept = parse_stopped(registry.get(paths.stopped)) & item_owners(cache, paths)
            value = ",".join(sorted(kept | {instance})).encode()
            try:
                if stat is None:
                    registry.create(paths.stopped, value)
                else:
                    registry.transaction([SetData(paths.stopped, value, stat.version)])
                return
            except (NodeExistsError, TransactionError):
                # Another instance stopped at the same moment: read again.
                time.sleep(_jitter.uniform(0, _JITTER_SECONDS))
        log.warning("job %s: could not record the clean stop of %s", job, instance)
    except RegistryError as exc:
        log.warning("job %s: could not record the clean stop of %s: %s", job, instance, exc)


def stopped_cleanly(owners: set[str], stopped: set[str]) -> bool:
    """For a job without live instances: did every item owner stop on purpose?"""
    return bool(stopped) and owners <= stopped
