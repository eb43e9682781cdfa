"""How long before its second a fire claims its items: the claim lead of one process.

A fire's items start on the second only if the claim's answer is back, and the fire
staged, before it. How long that takes grows with the jobs of the process due in the
same tick (their claims share one group commit and one coordinator) and with the
machine: 10,000 jobs due together took some 2 s on one machine and 4 s on a machine half
as fast. So the lead is the larger of two figures:

* an estimate from the number of jobs, capped at :data:`MAX_ESTIMATE_SECONDS`;
* what the process learned: each claim reports how long it took from the moment it was
  asked for to its fire being ready (staged, or started if its second has passed), and
  the lead keeps room for the longest (:data:`MARGIN`). That figure halves every
  :data:`HALF_LIFE_SECONDS` unless a claim takes as long again. Where it is the larger
  and over :data:`SMALL_SECONDS`, it is rounded up to :data:`STEP_SECONDS`, so that the
  jobs of one tick, armed a moment apart while it decays, still share a lead and a group
  commit (below, the fire path's own 25 ms step does).

What it learns is timed, and decays, on the host's monotonic clock: on the wall clock, a
step back of an hour would multiply the lead by 64 (its decay run backwards), and a step
forward while a claim is in flight would be learned as a claim that long. Only the
coordinator thread calls it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

from shardcron.registry import SessionState

LEAD_SECONDS = 0.04
# What claiming one more job's items in the same tick costs, CPU and registry time, with
# room to spare (measured: 0.1 to 0.25 ms, by machine); 10,000 jobs due together claim
# 4 s ahead. A process's first herd has no learned lead: with 2 s, a machine half as fast
# as the one that took 2 s started that herd's items up to 1.3-2.8 s late in 4 runs of 12.
PER_JOB_SECONDS = 0.0004
MAX_ESTIMATE_SECONDS = 4.0
# Up to this, a learned lead is kept as it is (a small process's items may run long: a
# coarse step would claim them early); past it, rounded up to STEP_SECONDS. It is also the
# lead a fire keeps while it waits for an item of its job's last fire (firetimer).
SMALL_SECONDS = 2.0
MARGIN = 1.25
HALF_LIFE_SECONDS = 600.0
STEP_SECONDS = 0.5
GROWTH_SECONDS = 0.1
# Items claimed ahead show as running; a lead is never longer than this (and the fire path
# keeps it under half the time since the job's last fire).
MAX_LEAD_SECONDS = 10.0


class Clocks(Protocol):
    """What the lead reads of its :class:`~shardcron.coordination.host.Host`."""

    def monotonic(self) -> float: ...


class ClaimLead:
    def __init__(self, jobs: Callable[[], int], host: Clocks) -> None:
        self.jobs = jobs  # the process's jobs
        self._clock = host.monotonic
        self._learned = 0.0
        self._learned_at = 0.0
        self._connected_at = 0.0

    def __call__(self) -> float:
        estimate = min(MAX_ESTIMATE_SECONDS, LEAD_SECONDS + PER_JOB_SECONDS * self.jobs())
        learned = self._decayed(self._clock())
        if learned <= estimate:
            return estimate
        if learned <= SMALL_SECONDS:
            return learned
        return min(MAX_LEAD_SECONDS, math.ceil(learned / STEP_SECONDS) * STEP_SECONDS)

    def took(self, asked: float) -> bool:
        """A fire is ready, its claim asked for at ``asked`` (on the host's monotonic
        clock); True if the lead grew by :data:`GROWTH_SECONDS` or more (the fires armed
        already should claim earlier: a pass over every job, not worth a few
        milliseconds)."""
        now = self._clock()
        if asked < self._connected_at:
            return False  # asked before the registry came back: it timed the outage
        wanted = (now - asked) * MARGIN
        if wanted <= self._decayed(now):
            return False
        before = self()
        self._learned, self._learned_at = wanted, now
        return self() >= before + GROWTH_SECONDS

    def session(self, state: SessionState) -> None:
        """The process's registry session changed (on the coordinator, as the claims'
        answers are)."""
        if state in (SessionState.CONNECTED, SessionState.RECONNECTED):
            # Claims asked before now waited for the connection, and teach nothing:
            # learned, an outage of a second would have every-second jobs claim half a
            # second ahead for many minutes.
            self._connected_at = self._clock()
        elif state in (SessionState.SUSPENDED, SessionState.EXPIRED):
            # Until it is back, answers come from requests that waited for it (an answer
            # may reach the coordinator before the reconnection does).
            self._connected_at = math.inf

    def _decayed(self, now: float) -> float:
        return self._learned * math.pow(0.5, (now - self._learned_at) / HALF_LIFE_SECONDS)
