"""Which of a job's items this instance fires, read from the job's cache.

:class:`LocalItems` belongs to a :class:`shardcron.coordination.firing.Firing` and runs on the
coordinator thread only. Its share of the layout is read at every fire, heal and timer
arming, a walk over all the job's items: it is kept while the cache shows the same values
(their version, read before the walk, says so; the claims of every fire change only
flags, not values). What a fire claims is that share less the items disabled, failed
over to another instance or queued for failover, and nothing while this server is
disabled or its instance node is gone.

When the share grows, the items gained are kept as *inherited* until the next fire of
this instance's own asks for them (:mod:`shardcron.coordination.inherited`): their owner
before may have died, stopped, been cut off, or handled a fire with the layout before.
The first layout read here gains nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardcron.coordination import failover, membership, sharding

if TYPE_CHECKING:
    from shardcron.coordination.job import JobState

# Why a fire runs none of this instance's share (its items are recorded skipped for it).
DISABLED = "this instance's server is disabled"
UNREGISTERED = "this instance is not registered (a new session): registering again"

_NOT_READ: tuple[tuple[int, int], tuple[int, ...], bool] = ((-1, -1), (), False)


class LocalItems:
    def __init__(self, rt: JobState) -> None:
        self.rt = rt
        self._read = _NOT_READ  # (cache values version, count), items, server enabled
        self._instance_node = rt.paths.instance(rt.instance)
        self._owners: frozenset[bytes] = frozenset()  # those of the layout last read
        self._inherited: set[int] = set()
        self._owner_left = False

    def take_inherited(self, items: list[int]) -> list[int]:
        """Those of ``items`` gained from a layout an owner had left, once each."""
        self._layout()
        if not self._inherited:
            return []
        taken = [i for i in items if i in self._inherited]
        self._inherited.difference_update(items)
        return taken

    def give_back(self, items: list[int]) -> None:
        """Items taken by :meth:`take_inherited` whose read failed: the next fire asks."""
        self._inherited.update(items)

    def take_owner_left(self) -> bool:
        """Whether an owner left the layout since this was last asked."""
        self._layout()
        left, self._owner_left = self._owner_left, False
        return left

    def written(self, share: list[int]) -> None:
        """A layout this instance (the leader) wrote gives it ``share``. Its cache may never
        show that layout (behind, it may show the next one first): the items a later read
        shows here but that one gave another are gained all the same, as if read."""
        kept = set(self._layout()[0]).intersection(share)
        if self._owners:  # the first layout read here gains nothing
            self._read = (_NOT_READ[0], tuple(sorted(kept)), self._read[2])

    def mine(self, only: list[int] | None = None) -> list[int]:
        """This instance's share of the layout (those of ``only``, if given)."""
        items = self._layout()[0]
        if only is None:
            return list(items)
        wanted = set(only)
        return [i for i in items if i in wanted]

    @property
    def count(self) -> int:
        """How many items this instance has (read at every fire's arming: no copy)."""
        return len(self._layout()[0])

    def barred(self) -> str | None:
        """Why this instance fires none of its share now: its server is disabled, or its
        instance node is gone (a new session, not registered again yet). None: it fires
        it. Until the leader's next layout nobody else fires these items."""
        if not self._layout()[1]:
            return DISABLED
        if not self.rt.cache.exists(self._instance_node):
            return UNREGISTERED
        return None

    def to_fire(self, only: list[int] | None) -> tuple[list[int], list[int]]:
        """The items a fire here claims (of ``only``, if given), and those of its share
        that failover holds: run elsewhere as a failover run, or queued for one. The fire
        skips these, and records it. The caller has checked :meth:`barred` first."""
        cache, paths, cfg = self.rt.cache, self.rt.paths, self.rt.config
        mine = self._layout()[0]
        if only is not None:
            wanted = set(only)
            mine = tuple(i for i in mine if i in wanted)
        items = [i for i in mine if not cache.exists(paths.disabled(i))]
        if not cfg.failover:
            return items, []
        taken = failover.items_failed_over_elsewhere(cache, paths, items)
        taken |= set(failover.queued(cache, paths))
        return [i for i in items if i not in taken], [i for i in items if i in taken]

    def _layout(self) -> tuple[tuple[int, ...], bool]:
        cache, paths, total = self.rt.cache, self.rt.paths, self.rt.config.sharding_total_count
        key = (cache.values_version, total)
        if key != self._read[0]:
            mine, owners = sharding.local_items_and_owners(cache, paths, self.rt.instance, total)
            enabled = membership.server_enabled(cache, paths, self.rt.ip)
            if self._owners:  # the first layout read here gains nothing
                live = {name.encode() for name in cache.children(paths.instances)}
                if not self._owners.issubset(live):
                    self._owner_left = True
                # Any gain: its owner before may have been cut off, or have handled the
                # fire with the layout before this one (it fired ahead of the new layout).
                self._inherited.update(set(mine).difference(self._read[1]))
            self._read = (key, tuple(mine), enabled)
            if owners:
                # A read with no layout at all (the registry lost its data, and the new
                # layout is not in yet) is no first read: what the next one gives is gained.
                self._owners = owners
        return self._read[1], self._read[2]
