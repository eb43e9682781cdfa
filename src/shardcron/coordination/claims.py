"""Claiming and completing the items of one fire: ``running``, the holder's lease, ``misfire``.

A claim is one transaction that, for every item the instance is about to run, creates
the persistent ``sharding/{i}/running`` (value: the holder's id, as ElasticJob writes it)
and touches the item node ``sharding/{i}``:

* the registry applies it atomically, so an item still running elsewhere makes the claim
  fail for that item only: it is left out (and flagged ``misfire``), the rest run;
* the holder's ephemeral ``leases/{id}`` (one per instance and job, created when it
  registers) lives exactly as long as the holder's session. A ``running`` whose holder has
  neither a lease nor an instance node belongs to a dead session: that is how the leader
  tells a crashed run from a live one, even when an operator removed the holder's instance
  node. The lease outlives every fire, so a fire writes nothing for it; the claim only
  checks that it exists, in the same transaction. A claim sent on a new session before
  the instance registered again would otherwise create ``running`` nodes that look dead
  and are failed over while they run;
* touching the item node bumps its version. The version a claim produced identifies
  that claim, so completion is conditional on it (``Check``) in the same transaction:
  a stale run can never delete a newer claim. The transaction id is the *fencing token*.
  The touch writes the second of the fire claimed (:func:`stamp`; ElasticJob leaves the
  item node empty and never reads it): an instance that takes the item over from a dead
  owner learns from it which fires nobody ran (:mod:`shardcron.coordination.inherited`).

Completion is one more transaction. Both are :mod:`shardcron.coordination.groupcommit` requests: the
claims of every job of a process due in the same tick go in one multi-op, their
completions in another, so in steady state a tick costs two round trips whatever the
number of jobs, and an instance without items costs none. Both are safe to repeat after a
lost answer. A fire whose claim would not fit one transaction is claimed in parts
(:func:`claim_parts`), each a fire of its own with its own token.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from shardcron.coordination.paths import JobPaths
from shardcron.errors import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RegistryError,
)
from shardcron.registry import (
    MAX_TRANSACTION_BYTES,
    Check,
    Create,
    Delete,
    Op,
    Registry,
    SetData,
    Stat,
    TreeCache,
    op_bytes,
    prefix_bytes,
)

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Claim:
    items: list[int]
    token: int = 0
    versions: dict[int, int] = field(default_factory=dict)  # item -> item node version
    # Tuples, not lists: nearly always empty, and an empty list per fire is one more object
    # for the garbage collector to scan while the claim is in flight (see Firing).
    contended: Sequence[int] = ()
    unleased: Sequence[int] = ()  # not claimed: no lease (see Claiming)
    moved: Sequence[int] = ()  # not claimed: claimed elsewhere since (see Claiming)


@functools.lru_cache(maxsize=256)  # a herd's jobs fire on the same second
def stamp(when: float) -> bytes:
    """The item node's value after a claim: the second of the fire it claims."""
    return f"{when:.3f}".encode()


def stamped(value: bytes | None) -> float | None:
    """The fire second a claim wrote on an item node: None if there is none (a node made
    by a layout, or by ElasticJob) or it is not one."""
    try:
        when = float(value) if value else math.nan
    except ValueError:
        return None
    return when if math.isfinite(when) else None


# A claim handed back unrun stamps its item this much before its fire: accounted for up
# to that fire, not including it.
UNRUN_SECONDS = 0.001
# What a stamp costs in a claim's bytes, for sizing its parts (a fire second's length).
_SIZING_STAMP = stamp(9_999_999_999.0)


def claim_ops(paths: JobPaths, item: int, instance: str, when: bytes = _SIZING_STAMP) -> list[Op]:
    return [
        Create(paths.running(item), instance.encode()),
        SetData(paths.item(item), when),
    ]


CLAIM_OPS = 2  # per item, as claim_ops writes them: the item node's touch is the last
# The most bytes of one part (see in_parts); the fault simulation lowers it.
PART_BYTES = MAX_TRANSACTION_BYTES


def in_parts(
    registry: Registry,
    items: list[int],
    ops_of: Callable[[int], list[Op]],
    once: Sequence[Op] = (),
) -> list[list[int]]:
    """``items`` cut, in order, into runs whose ops (``ops_of`` each item, plus ``once``)
    fit one transaction, by the bound of the highest item (its paths are the longest).
    ZooKeeper drops the connection that sends a request over its limit, and with it the
    session of every job of the process: one job's claim of 8,000 items on one instance
    was such a request, sent again at every reconnect."""
    if len(items) <= 1:
        return [items] if items else []  # one item always makes a part: no sizing per fire
    prefix = prefix_bytes(registry)
    per_item = sum(op_bytes(op, prefix) for op in ops_of(max(items)))
    room = PART_BYTES - sum(op_bytes(op, prefix) for op in once)
    size = max(1, room // per_item)
    return [items[n : n + size] for n in range(0, len(items), size)]


def claim_parts(
    registry: Registry, paths: JobPaths, items: list[int], instance: str
) -> list[list[int]]:
    """``items`` cut into claims that each fit one transaction (about 3,500 items each)."""
    if len(items) <= 1:  # as in_parts, before building its ops: nearly every fire's case
        return [items] if items else []
    lease = Check(paths.lease(instance))
    return in_parts(registry, items, lambda i: claim_ops(paths, i, instance), [lease])


class Claiming:
    """The claim of ``items`` as a :class:`shardcron.coordination.groupcommit.Request`: every item
    not already running anywhere, stamped with the fire's second ``when`` (see
    :func:`stamp`); ``extra`` ops ride along. Items whose ``running`` node
    exists end in ``result.contended``; a second round trip happens only when the cache had
    not yet seen such a node. Without this instance's lease (a new session not registered
    yet, or someone removed it) nothing is claimed: the items end in ``result.unleased``.
    ``expect``: the item node versions this instance's own last claim of some items left
    (a fire claimed once the fire it follows completed, its second past): the claim
    checks them, in the same transaction, and an item another instance claimed since
    (its cache showed this one a layout it had already left) ends in ``result.moved``."""

    def __init__(
        self,
        cache: TreeCache,
        paths: JobPaths,
        items: list[int],
        instance: str,
        *,
        when: bytes = b"",
        extra: list[Op] | None = None,
        trust_cache: bool = True,
        expect: dict[int, int] | None = None,
    ) -> None:
        self.paths, self.instance, self.when = paths, instance, when
        self.extra: Sequence[Op] = extra or ()
        self.expect = expect or {}
        self.free: list[int] = []
        contended: list[int] = []
        for i in items:  # one pass: a job of 20,000 items, compared pairwise, took 1.5 s
            (contended if trust_cache and cache.exists(paths.running(i)) else self.free).append(i)
        # The items are settled by the answer (applied, refused): until then they are free.
        self.result = Claim(items=self.free, contended=tuple(contended))
        self._ops: list[Op] | None = None

    def _checked(self) -> list[int]:
        """The items whose version is checked: their checks go first, before the claim's
        own touch of their node bumps it."""
        return [i for i in self.free if i in self.expect] if self.expect else []

    def ops(self) -> list[Op]:
        if self._ops is None:
            ops = [
                op for i in self.free for op in claim_ops(self.paths, i, self.instance, self.when)
            ]
            checks = [Check(self.paths.item(i), self.expect[i]) for i in self._checked()]
            lease = Check(self.paths.lease(self.instance))
            self._ops = [*checks, *ops, lease, *self.extra] if ops else []
        return self._ops

    def applied(self, results: Sequence[object]) -> None:
        first = len(self._checked())
        for n, item in enumerate(self.free):
            stat = results[first + n * CLAIM_OPS + CLAIM_OPS - 1]
            assert isinstance(stat, Stat)
            self.result.versions[item] = stat.version
            self.result.token = stat.mzxid
        self.free, self._ops = [], []  # result.items keeps the list

    def refused(self, index: int, cause: RegistryError) -> bool:
        checked = self._checked()
        if index < len(checked):  # claimed elsewhere since this instance's last claim
            if not isinstance(cause, BadVersionError | NoNodeError):
                return False
            self.free.remove(checked[index])
            self.result.moved = (*self.result.moved, checked[index])
            self.result.items, self._ops = self.free, None
            return True
        index -= len(checked)
        claims = CLAIM_OPS * len(self.free)
        if index == claims and isinstance(cause, NoNodeError):  # the lease's check
            self.result.unleased, self.free = tuple(self.free), []
            self.result.items, self._ops = self.free, None
            return True
        if index >= claims or not isinstance(cause, NodeExistsError | NoNodeError):
            return False
        self.result.contended = (*self.result.contended, self.free.pop(index // CLAIM_OPS))
        self._ops = None
        return True


class Completing:
    """Removing the claims made at ``versions`` (plus each item's ``extra`` deletions), as
    a :class:`shardcron.coordination.groupcommit.Request`.

    Conditional on each claim still being the current one, and idempotent: an item whose
    claim was superseded, or whose nodes are gone already (a completion whose answer was
    lost), is dropped.
    """

    def __init__(
        self, paths: JobPaths, versions: dict[int, int], extra: dict[int, list[Op]] | None = None
    ) -> None:
        self.paths = paths
        self._versions, self._extra = versions, extra or {}
        # Each item's ops, grouped only when the registry refuses one: a worker of
        # thousands of jobs has thousands of completions in flight, and the garbage
        # collector scans every object of them.
        self._groups: dict[int, list[Op]] | None = None
        self._ops: list[Op] | None = None  # asked for several times per group commit

    def _item_ops(self, item: int, version: int) -> list[Op]:
        paths, extra = self.paths, self._extra.get(item, ())
        return [Check(paths.item(item), version), Delete(paths.running(item)), *extra]

    def ops(self) -> list[Op]:
        if self._ops is None:
            if self._groups is None:
                self._ops = [
                    op for item, v in self._versions.items() for op in self._item_ops(item, v)
                ]
            else:
                self._ops = [op for ops in self._groups.values() for op in ops]
        return self._ops

    def applied(self, results: Sequence[object]) -> None:
        self._groups, self._ops = {}, []

    def refused(self, index: int, cause: RegistryError) -> bool:
        if self._groups is None:
            self._groups = {item: self._item_ops(item, v) for item, v in self._versions.items()}
        flat = [(item, op) for item, ops in self._groups.items() for op in ops]
        item, op = flat[index]
        self._ops = None
        if isinstance(op, Check) and isinstance(cause, BadVersionError | NoNodeError):
            log.info("job %s: item %d was claimed anew; its old run ends", self.paths.job, item)
            del self._groups[item]
        elif isinstance(op, Delete) and isinstance(cause, NoNodeError):
            self._groups[item].remove(op)  # gone already: an earlier attempt, or the session
        else:
            return False
        return True


def settle(
    registry: Registry, paths: JobPaths, items: list[int], instance: str, session: int
) -> Claim:
    """The part of a claim sent in ``session`` whose answer was lost that went through:
    the items whose ``running`` names this instance, with their token and versions read
    back. A claim of an earlier session is not ours to run: that session ended, and its
    ``running`` nodes are repaired as any dead session's. Within one session this
    instance never claims an item its own earlier claim still holds, so a ``running``
    that names it and was created in this session is this claim's.

    A ``running`` naming this instance may be an earlier session's (same id, its own
    sweep not done yet, the leader repairing it): a claim passes only with this
    session's lease, so one of this session is created after the lease, and an earlier
    session's before it. No lease of this session: nothing of it can have gone through."""
    if session != registry.session_id:
        return Claim(items=[])
    lease = registry.stat(paths.lease(instance))
    if lease is None or lease.ephemeral_owner != session:
        return Claim(items=[])
    me = instance.encode()
    mine, token = [], 0
    for item in items:
        running = registry.stat(paths.running(item))
        if (
            running is not None
            and running.czxid > lease.czxid
            and registry.get(paths.running(item)) == me
        ):
            mine.append(item)
            token = running.czxid
    versions = {}
    for item in mine:
        stat = registry.stat(paths.item(item))
        if stat is not None:
            versions[item] = stat.version
    return Claim(items=mine, token=token, versions=versions)


def is_current(registry: Registry, paths: JobPaths, item: int, token: int) -> bool:
    """True while the claim with ``token`` still holds ``item`` (one registry read)."""
    try:
        stat = registry.stat(paths.running(item))
    except RegistryError:
        return False
    return stat is not None and stat.czxid == token


class MarkingMisfires:
    """Setting the ``misfire`` flags of ``items`` (a
    :class:`shardcron.coordination.groupcommit.Request`); a flag set meanwhile by another path is
    left as it is."""

    def __init__(self, cache: TreeCache, paths: JobPaths, items: list[int]) -> None:
        self._ops: list[Op] = [
            Create(paths.misfire(i)) for i in items if not cache.exists(paths.misfire(i))
        ]

    def ops(self) -> list[Op]:
        return self._ops

    def applied(self, results: Sequence[object]) -> None:
        self._ops = []

    def refused(self, index: int, cause: RegistryError) -> bool:
        if not isinstance(cause, NodeExistsError):
            return False
        del self._ops[index]
        return True


def misfired(cache: TreeCache, paths: JobPaths, items: list[int]) -> list[int]:
    return [i for i in items if cache.exists(paths.misfire(i))]


class TakingMisfires:
    """Deleting the ``misfire`` flags of ``items`` (a :class:`shardcron.coordination.groupcommit.Request`).
    ``taken`` lists the flags this request deleted: only the path that deleted a flag
    re-runs its item, so two paths noticing the same misfire cannot both re-run it."""

    def __init__(self, paths: JobPaths, items: list[int]) -> None:
        self.paths = paths
        self.taken = list(items)

    def ops(self) -> list[Op]:
        return [Delete(self.paths.misfire(i)) for i in self.taken]

    def applied(self, results: Sequence[object]) -> None:
        pass

    def refused(self, index: int, cause: RegistryError) -> bool:
        if not isinstance(cause, NoNodeError):
            return False
        del self.taken[index]
        return True
