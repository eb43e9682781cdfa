"""Claiming and completing the items of one fire: ``running``, its ``lease``, ``misfire``.

A claim is one transaction that, for every item the instance is about to run, creates
the persistent ``sharding/{i}/running`` (value: the holder's id, as ElasticJob writes it),
its ephemeral child ``running/lease`` and touches the item node ``sharding/{i}``:

* the registry applies it atomically, so an item still running elsewhere makes the claim
  fail for that item only: it is left out (and flagged ``misfire``), the rest run;
* the lease lives exactly as long as the holder's session. ``running`` without its lease
  means the holder died (or lost its session): that is how the leader tells a crashed
  run from a live one, even when an operator removed the holder's instance node;
* touching the item node bumps its version. The version a claim produced identifies
  that claim, so completion is conditional on it (``Check``) in the same transaction:
  a stale run can never delete a newer claim. The transaction id is the *fencing token*.

Completion is one more transaction. In steady state a fire costs exactly two round trips,
and an instance without items costs none. Both are safe to repeat after a lost answer.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field

from shardcron.errors import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RegistryError,
    TransactionError,
)
from shardcron.paths import JobPaths
from shardcron.registry import Check, Create, Delete, Op, Registry, SetData, Stat, TreeCache

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Claim:
    items: list[int]
    token: int = 0
    versions: dict[int, int] = field(default_factory=dict)  # item -> item node version
    contended: list[int] = field(default_factory=list)


def claim_ops(paths: JobPaths, item: int, instance: str) -> list[Op]:
    me = instance.encode()
    return [
        Create(paths.running(item), me),
        Create(paths.lease(item), me, ephemeral=True),
        SetData(paths.item(item), b""),
    ]


def claim(
    registry: Registry,
    cache: TreeCache,
    paths: JobPaths,
    items: list[int],
    instance: str,
    *,
    extra: list[Op] | None = None,
    trust_cache: bool = True,
) -> Claim:
    """Claim every item not already running anywhere; ``extra`` ops ride along.

    Items whose ``running`` node exists come back in ``contended``; a second round trip
    happens only when the cache had not yet seen such a node.
    """
    free = [i for i in items if not (trust_cache and cache.exists(paths.running(i)))]
    result = Claim(items=free, contended=[i for i in items if i not in free])
    while free:
        ops = [op for i in free for op in claim_ops(paths, i, instance)]
        try:
            results = registry.transaction(ops + (extra or []))
        except TransactionError as exc:
            if exc.index < len(ops) and isinstance(exc.cause, NodeExistsError | NoNodeError):
                result.contended.append(free.pop(exc.index // 3))
                continue
            raise
        for n, item in enumerate(free):
            stat = results[n * 3 + 2]
            assert isinstance(stat, Stat)
            result.versions[item] = stat.version
            result.token = stat.mzxid
        return result
    return result


def complete(
    registry: Registry,
    paths: JobPaths,
    versions: dict[int, int],
    extra: dict[int, list[Op]] | None = None,
) -> list[int]:
    """Remove the claims made at ``versions`` (plus each item's ``extra`` deletions).

    Conditional on each claim still being the current one, and idempotent: an item whose
    claim was superseded, or whose nodes are gone already (a completion whose answer was
    lost), is dropped. Returns the items whose claim this call removed or found removed.
    """
    groups: dict[int, list[Op]] = {
        item: [
            Check(paths.item(item), version),
            Delete(paths.lease(item)),
            Delete(paths.running(item)),
            *(extra or {}).get(item, []),
        ]
        for item, version in versions.items()
    }
    done = list(groups)
    while groups:
        flat = [(item, op) for item, ops in groups.items() for op in ops]
        try:
            registry.transaction([op for _, op in flat])
            return done
        except TransactionError as exc:
            item, op = flat[exc.index]
            if isinstance(op, Check) and isinstance(exc.cause, BadVersionError | NoNodeError):
                log.info("job %s: item %d was claimed anew; its old run ends", paths.job, item)
                del groups[item]
                done.remove(item)
            elif isinstance(op, Delete) and isinstance(exc.cause, NoNodeError):
                groups[item].remove(op)  # gone already: an earlier attempt, or the session
            else:
                raise
    return done


def settle(registry: Registry, paths: JobPaths, items: list[int]) -> Claim:
    """The part of a claim whose answer was lost that went through: the items whose lease
    this session holds (a new session's claim cannot be ours), with their token and
    versions read back."""
    session = registry.session_id
    mine = []
    for item in items:
        lease = registry.stat(paths.lease(item))
        if lease is not None and lease.ephemeral_owner == session:
            mine.append(item)
    if not mine:
        return Claim(items=[])
    running = registry.stat(paths.running(mine[0]))
    versions = {}
    for item in mine:
        stat = registry.stat(paths.item(item))
        if stat is not None:
            versions[item] = stat.version
    return Claim(items=mine, token=running.czxid if running else 0, versions=versions)


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


def take_misfire(registry: Registry, paths: JobPaths, item: int) -> bool:
    """Delete ``item``'s misfire flag; True only for the caller that deleted it, so two
    paths noticing the same misfire cannot both re-run it."""
    try:
        registry.transaction([Delete(paths.misfire(item))])
    except TransactionError:
        return False
    return True
