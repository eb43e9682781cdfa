"""Skipped items and their one re-run, for one job on one instance; and the log lines
that repeat at every fire, throttled.

An item skipped at a fire (still running from the last one, or on another instance, a
resharding, a lost session) is *misfired*: recorded here at once and flagged in the
registry (``sharding/{i}/misfire``, as ElasticJob) with the tick's group commit. When
the run that held it ends, the item runs once more (source MISFIRE), however many fires
it missed, and never before the second of the latest fire it stands for (a fire claimed
ahead of its second may skip an item, still running on another instance say: re-run as
soon as that run ended, it would start early). Only the instance whose group commit
deletes the registry flag re-runs it; a flag only recorded here (monitorExecution off, or
a write that failed) is its own.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from shardcron.coordination import claims, sharding
from shardcron.coordination.events import ItemsSkipped, Observer
from shardcron.coordination.job import JobState
from shardcron.errors import RegistryError
from shardcron.model import ExecutionSource, item_ranges
from shardcron.registry import Create, Delete

if TYPE_CHECKING:
    from shardcron.coordination.inflight import Fire
    from shardcron.coordination.localitems import LocalItems

log = logging.getLogger(__name__)

# Why a fire skips items an earlier fire here holds (the log line, the ItemsSkipped event).
STILL_RUNNING = "still running from an earlier fire"
# Why a fire skips items of its share that failover holds: run elsewhere, or queued.
FAILED_OVER = "held by a failover run"
# Why a fire's items are skipped when the fire came more than a second late.
MISSED = "released late: the process was paused, or the wall clock stepped forward"
NOT_STARTED = (
    "not started yet in an earlier fire: it waits for a lane of the job or a thread of this worker"
)
COMPLETION_BEHIND = (
    "ended in an earlier fire whose completion is not through yet: this worker or the "
    "registry is behind"
)
# At most one line this often for what repeats at every fire (of every job, when overloaded).
REPEATED_LOG_SECONDS = 60.0


class MissedFires:
    """The warnings about fires that came too late to run, for a whole process: one line a
    minute at most, counting what it missed since the last. A stalled or overloaded
    process misses the fires of all its jobs at once; a line per job (thousands a minute
    on a worker of thousands of jobs) would add to the load that made them late."""

    def __init__(self) -> None:
        self._fires = 0
        self._jobs: set[str] = set()
        self._logged_at = -REPEATED_LOG_SECONDS

    def note(self, job: str, when: float, late: float, now: float) -> None:
        self._fires += 1
        self._jobs.add(job)
        if now - self._logged_at < REPEATED_LOG_SECONDS:
            return
        also = (
            f" ({self._fires} fires of {len(self._jobs)} job(s) missed since the last line: "
            "a stalled or overloaded process; if it recurs, spread the jobs over more workers)"
            if self._fires > 1
            else ""
        )
        log.warning("job %s: fire of %s missed by %.1fs%s", job, when, late, also)
        self._fires, self._jobs, self._logged_at = 0, set(), now


class RepeatedLines:
    """The lines that repeat at every fire, for a whole process: a job that outlasts its
    interval skips its items and runs them again at every fire. The first line of each
    kind is logged at once, then at most one a minute, which counts the lines left out
    and their jobs. An overloaded worker of 5,000 jobs logged 10,000 lines a minute with
    a minute per job and kind; the metrics and events still count every skip per job."""

    def __init__(self) -> None:
        # kind: (logged at, lines left out since, their jobs)
        self._said: dict[str, tuple[float, int, set[str]]] = {}

    def also(self, kind: str, job: str, now: float) -> str | None:
        """None: leave this line out. Otherwise log it, ending with the returned text,
        which counts the lines left out since the last one (empty if none)."""
        at, left_out, jobs = self._said.get(kind, (-REPEATED_LOG_SECONDS, 0, set()))
        if now - at < REPEATED_LOG_SECONDS:
            jobs.add(job)
            self._said[kind] = (at, left_out + 1, jobs)
            return None
        self._said[kind] = (now, 0, set())
        if not left_out:
            return ""
        return f" ({left_out} more of {len(jobs)} job(s) since the last such line)"


class MisfiredJob(JobState, Protocol):
    """What :class:`Misfires` needs of its job."""

    @property
    def observers(self) -> Sequence[Observer]: ...

    @property
    def repeated(self) -> RepeatedLines: ...


class MisfiresFiring(Protocol):
    """What :class:`Misfires` asks of its job's fire side
    (:class:`~shardcron.coordination.firing.Firing`)."""

    @property
    def items(self) -> LocalItems: ...

    def reserved(self, item: int) -> bool: ...

    def fire(
        self,
        source: ExecutionSource = ExecutionSource.NORMAL_TRIGGER,
        only: list[int] | None = None,
        start_at: float | None = None,
        trust_cache: bool = True,
        after_layout: bool = False,
    ) -> None: ...


class Misfires:
    """The misfired items of one job on one instance; runs on the coordinator thread, as
    its :class:`shardcron.coordination.firing.Firing`."""

    def __init__(self, rt: MisfiredJob, firing: MisfiresFiring) -> None:
        self.rt = rt
        self._firing = firing
        self._misfired: set[int] = set()  # local record, ahead of the registry flag
        # Flags written (or being written) by this instance and not taken yet, and flags
        # being taken: an item skipped tick after tick writes its flag once, and one flag
        # is deleted once. Each repeat would be refused by the registry, and a refused op
        # costs its whole group commit another round trip.
        self._flagged: set[int] = set()
        self._writing: set[int] = set()  # flags on their way to the registry
        self._taking: set[int] = set()
        self._not_before: dict[int, float] = {}  # the second of the latest fire skipped

    def has(self, item: int) -> bool:
        return item in self._misfired  # read from the event thread: a hint, healed if stale

    def note(self, item: int) -> None:
        self._misfired.add(item)

    def skip_held(
        self,
        items: list[int],
        fires: list[Fire],
        when: float,
        source: ExecutionSource = ExecutionSource.NORMAL_TRIGGER,
    ) -> None:
        """Skip ``items`` of the fire of ``when``: one of ``fires`` (in flight here) holds
        them. The reason says which of the job and the worker is behind: the earlier
        fire's runs may all have returned, their completion not through yet (the worker
        or the registry is behind), or an item may not have started (it waits for a lane
        or a thread); else the job's runs are still going."""
        if not items:
            return  # the common case, at every fire: nothing held
        why = _why_held(fires)
        by_reason: dict[str, list[int]] = {}
        for item in items:
            by_reason.setdefault(why.get(item, STILL_RUNNING), []).append(item)
        for reason, held in by_reason.items():
            self.skip(held, reason, when, source=source)

    def skip(
        self,
        items: Sequence[int],
        reason: str,
        when: float,
        misfire: bool = True,
        source: ExecutionSource = ExecutionSource.NORMAL_TRIGGER,
    ) -> None:
        """Skip ``items`` of the fire of second ``when`` (their re-run waits for it)."""
        if not items:
            return
        misfire = misfire and self.rt.config.misfire
        also = self.rt.repeated.also(reason, self.rt.name, self.rt.host.now())
        if also is not None:
            log.info(
                "job %s: items %s skipped: %s%s", self.rt.name, item_ranges(items), reason, also
            )
        if self.rt.observers:  # an overloaded worker skips thousands a second
            self.rt.emit(
                ItemsSkipped(
                    job_name=self.rt.name,
                    instance=self.rt.instance,
                    items=tuple(items),
                    reason=reason,
                    misfire=misfire,
                    fire_time=when,
                    source=source,
                )
            )
        if misfire:
            self._misfired.update(items)
            for item in items:
                self._not_before[item] = max(when, self._not_before.get(item, 0.0))
            unflagged = [i for i in items if i not in self._flagged]
            if unflagged and self.rt.config.monitor_execution and not self.rt.suspended:
                paths = self.rt.paths
                for part in claims.in_parts(
                    self.rt.registry, unflagged, lambda i: [Create(paths.misfire(i))]
                ):
                    self._flag(part)

    def _flag(self, items: list[int]) -> None:
        request = claims.MarkingMisfires(self.rt.cache, self.rt.paths, items)
        self._flagged.update(items)
        self._writing.update(items)

        def then(error: RegistryError | None) -> None:
            self._writing.difference_update(items)
            if error is not None:  # the local record re-runs them all the same
                self._flagged.difference_update(items)
                log.info("job %s: misfire flags not written (%s)", self.rt.name, error)

        self.rt.commits.submit(request, then)

    def rerun(self, items: list[int]) -> None:
        if (
            not self.rt.config.misfire
            or self.rt.stopped
            or self.rt.suspended
            or self.rt.reshard_due
        ):
            return
        cache, paths = self.rt.cache, self.rt.paths
        if sharding.is_necessary(cache, paths):
            return
        flagged = set(claims.misfired(cache, paths, items)) | (self._misfired & set(items))
        if not flagged:
            return  # every completion asks: the walk below is for the few that misfired
        mine = set(self._firing.items.mine())
        ready = sorted(
            i
            for i in flagged & mine
            if not self._firing.reserved(i)
            and i not in self._taking
            # A flag still on its way would be there after this re-run, and run it again.
            and i not in self._writing
            and not cache.exists(paths.running(i))
        )
        if not ready:
            return
        # Only the path that deletes the registry flag re-runs the item; a flag that exists
        # only here (monitorExecution off, or a write that failed) is ours. A flag this
        # instance wrote is in the registry even before its cache shows it.
        monitored = self.rt.config.monitor_execution
        flags = [
            i for i in ready if monitored and (i in self._flagged or cache.exists(paths.misfire(i)))
        ]
        ours = [i for i in ready if i not in flags]
        self._misfired.difference_update(ready)
        self._flagged.difference_update(ready)
        delete = claims.in_parts(self.rt.registry, flags, lambda i: [Delete(paths.misfire(i))])
        for n, part in enumerate(delete or [[]]):
            self._take(part, ours if n == 0 else [])

    def _take(self, flags: list[int], ours: list[int]) -> None:
        """Delete the registry's ``flags``, then re-run them and ``ours``."""
        request = claims.TakingMisfires(self.rt.paths, flags)
        self._taking.update(flags)

        def then(error: RegistryError | None) -> None:
            self._taking.difference_update(flags)
            if error is not None:
                self._misfired.update(flags)  # outcome unknown: the local record re-runs them
            taken = ours + ([] if error else request.taken)
            self.rt.guarded(lambda: self._rerun(taken), "misfire")

        self.rt.commits.submit(request, then)

    def _rerun(self, items: list[int]) -> None:
        not_before = max((self._not_before.pop(i, 0.0) for i in items), default=0.0)
        # An item claimed meanwhile runs again already: that run covers the missed fire.
        items = sorted(i for i in items if not self._firing.reserved(i))
        if items and not self.rt.stopped:
            now = self.rt.host.now()
            also = self.rt.repeated.also("misfired", self.rt.name, now)
            if also is not None:
                log.info(
                    "job %s: running misfired items %s%s", self.rt.name, item_ranges(items), also
                )
            # Claimed now, run at the second of the latest fire it stands for, or at once if
            # that has passed: either way the run names that fire (ctx.scheduled_fire_time).
            # None known (a flag written by another process): the run names its own start.
            self._firing.fire(ExecutionSource.MISFIRE, only=items, start_at=not_before or None)


def _why_held(fires: list[Fire]) -> dict[int, str]:
    """Why each item of ``fires`` would be skipped, in one pass over them (a fire may
    hold thousands of items). Workers add to a fire's ``started`` and ``returned`` as its
    items start and return."""
    why: dict[int, str] = {}
    for fire in fires:
        ended = set(fire.items).issubset(fire.returned)
        for item in fire.items:
            if ended:
                why.setdefault(item, COMPLETION_BEHIND)
            else:
                why.setdefault(item, STILL_RUNNING if item in fire.started else NOT_STARTED)
    return why
