"""Claiming and completing the items of one fire: ``sharding/{i}/running`` and ``misfire``.

A claim is one transaction that creates the ``running`` node of every item the instance
is about to run. ZooKeeper applies it atomically, so an item still running elsewhere
(its old owner after resharding, or a failover run) makes the claim fail for that item
only: it is left out, flagged ``misfire`` and the rest run on time. The same transaction
touches the item node once, and the transaction id it returns is the *fencing token*:
it grows with every claim, so a stale run can always be told from a newer one.

Completion is one more transaction that deletes the ``running`` nodes. In steady state a
fire therefore costs exactly two round trips, and an instance without items costs none.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field

from shardcron.errors import NodeExistsError, NoNodeError, RegistryError, TransactionError
from shardcron.paths import JobPaths
from shardcron.registry import Create, Delete, Op, Registry, SetData, Stat, TreeCache

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Claim:
    items: list[int]
    token: int = 0
    contended: list[int] = field(default_factory=list)


def claim(
    registry: Registry,
    cache: TreeCache,
    paths: JobPaths,
    items: list[int],
    instance: str,
    *,
    persistent: bool,
    extra: list[Op] | None = None,
    trust_cache: bool = True,
) -> Claim:
    """Create ``running`` for every item not already running anywhere.

    ``extra`` ops ride along in the same transaction (failover bookkeeping). Items whose
    node exists are returned in ``contended``; a second round trip happens only when the
    cache had not yet seen such a node.
    """
    free = [i for i in items if not (trust_cache and cache.exists(paths.running(i)))]
    result = Claim(items=free, contended=[i for i in items if i not in free])
    while free:
        ops: list[Op] = [
            Create(paths.running(i), instance.encode(), ephemeral=not persistent) for i in free
        ]
        ops.append(SetData(paths.item(free[0]), b""))
        try:
            results = registry.transaction(ops + (extra or []))
        except TransactionError as exc:
            if exc.index < len(free) and isinstance(exc.cause, NodeExistsError):
                result.contended.append(free.pop(exc.index))
                continue
            raise
        stat = results[len(free)]
        assert isinstance(stat, Stat)
        result.token = stat.mzxid
        return result
    return result


def complete(registry: Registry, paths: JobPaths, items: list[int], extra: list[Op]) -> None:
    """Delete the ``running`` nodes of a finished fire (plus ``extra`` ops) in one go."""
    ops: list[Op] = [Delete(paths.running(i)) for i in items] + extra
    if not ops:
        return
    try:
        registry.transaction(ops)
    except TransactionError as exc:
        if not isinstance(exc.cause, NoNodeError):
            raise
        # Someone cleared a node already (reconnect clean-up, an operator): finish one by one.
        for op in ops:
            try:
                registry.transaction([op])
            except TransactionError:
                log.debug("job %s: %s was already gone", paths.job, op.path)


def is_current(registry: Registry, paths: JobPaths, item: int, token: int) -> bool:
    """True while the claim with ``token`` still holds ``item`` (one registry read)."""
    try:
        stat = registry.stat(paths.running(item))
    except RegistryError:
        return False
    return stat is not None and stat.czxid == token


def mark_misfire(registry: Registry, cache: TreeCache, paths: JobPaths, items: list[int]) -> None:
    ops: list[Op] = [Create(paths.misfire(i)) for i in items if not cache.exists(paths.misfire(i))]
    if not ops:
        return
    try:
        registry.transaction(ops)
    except TransactionError:
        for op in ops:  # some flag appeared meanwhile; set the rest one by one
            with contextlib.suppress(NodeExistsError):
                registry.create(op.path)


def misfired(cache: TreeCache, paths: JobPaths, items: list[int]) -> list[int]:
    return [i for i in items if cache.exists(paths.misfire(i))]
