"""Resharding: the flag-then-shard protocol of ``leader/sharding``.

1. The leader sets ``necessary`` whenever the set of available instances or the item
   count may have changed (an instance joined or left, a server was enabled or disabled,
   ``shardingTotalCount`` changed, a leader was elected). Its heal sets it too when its
   last layout was planned for other instances or another count than now: a change seen
   while that layout was in flight found the flag still up, and the layout removed it.
2. At the next fire, before anything runs, every instance sees the flag. The leader
   runs the strategy and, in one transaction, creates ``processing``, writes the moved
   ``sharding/{i}/instance`` nodes and deletes both flags (:class:`Resharding`, sent
   with the group commit, so the jobs of a process due in one tick reshard together).
   The others wait (on cache events) until the flag is gone.
   A job's *first* layout is asked for ahead of its first fire, and waits, at most a
   few seconds, until no other instance has joined for a second (:class:`FirstLayout`):
   instances started together then share one layout. Written while they still
   register, it would be written again at the next fire, and every instance registering
   meanwhile would load all of it.
3. A layout too big for one transaction is written in several (:func:`write`) under
   the ephemeral ``processing`` node: if the leader dies meanwhile, ``processing``
   vanishes with its session, the flag stays, and the next leader does the work.

Unlike ElasticJob, the leader does not wait for running items to finish first: an item
that moved keeps its ``running`` node until its old owner completes it, and the new
owner's atomic claim (see :mod:`shardcron.coordination.claims`) fails for it until then.
Those very large assignments take as few transactions as ZooKeeper's request size limit
allows (about 10,000 moved owners each); only the last one removes the flags, so nobody
acts on a partial layout, and the others learn the new layout in one burst.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from shardcron.coordination import claims, membership
from shardcron.coordination.events import Resharded
from shardcron.coordination.job import JobState
from shardcron.coordination.paths import JobPaths
from shardcron.coordination.strategies import Strategy, order_instances, resolve_strategy
from shardcron.errors import NodeExistsError, RegistryError, ShardingError, TransactionError
from shardcron.registry import (
    MAX_TRANSACTION_BYTES,
    Create,
    Delete,
    Op,
    Registry,
    SetData,
    TreeCache,
    op_bytes,
    prefix_bytes,
)

log = logging.getLogger(__name__)

FIRST_LAYOUT_QUIET_SECONDS = 1.0
FIRST_LAYOUT_MAX_WAIT_SECONDS = 5.0
# How long a leader waits for its cache to show the layout it wrote before planning anew.
LAYOUT_WAIT_SECONDS = 5.0
# The most bytes of one layout transaction; the fault simulation lowers it.
LAYOUT_BYTES = MAX_TRANSACTION_BYTES


@dataclass(slots=True)
class Joins:
    """When another instance last joined any job of this process (shared by its jobs)."""

    last: float = -math.inf


@dataclass(slots=True)
class FirstLayout:
    """When the leader writes a job's first layout: once no other instance has joined for
    ``FIRST_LAYOUT_QUIET_SECONDS``, and at the latest ``FIRST_LAYOUT_MAX_WAIT_SECONDS``
    after it was first asked for (by a fire; ahead of the first fire; or for a layout too
    big for one transaction at the leader's election). Nothing runs before a first layout
    anyway."""

    joins: Joins
    joined_at: float = -math.inf
    asked_at: float | None = None
    retry_armed: bool = False

    def wait(self, now: float, fire_waiting: bool) -> float:
        """Seconds the first layout still waits (0: write it now). Asked for ahead of a
        fire, it waits for the instances starting along with the leader, until none has
        joined any job of this process for a moment: a job the others have not
        registered yet shows no join of its own. A fire that waits for it waits only for
        the instances that did join the job (a lone instance: not at all)."""
        if self.asked_at is None:
            self.asked_at = now
        last = (
            self.joined_at if fire_waiting else max(self.joined_at, self.joins.last, self.asked_at)
        )
        quiet = last + FIRST_LAYOUT_QUIET_SECONDS
        return max(0.0, min(quiet, self.asked_at + FIRST_LAYOUT_MAX_WAIT_SECONDS) - now)


def first_layout_fits(registry: Registry, paths: JobPaths, total: int, instance: str) -> bool:
    """Whether a first layout of ``total`` items fits one transaction (estimated from its
    last item, the longest path, owned by ``instance``)."""
    prefix, item = prefix_bytes(registry), total - 1
    per_item = op_bytes(Create(paths.item(item)), prefix) + op_bytes(
        Create(paths.item_instance(item), instance.encode()), prefix
    )
    return total * per_item <= LAYOUT_BYTES


def is_necessary(cache: TreeCache, paths: JobPaths) -> bool:
    return cache.exists(paths.sharding_necessary)


def is_processing(cache: TreeCache, paths: JobPaths) -> bool:
    return cache.exists(paths.sharding_processing)


def set_flag(registry: Registry, paths: JobPaths) -> None:
    with contextlib.suppress(NodeExistsError):
        registry.create(paths.sharding_necessary)


def owner(cache: TreeCache, paths: JobPaths, item: int) -> str | None:
    value = cache.get(paths.item_instance(item))
    return value.decode() if value else None


def has_sharding(cache: TreeCache, paths: JobPaths) -> bool:
    return bool(cache.children(paths.sharding))


def local_items(cache: TreeCache, paths: JobPaths, instance: str, total: int) -> list[int]:
    if not cache.exists(paths.sharding):
        return []  # no layout yet: the walk below would look up every item for nothing
    mine = instance.encode()
    return [i for i in range(total) if cache.get(paths.item_instance(i)) == mine]


def local_items_and_owners(
    cache: TreeCache, paths: JobPaths, instance: str, total: int
) -> tuple[list[int], frozenset[bytes]]:
    """:func:`local_items`, and every owner the layout names, in one walk."""
    if not cache.exists(paths.sharding):
        return [], frozenset()
    get, item_instance = cache.get, paths.item_instance
    owners = [get(item_instance(i)) for i in range(total)]
    me = instance.encode()
    return [i for i, owner in enumerate(owners) if owner == me], frozenset(filter(None, owners))


def plan(
    cache: TreeCache,
    paths: JobPaths,
    total: int,
    assignment: dict[str, list[int]],
    since: bytes = b"",
    later: dict[int, bytes] | None = None,
) -> list[Op]:
    """The ops that make the registry hold ``assignment`` (flag deletions not included).
    An item node made here holds ``since``: the stamp (see
    :func:`shardcron.coordination.claims.stamp`) of the moment before the layout's first
    fire. An owner that dies before it ever claims the item leaves that stamp to the next
    owner, who records the fires it missed (:mod:`shardcron.coordination.inherited`).
    ``later``: the stamps of items that differ (see ``Resharder._since``)."""
    later = later or {}
    ops: list[Op] = [] if cache.exists(paths.sharding) else [Create(paths.sharding)]
    for instance, items in sorted(assignment.items()):
        for item in items:
            if not cache.exists(paths.item(item)):
                ops.append(Create(paths.item(item), later.get(item, since)))
            # Unchanged owners are not rewritten: every write wakes every instance.
            current = cache.get(paths.item_instance(item))
            if current is None:
                ops.append(Create(paths.item_instance(item), instance.encode()))
            elif current != instance.encode():
                ops.append(SetData(paths.item_instance(item), instance.encode()))
            # A misfire recorded for the old owner must not make the new one run twice.
            if cache.exists(paths.misfire(item)):
                ops.append(Delete(paths.misfire(item)))
    for name in cache.children(paths.sharding):
        if name.isdigit() and int(name) >= total:
            item = int(name)
            if cache.exists(paths.running(item)):
                # A run in flight keeps its claim until it completes; the sweep of
                # shardcron.coordination.healing removes the item node after that.
                keep = {"running"}
                ops += [
                    Delete(f"{paths.item(item)}/{child}")
                    for child in cache.children(paths.item(item))
                    if child not in keep and not cache.children(f"{paths.item(item)}/{child}")
                ]
            else:
                ops.extend(_delete_tree(cache, paths.item(item)))
    return ops


def _delete_tree(cache: TreeCache, path: str) -> list[Op]:
    ops: list[Op] = []
    for child in cache.children(path):
        ops.extend(_delete_tree(cache, f"{path}/{child}"))
    ops.append(Delete(path))
    return ops


def assign(
    paths: JobPaths, total: int, instances: list[str], strategy: Strategy
) -> dict[str, list[int]]:
    """The strategy's assignment, checked (a :class:`ShardingError` if it is unusable)."""
    try:
        assignment = strategy(order_instances(instances), paths.job, total)
    except Exception as exc:  # user code: the job must survive it and plan again
        raise ShardingError(f"sharding strategy failed: {exc!r}") from exc
    return _checked(assignment, instances, total)


class Resharding:
    """Writing ``assignment`` in one transaction, as a
    :class:`shardcron.coordination.groupcommit.Request`: ``processing`` is created and deleted in
    the same multi-op as the owners and the flag, so the new jobs of a process (or all its jobs
    after a membership change) reshard together in one round trip, and no fault can leave
    ``processing`` behind. Any refusal (another session sharding, a cache behind a concurrent
    change) fails it: the flag stays and the next fire plans again. ``fits`` is False when the
    layout needs several transactions; :func:`write` writes those."""

    def __init__(
        self,
        cache: TreeCache,
        paths: JobPaths,
        total: int,
        assignment: dict[str, list[int]],
        since: bytes = b"",
        later: dict[int, bytes] | None = None,
    ) -> None:
        self.assignment = assignment
        self._ops: list[Op] = [
            Create(paths.sharding_processing, ephemeral=True),
            *plan(cache, paths, total, assignment, since, later),
            Delete(paths.sharding_necessary),
            Delete(paths.sharding_processing),
        ]

    def fits(self, registry: Registry) -> bool:
        prefix = prefix_bytes(registry)
        return len(chunks(self._ops, prefix, LAYOUT_BYTES)) == 1

    def ops(self) -> list[Op]:
        return self._ops

    def applied(self, results: Sequence[object]) -> None:
        self._ops = []

    def refused(self, index: int, cause: RegistryError) -> bool:
        return False


def reshard(
    registry: Registry,
    cache: TreeCache,
    paths: JobPaths,
    total: int,
    instances: list[str],
    strategy: Strategy,
) -> dict[str, list[int]] | None:
    """Run the strategy and :func:`write` the result."""
    return write(registry, cache, paths, total, assign(paths, total, instances, strategy))


def write(
    registry: Registry,
    cache: TreeCache,
    paths: JobPaths,
    total: int,
    assignment: dict[str, list[int]],
    since: bytes = b"",
    later: dict[int, bytes] | None = None,
) -> dict[str, list[int]] | None:
    """Write ``assignment`` in as many transactions as it takes, under ``processing``;
    None if another session is sharding (or the cache was behind: the flag stays).
    ``since``: see :func:`plan`."""
    try:
        registry.create(paths.sharding_processing, ephemeral=True)
    except NodeExistsError:
        return None
    ops = plan(cache, paths, total, assignment, since, later)
    finish: list[Op] = [Delete(paths.sharding_necessary), Delete(paths.sharding_processing)]
    try:
        _commit_in_chunks(registry, ops, finish)
    except TransactionError as exc:
        # The cache lagged behind a concurrent change: the flag stays, so the next fire
        # plans again from a cache that has caught up.
        log.info("job %s: resharding raced a concurrent change (%s); retrying", paths.job, exc)
        registry.delete(paths.sharding_processing)
        return None
    except Exception:
        # Let the next fire (or the next leader) try again instead of blocking everyone.
        registry.delete(paths.sharding_processing)
        raise
    log.info("job %s: resharded %d items over %s", paths.job, total, sorted(assignment))
    return assignment


def _checked(
    assignment: dict[str, list[int]], instances: list[str], total: int
) -> dict[str, list[int]]:
    """A custom strategy's result must give every item to exactly one known instance."""
    given = sorted(i for items in assignment.values() for i in items)
    strangers = set(assignment) - set(instances)
    if given != list(range(total)) or strangers:
        raise ShardingError(
            f"sharding strategy gave items {given} to {sorted(assignment)}; it must assign "
            f"each of 0..{total - 1} exactly once to the available instances {sorted(instances)}"
        )
    return assignment


def chunks(ops: list[Op], prefix: int, limit: int) -> list[list[Op]]:
    """``ops`` cut, in order, into the fewest transactions of at most ``limit`` bytes."""
    found: list[list[Op]] = [[]]
    used = 0
    for op in ops:
        size = op_bytes(op, prefix)
        if found[-1] and used + size > limit:
            found.append([])
            used = 0
        found[-1].append(op)
        used += size
    return found


def _commit_in_chunks(registry: Registry, ops: list[Op], finish: list[Op]) -> None:
    """One chunk after the other. Sent together (twice measured), a 10,000-item layout
    over 50 instances was written 4-8 s sooner and ran its first complete fire later:
    flooded with watch events, its followers missed pings and reconnected. Each answer
    comes after its chunk's events on the leader's own session, so waiting for it paces
    the layout at the speed instances read it."""
    prefix = prefix_bytes(registry)
    room = LAYOUT_BYTES - sum(op_bytes(op, prefix) for op in finish)
    cut = chunks(ops, prefix, room)
    cut[-1] += finish  # the flags go with the last owners
    for chunk in cut:
        registry.transaction(chunk)


class _Fires(Protocol):
    @property
    def waiting(self) -> bool:
        """A fire waits for a resharding."""
        ...

    def count_changed(self) -> float | None:
        """When the config last changed (one read)."""
        ...

    def record_dropped(self, items: list[int]) -> None:
        """Record the fires nobody ran of ``items``, which a lowered count drops, up to
        the change (their stamps go with them)."""
        ...

    @property
    def first_fire(self) -> float:
        """The second of the first fire a layout written now is for: the one waiting for
        it, else the next one armed (now, if none is)."""
        ...

    def fired_before(self, second: float) -> float:
        """The second of the latest fire here before ``second`` (0: none)."""
        ...

    def run_pending(self) -> None:
        """Run the fire that waited for the resharding."""
        ...

    def written(self, share: list[int]) -> None:
        """A layout written here gives this instance ``share``."""
        ...


class _Heals(Protocol):
    def soon(self) -> None:
        """Sweep shortly."""
        ...


class ReshardedJob(JobState, Protocol):
    """What :class:`Resharder` needs of its job."""

    @property
    def joins(self) -> Joins: ...

    @property
    def firing(self) -> _Fires: ...

    @property
    def healer(self) -> _Heals: ...


class Resharder:
    """The leader's side of the protocol for one job on one instance (coordinator thread):
    plans a layout from its cache, writes it with the group commit (or in several
    transactions, :func:`write`) and waits for its cache to show it before planning anew."""

    def __init__(self, rt: ReshardedJob) -> None:
        self.rt = rt
        self._written: tuple[dict[int, str], float] | None = None  # last layout, when
        self._resharding = False  # a resharding is in the group commit
        self._planned: tuple[frozenset[str], int] | None = None  # the last layout's inputs
        self.first_layout = FirstLayout(rt.joins)
        self._falls: list[tuple[int, float]] = []  # (count, when) the count fell to it

    def reshard(self) -> None:
        rt = self.rt
        cache, paths = rt.cache, rt.paths
        available = membership.available_instances(cache, paths)
        if not available or self._resharding or is_processing(cache, paths):
            return
        if not has_sharding(cache, paths) and self._settling():
            return
        total = rt.config.sharding_total_count
        if self._written is not None:
            layout, at = self._written
            shown = all(
                owner(cache, paths, i) == holder
                for i, holder in layout.items()
                if i < total  # items beyond a lowered count are deleted, not shown
            )
            if not shown and rt.host.now() - at < LAYOUT_WAIT_SECONDS:
                return  # plan only from a cache that shows our last layout
            self._written = None
        strategy = resolve_strategy(rt.config.job_sharding_strategy_type)
        if not is_necessary(cache, paths):
            set_flag(rt.registry, paths)  # the commit deletes it: it must exist
        assignment = assign(paths, total, available, strategy)
        planned = (frozenset(available), total)
        since, later = self._since(total)
        request = Resharding(cache, paths, total, assignment, since, later)
        if not request.fits(rt.registry):
            written = write(rt.registry, cache, paths, total, assignment, since, later)
            if written is not None:
                self._resharded(written, planned)
            return
        self._resharding = True
        rt.commits.submit(request, lambda error: self._committed(request, planned, error))

    def count_fell(self, at: float, total: int) -> None:
        """The cache showed ``shardingTotalCount`` fall to ``total`` at ``at``: the items
        beyond it are recorded up to then when dropped, by whichever leader drops them
        (see _since)."""
        self._falls = [*self._falls[-15:], (total, at)]  # operator actions: a few

    def _since(self, total: int) -> tuple[bytes, dict[int, bytes]]:
        """The stamp of the item nodes a layout makes (see :func:`plan`): the moment before
        its first fire. Items a raised count adds have been due since the count grew (the
        config node's last write, or this instance's fire before this layout's if sooner:
        a pause may have hidden the raise; a record too many at most), and nobody ran
        them: from then. Items a lowered count drops take their stamps with them: the fires
        nobody ran of them, up to the change, are recorded here. A read or two, only when
        the count changed. An item a fall dropped, and a raise adds again, is stamped from
        no sooner than that fall: its fires before were recorded, or ran."""
        rt = self.rt
        first = rt.firing.first_fire
        cache, paths = rt.cache, rt.paths
        if not has_sharding(cache, paths):
            # A layout from nothing: the job's first, or after a loss of the registry's
            # data. The fires before the config was written again ran or were recorded by
            # their owners (or went with the data): a leader whose clock or waiting fire is
            # behind must not stamp them as nobody's. The registry's clock says when.
            since = first - claims.UNRUN_SECONDS
            return claims.stamp(max(since, rt.firing.count_changed() or since)), {}
        added = not all(cache.exists(paths.item(i)) for i in range(total))
        dropped = [
            int(name)
            for name in cache.children(paths.sharding)
            if name.isdigit() and int(name) >= total
        ]
        if not (added or dropped):
            return claims.stamp(first - claims.UNRUN_SECONDS), {}
        changed = rt.firing.count_changed()
        grown = min(first, changed or first)
        if before := rt.firing.fired_before(first):
            grown = min(grown, before)
        if dropped:
            rt.firing.record_dropped(dropped)
        since = (grown if added else first) - claims.UNRUN_SECONDS
        later = {}
        for i in range(total):
            fell = max((at for below, at in self._falls if i >= below), default=since)
            if fell > since and not cache.exists(paths.item(i)):
                later[i] = claims.stamp(fell)
        return claims.stamp(since), later

    def outdated(self) -> bool:
        """The last layout this leader wrote was planned for other instances or another
        item count than now, and no resharding is flagged or under way. A join or a count
        change seen while that layout was in flight found the flag still up, and the
        layout's commit then deleted it: the change would wait for the next one."""
        rt = self.rt
        if self._planned is None or self._resharding:
            return False
        if is_necessary(rt.cache, rt.paths) or is_processing(rt.cache, rt.paths):
            return False
        return self._inputs() != self._planned

    def _inputs(self) -> tuple[frozenset[str], int]:
        """What a layout planned now would be planned for: the instances, the count."""
        available = membership.available_instances(self.rt.cache, self.rt.paths)
        return frozenset(available), self.rt.config.sharding_total_count

    def _settling(self) -> bool:
        """The first layout waits for instances still joining; a fire waiting for it
        asks again when that wait is over."""
        wait = self.first_layout.wait(self.rt.host.now(), self.rt.firing.waiting)
        if wait > 0 and not self.first_layout.retry_armed:
            self.first_layout.retry_armed = True

            def again() -> None:
                self.first_layout.retry_armed = False
                self.rt.guarded(self.rt.firing.run_pending, "first layout")

            self.rt.host.call_later(wait, again)
        return wait > 0

    def _committed(
        self,
        request: Resharding,
        planned: tuple[frozenset[str], int],
        error: RegistryError | None,
    ) -> None:
        self._resharding = False
        if error is None:
            items = sum(len(items) for items in request.assignment.values())
            log.info(
                "job %s: resharded %d items over %s",
                self.rt.name,
                items,
                sorted(request.assignment),
            )
            self._resharded(request.assignment, planned)
            self.rt.firing.run_pending()  # unless the flag's removal, still on its way, does
        elif isinstance(error, TransactionError):
            # A cache behind a concurrent change, or another session sharding: the flag
            # stays, so the next fire plans again.
            log.info("job %s: resharding raced a concurrent change (%s)", self.rt.name, error)
        else:
            log.warning(
                "job %s: resharding failed (%s); the next fire retries", self.rt.name, error
            )

    def _resharded(
        self, assignment: dict[str, list[int]], planned: tuple[frozenset[str], int]
    ) -> None:
        rt = self.rt
        rt.reshard_due = False
        self._falls.clear()
        self._planned = planned

        if self._inputs() != planned:
            rt.healer.soon()  # an instance came or went meanwhile: flag again
        layout = {i: owner for owner, items in assignment.items() for i in items}
        rt.firing.written(assignment.get(rt.instance, []))
        self._written = (layout, rt.host.now())
        rt.emit(Resharded(job_name=rt.name, instance=rt.instance, assignment=assignment))
