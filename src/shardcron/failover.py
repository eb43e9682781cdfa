"""Failover: items whose owner died mid-run are run again, at once, by live instances.

Protocol (ElasticJob 3.x nodes):

* While failover is on, ``sharding/{i}/running`` is persistent, so it outlives a crashed
  owner and tells which items were interrupted.
* When an instance node disappears, the leader reads the owners of existing ``running``
  and ``failovering`` nodes; each item whose owner is gone is *orphaned*: in one
  transaction its stale nodes are deleted and ``leader/failover/items/{i}`` is queued.
  A new leader runs the same scan, which also covers the leader's own death and a whole
  cluster restart that left persistent nodes behind.
* Every available instance sees the queue in its cache and claims items with one
  transaction per item: delete the queue entry, create ``failover`` (ephemeral),
  ``failovering`` and ``running``. The registry lets exactly one claimant win.
  Items are spread deterministically over the available instances, so all of them are
  claimed in the same window; an idle instance also takes the others' items at once, a
  busy one only after a short grace, and then runs them beside its own items.
* Completion deletes ``running``, ``failover`` and ``failovering`` together.

Unlike ElasticJob, claiming does not wait for the claimant's own run to end, and every
queued item is taken, not one per idle instance per fire.
"""

from __future__ import annotations

import logging

from shardcron.errors import RegistryError, TransactionError
from shardcron.paths import JobPaths
from shardcron.registry import Create, Delete, Op, Registry, TreeCache
from shardcron.strategies import order_instances

log = logging.getLogger(__name__)


def queued(cache: TreeCache, paths: JobPaths) -> list[int]:
    return sorted(int(n) for n in cache.children(paths.failover_items) if n.isdigit())


def items_failed_over_elsewhere(cache: TreeCache, paths: JobPaths, items: list[int]) -> set[int]:
    return {i for i in items if cache.exists(paths.failover(i))}


def orphans(
    registry: Registry,
    cache: TreeCache,
    paths: JobPaths,
    live: set[str],
    me: str,
    running_here: set[int],
) -> list[int]:
    """Items whose ``running`` or ``failovering`` owner is not among ``live``, or is this
    instance's id but not running here (left by an earlier process with the same id)."""
    found = []
    for name in cache.children(paths.sharding):
        if not name.isdigit():
            continue
        item = int(name)
        for path in (paths.running(item), paths.failovering(item)):
            if not cache.exists(path):
                continue
            value = registry.get(path)
            owner = None if value is None else value.decode()
            if owner is not None and (
                owner not in live or (owner == me and item not in running_here)
            ):
                found.append(item)
                break
    return found


def queue_orphans(
    registry: Registry,
    cache: TreeCache,
    paths: JobPaths,
    live: set[str],
    me: str,
    running_here: set[int],
) -> list[int]:
    """Leader: move every orphaned item to the failover queue; returns the items queued."""
    items = orphans(registry, cache, paths, live, me, running_here)
    if items and not cache.exists(paths.failover_items):
        registry.put(paths.failover_items, b"")  # transactions do not create parents
    for item in items:
        # Stale nodes go first, so a claimant that sees the queue entry sees them gone.
        ops: list[Op] = [
            Delete(path)
            for path in (paths.running(item), paths.failovering(item), paths.failover(item))
            if cache.exists(path)
        ]
        if not cache.exists(paths.failover_item(item)):
            ops.append(Create(paths.failover_item(item)))
        try:
            registry.transaction(ops)
        except TransactionError as exc:
            log.info("job %s: item %d changed while queueing it (%s)", paths.job, item, exc)
    if items:
        log.warning("job %s: items %s lost their instance; queued for failover", paths.job, items)
    return items


def share(items: list[int], available: list[str], instance: str) -> list[int]:
    """This instance's part of ``items`` when spread evenly over ``available``."""
    ordered = order_instances(available)
    if instance not in ordered:
        return []
    slot = ordered.index(instance)
    return [item for n, item in enumerate(items) if n % len(ordered) == slot]


def claim_ops(paths: JobPaths, item: int, instance: str) -> list[Op]:
    """Ops that, with the creation of ``running``, take ``item`` over from the queue."""
    return [
        Delete(paths.failover_item(item)),
        Create(paths.failover(item), instance.encode(), ephemeral=True),
        Create(paths.failovering(item), instance.encode()),
    ]


def complete_ops(cache: TreeCache, paths: JobPaths, item: int) -> list[Op]:
    return [Delete(paths.failover(item)), Delete(paths.failovering(item))]


def clear_all(registry: Registry, cache: TreeCache, paths: JobPaths) -> None:
    """Failover was switched off: drop its bookkeeping."""
    for name in cache.children(paths.sharding):
        if name.isdigit():
            for path in (paths.failover(int(name)), paths.failovering(int(name))):
                if cache.exists(path):
                    try:
                        registry.delete(path)
                    except RegistryError:
                        log.warning("job %s: could not delete %s", paths.job, path)
    registry.delete(paths.failover_items, recursive=True)
