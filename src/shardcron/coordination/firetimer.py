"""The timer of one job's fires: when each fire's claim goes out.

A job's next fire is armed from its trigger. Its claim goes out a lead ahead of the
second: the process's lead (:mod:`shardcron.coordination.claimlead`), plus a little per item, never
earlier than half the time since the job's last fire (its items would still be running:
one fire follows a run, the ones after it are skipped). When the process's lead grows,
the armed fire is moved earlier (:meth:`FireTimer.relead`). A fire released more than
:data:`MAX_LATENESS_SECONDS` late is missed, not run. A job without a layout yet has it
asked for :data:`FIRST_LAYOUT_AHEAD_SECONDS` before its first fire's claim (at once if
that is sooner, unless the claim is under :data:`MIN_LAYOUT_AHEAD_SECONDS` away).

Coordinator thread only, like the :class:`~shardcron.coordination.firing.Firing` it belongs to.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

from shardcron.coordination import sharding
from shardcron.coordination.job import JobState
from shardcron.coordination.misfires import MisfiresFiring, MissedFires

if TYPE_CHECKING:
    from shardcron.schedule.trigger import CronTrigger

# A fire the timer releases this late is not run: it was missed (a stall, a clock jump),
# not late. A fire that is late only because the coordinator works through the other
# fires of its tick (a herd of thousands of jobs due in one second) runs late instead.
MAX_LATENESS_SECONDS = 1.0
CLAIM_LEAD_PER_ITEM_SECONDS = 0.003
CLAIM_LEAD_STEP_SECONDS = 0.025
FIRST_LAYOUT_AHEAD_SECONDS = 5.0
# A first layout waits a quiet second after it is asked for (sharding.FirstLayout): asked
# for a fire whose claim is sooner, it would not be out before the claim anyway.
MIN_LAYOUT_AHEAD_SECONDS = 1.5


class TimedJob(JobState, Protocol):
    """What :class:`FireTimer` needs of its job."""

    @property
    def trigger(self) -> CronTrigger | None: ...

    @property
    def missed(self) -> MissedFires: ...

    @property
    def lead(self) -> Callable[[], float]:
        """How long before a fire its items are claimed."""
        ...


class TimerFiring(MisfiresFiring, Protocol):
    """What :class:`FireTimer` asks of its job's fire side
    (:class:`~shardcron.coordination.firing.Firing`)."""

    def ask_layout_ahead(self) -> None:
        """Have the first layout written ahead of the first fire."""
        ...

    def missed(self, when: float) -> None:
        """The fire of ``when`` was released too late to run: record its items skipped."""
        ...


class FireTimer:
    def __init__(self, rt: TimedJob, firing: TimerFiring) -> None:
        self.firing = firing
        self.rt = rt
        self._token = 0  # bumped to cancel the armed fire
        # The armed fire's second (None: none armed), the fire before it, and its claim
        # lead: attributes, not a tuple, as every job re-arms every fire (see _set).
        self._when: float | None = None
        self._after: float | None = None
        self._lead_armed = 0.0

    def cancel(self) -> None:
        self._token += 1

    def arm(self, after: float | None = None) -> None:
        """Arm the timer for the first fire after ``after`` (default: now); the one armed
        before is cancelled."""
        self._token += 1
        self._when = None
        if self.rt.trigger is None or self.rt.stopped:
            return
        now = self.rt.host.now()
        start = now if after is None else max(after, now - MAX_LATENESS_SECONDS)
        if after is not None and start > after:
            self._note_dropped(self.rt.trigger, after, start, now)
        moment = self.rt.trigger.next_fire(datetime.fromtimestamp(start, UTC))
        if moment is None:
            return
        when = moment.timestamp()
        lead = self._lead(when, after)
        self._when, self._after, self._lead_armed = when, after, lead
        self._set(when, lead)
        claim_in = when - lead - now
        if claim_in > MIN_LAYOUT_AHEAD_SECONDS and not sharding.has_sharding(
            self.rt.cache, self.rt.paths
        ):
            # A first fire whose claim is far enough away: its layout is asked for ahead
            # of it (a claim sooner than that has the fire write it, as in ElasticJob).
            ahead = max(0.0, claim_in - FIRST_LAYOUT_AHEAD_SECONDS)
            self.rt.host.call_later(ahead, self.firing.ask_layout_ahead)

    @property
    def armed(self) -> float | None:
        """The second of the armed fire (None: none armed)."""
        return self._when

    def next_claim(self) -> float | None:
        """When the armed fire claims its items (None: no fire armed)."""
        if self._when is None:
            return None
        return self._when - self._lead_armed

    def relead(self) -> None:
        """The process's claim lead grew: the armed fire claims that much earlier, unless
        its lead is capped by the time since its last fire."""
        when = self._when
        if when is None or self.rt.stopped:
            return
        longer = self._lead(when, self._after)
        if longer > self._lead_armed:
            self._token += 1
            self._lead_armed = longer
            self._set(when, longer)

    def _lead(self, when: float, after: float | None) -> float:
        # The claim's answer comes after the watch events of its own writes, which grow with
        # the items claimed: the lead grows with them too (items still start on the second).
        # Rounded up to a step, so jobs of a process with a few items more or less claim in
        # the same tick, with one group commit.
        lead = self.rt.lead() + CLAIM_LEAD_PER_ITEM_SECONDS * self.firing.items.count
        lead = math.ceil(lead / CLAIM_LEAD_STEP_SECONDS) * CLAIM_LEAD_STEP_SECONDS
        if after is not None:
            # Not before the previous fire is half an interval old: its items would still
            # be running, and only one fire follows a run (Firing._follow).
            lead = min(lead, (when - after) / 2)
        return lead

    def _set(self, when: float, lead: float) -> None:
        # A partial, not a closure: one job's armed fire is three objects for the garbage
        # collector to scan instead of five, and a worker of thousands of jobs re-arms
        # thousands of them a second.
        # At a wall-clock time: after a step back of the clock, the fire waits for its
        # second to come again instead of running a second time.
        self.rt.host.call_at(when - lead, functools.partial(self._due, self._token, when))

    def _due(self, token: int, when: float) -> None:
        if token != self._token:
            return
        late = self.rt.host.released() - when
        # The next fire is armed first: whatever this one does or fails at, the job keeps
        # its next fire, released on time even if this one holds the coordinator for
        # seconds (a leader writing a big first layout); armed after, it would start from
        # the moment this one returned and drop the fires before it.
        self.arm(after=when)
        if late <= MAX_LATENESS_SECONDS:
            self.rt.guarded(lambda: self.firing.fire(start_at=when), "fire")
        else:
            self.rt.missed.note(self.rt.name, when, late, self.rt.host.now())
            self.rt.guarded(lambda: self.firing.missed(when), "missed fire")

    def _note_dropped(self, trigger: CronTrigger, after: float, start: float, now: float) -> None:
        """The fires after ``after`` up to ``start`` are not run: this job's last fire ran
        more than a second late (an overload, a stall). They count as missed, the first
        60 of them (a clock jump of hours would otherwise cost a walk over every second)."""
        moment = trigger.next_fire(datetime.fromtimestamp(after, UTC))
        for _ in range(60):
            if moment is None or moment.timestamp() > start:
                return
            when = moment.timestamp()
            self.rt.missed.note(self.rt.name, when, now - when, now)
            self.rt.guarded(lambda when=when: self.firing.missed(when), "missed fire")  # type: ignore[misc]
            moment = trigger.next_fire(moment)
