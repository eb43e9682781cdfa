"""The sweep: what in a job's registry state needs repair, read from the local cache.

Coordination is level-triggered: instead of trusting that the right event was seen at
the right moment, :func:`sweep` compares what the cache shows with what should hold and
lists the differences. The runtime repairs them, and runs the sweep on election, after
every reconnect, on membership changes and every few seconds; a sweep that finds nothing
costs no request. What it looks for:

* ``running`` without its ``lease``: the holder's session is gone (or the node was left
  by a Java worker, or by this instance before a restart). The runtime confirms with one
  read and, if the claim really is stale, queues the item for failover or, with failover
  off, removes it and flags the item misfired.
* ``failover``/``failovering`` without ``running``: left-overs that would make everybody
  skip the item; deleted.
* failover queue entries for items that no longer exist, or with failover off: deleted.
* item nodes beyond ``shardingTotalCount`` with no run in flight: deleted (a run still in
  flight keeps its nodes until it completes).
* items assigned to instances that are gone: resharding is flagged.
* a ``processing`` node: the runtime deletes it if its own session left it behind.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shardcron import failover, sharding
from shardcron.paths import JobPaths
from shardcron.registry import TreeCache


@dataclass(slots=True)
class Findings:
    suspect_claims: list[int] = field(default_factory=list)
    failover_leftovers: list[int] = field(default_factory=list)
    dead_queue_entries: list[int] = field(default_factory=list)
    items_beyond_count: list[int] = field(default_factory=list)
    owners_gone: list[str] = field(default_factory=list)
    processing: bool = False

    def __bool__(self) -> bool:
        return bool(
            self.suspect_claims
            or self.failover_leftovers
            or self.dead_queue_entries
            or self.items_beyond_count
            or self.owners_gone
            or self.processing
        )


def sweep(
    cache: TreeCache, paths: JobPaths, total: int, live: set[str], failover_on: bool
) -> Findings:
    found = Findings(processing=sharding.is_processing(cache, paths))
    owners: set[str | None] = set()
    for name in cache.children(paths.sharding):
        if not name.isdigit():
            continue
        item = int(name)
        if item < total:
            owners.add(sharding.owner(cache, paths, item))
        running = cache.exists(paths.running(item))
        if running and not cache.exists(paths.lease(item)):
            found.suspect_claims.append(item)
        if not running and (
            cache.exists(paths.failover(item)) or cache.exists(paths.failovering(item))
        ):
            found.failover_leftovers.append(item)
        if item >= total and not running:
            found.items_beyond_count.append(item)
    found.dead_queue_entries = [
        i for i in failover.queued(cache, paths) if i >= total or not failover_on
    ]
    found.owners_gone = sorted(o for o in owners if o is not None and o not in live)
    return found
