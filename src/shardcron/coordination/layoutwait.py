"""A fire that waits for a resharding, and the first layout asked for ahead of any fire.

A fire due while resharding is pending (``leader/sharding/necessary``, or this instance
must reshard) does not hold a thread: it is kept here, one per job, and run once the
layout is in (:meth:`LayoutWait.run`, called when the flag goes), late but for its own
second. Two fires that wait together run as one, of the later second, on the items of
both; the earlier one's items are recorded as skipped for it, with no misfire re-run,
once the layout is in: its items are those the new layout gives this instance (a
raised count's new items have no owner before it). A fire due while the registry is
away joins the waiting one too.

Coordinator thread only, like the :class:`~shardcron.coordination.firing.Firing` it
belongs to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from shardcron.coordination import election, sharding
from shardcron.coordination.job import JobState
from shardcron.coordination.misfires import Misfires, MisfiresFiring
from shardcron.model import ExecutionSource

RESHARDING = "resharding in progress"


@dataclass(slots=True)
class Waiting:
    """A fire waiting for resharding to finish."""

    when: float
    source: ExecutionSource
    only: list[int] | None
    # The earlier fires merged into this one, recorded as skipped once the layout is in.
    earlier: list[tuple[float, ExecutionSource, list[int] | None]] = field(default_factory=list)


class WaitingJob(JobState, Protocol):
    """What :class:`LayoutWait` needs of its job."""

    @property
    def resharder(self) -> sharding.Resharder: ...


class WaitingFiring(MisfiresFiring, Protocol):
    """What :class:`LayoutWait` asks of its job's fire side."""

    @property
    def misfires(self) -> Misfires: ...

    @property
    def latest(self) -> float:
        """The second of the latest fire of the job's timer here."""
        ...


class LayoutWait:
    def __init__(self, rt: WaitingJob, firing: WaitingFiring) -> None:
        self.rt, self.firing = rt, firing
        self._waiting: Waiting | None = None
        self._layout_asked = False  # the first layout is due ahead of the first fire

    @property
    def waiting(self) -> bool:
        return self._waiting is not None

    @property
    def when(self) -> float | None:
        """The second of the fire that waits (None: none does)."""
        return None if self._waiting is None else self._waiting.when

    def clear(self) -> None:
        self._waiting = None

    def add(self, when: float, source: ExecutionSource, only: list[int] | None) -> None:
        """Have the fire of ``when`` wait, with the one waiting already."""
        fire, waiting = Waiting(when, source, only), self._waiting
        if waiting is not None:
            older, newer = (waiting, fire) if waiting.when <= fire.when else (fire, waiting)
            earlier = waiting.earlier
            if older.when != newer.when:  # the later fire runs its items: no misfire re-run
                earlier.append((older.when, older.source, older.only))
            both = None if older.only is None or newer.only is None else {*older.only, *newer.only}
            only = None if both is None else sorted(both)
            fire = Waiting(newer.when, newer.source, only, earlier)
        self._waiting = fire

    def run(self) -> None:
        """Reshard if this instance must and a fire waits (or a first layout goes ahead);
        run the waiting fire once the layout is in."""
        waiting, rt = self._waiting, self.rt
        if rt.reshard_due:
            # A cache that shows no leader yet is behind our own election, not a sign
            # that leadership moved on.
            leader = election.leader(rt.cache, rt.paths)
            if leader is not None and leader != rt.instance:
                rt.reshard_due = False  # the new leader reshards
            elif (
                leader == rt.instance
                and not rt.stopped
                and (waiting is not None or self._first_layout_ahead())
            ):
                rt.resharder.reshard()  # a fire waits for it, or a big first layout goes ahead of any
        if waiting is None or rt.stopped or rt.reshard_due:
            return
        if sharding.is_necessary(rt.cache, rt.paths):
            return
        self._waiting = None
        earlier = waiting.earlier
        if waiting.when < self.firing.latest:
            # A later fire came after the layout was in and ran these items: this one is
            # recorded, as one merged into it would have been.
            earlier = [*earlier, (waiting.when, waiting.source, waiting.only)]
        for when, source, only in earlier:
            items = self.firing.items.mine(only)
            skip = self.firing.misfires.skip
            skip(items, RESHARDING, when, misfire=False, source=source)
        if waiting.when < self.firing.latest:
            return
        # Late, for its own second: not for items another owner ran it for meanwhile.
        self.firing.fire(waiting.source, waiting.only, waiting.when, after_layout=True)

    def _first_layout_ahead(self) -> bool:
        """A first layout goes out ahead of the first fire, once the instances starting
        together have joined. One too big for one transaction goes as soon as they have:
        written at the first fire, it would hold that fire for the seconds it takes (and
        the fire of a rare job for hours). A small one goes when the fire's timer asks
        (:data:`~shardcron.coordination.firetimer.FIRST_LAYOUT_AHEAD_SECONDS` before the
        fire's claim): written with that claim, as in ElasticJob, the layouts of a herd
        of 10,000 jobs held their first fire for seconds."""
        rt = self.rt
        if sharding.has_sharding(rt.cache, rt.paths):
            return False
        total = rt.config.sharding_total_count
        return self._layout_asked or not sharding.first_layout_fits(
            rt.registry, rt.paths, total, rt.instance
        )

    def ask_ahead(self) -> None:
        """The timer: the first fire's claim is near enough to have its layout written."""
        self._layout_asked = True
        self.rt.guarded(self.run, "layout")
