"""The invariants a seed must keep, checked against its :class:`Ledger`.

Terms:

* An **item-fire** is one item of one job at one fire time ``t`` of its cron, for items
  ``0 .. shardingTotalCount-1`` as the registry's config held them at ``t``.
* An instance is **live and enabled** for a job at ``t`` when its process runs (not
  killed, not stalled), its runtime for the job is not stopping, its session is
  connected, its ``instances/{id}`` node exists and its ``servers/{ip}`` is ENABLED. The
  world samples this at every fire time (``Probe``).
* A **disturbance** is any injected fault (lost request, outage, expiry, cache lag, slow
  answers, crash, stall) or operator action, and the moments their effects end (a
  reconnect, a resume, the end of a lag, a clean exit after a graceful stop). Its
  **shadow** is ``[d - period, d + session timeout + 2 periods]``: the time a fault may
  take to be seen (a session ends only after the timeout), repaired by the sweep (every
  ``HEAL_SECONDS``) and settled by the next fires.
  An item-fire inside a shadow is expected to be re-run by failover (failover on) or
  skipped/misfired (failover off); which one is not asserted there, only I1 is.

I1 (checked on every run start, settled when the older run ends): no item runs on two
instances at overlapping times, unless the session that made the older run's claim
ended where its holder could not act on it (while the item ran: an outage or a stall
past the session timeout; or before the item started, while its holder was stalled
since the claim), its ``ctx.claim_is_current()`` was false when it ended, and its
``ctx.fencing_token`` is lower than the newer run's. A run started by a holder that
had already been told its session ended is never excused.

I2 (every item-fire outside every shadow, while a live enabled instance exists): the
item starts a run in ``[t - 0.1, t + period)``, or a run of it is in progress at ``t``,
or it is recorded skipped (``ItemsSkipped``) with a reason in that window. With misfire
on, a skipped item starts a run once it can: within one period and a half after the fire
that kept it busy ended (a fire holds all its items until its last one returns), or
after the skip if nothing kept it busy; unless a shadow covers that span.

I3 (from the *quiet time*: the last disturbance, or the end of the last long item if
later, + session timeout + 2 periods; to the end): every item-fire starts a run in ``[t - 0.1, t +
period)`` whenever a live enabled instance exists; skips do not count. A job that stops firing
fails this.

I4 (at the end, just after a fire, when no item should still run, for every job that
still has a live enabled instance to repair it): no ``running`` without an open run of
its holder, no ``failover``/``failovering`` without a running failover run, no
``leader/failover/items/*`` and no ``leader/sharding/processing``.

I5 (at the end, for every job with a live enabled instance): the layout gives items
only to live enabled instances and, as ``AVG_ALLOCATION`` does when there are at least
as many items as instances, an item to each of them. A join or a leave seen while a
layout was in flight must not leave the old layout in place for good.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass, field

from shardcron.coordination.paths import JobPaths
from shardcron.model import ExecutionSource
from shardcron.simulation.ledger import Ledger, Run

EARLY = 0.1  # a fire's items are claimed (and may start) this much before it at most


@dataclass(slots=True)
class Probe:
    """One fire time of one job, as the world saw it then."""

    at: float
    total: int
    available: bool


@dataclass
class JobTrack:
    job: str
    period: float
    probes: list[Probe] = field(default_factory=list)


@dataclass
class Verdict:
    violations: list[str] = field(default_factory=list)
    item_fires: int = 0


def check_overlaps(ledger: Ledger) -> list[str]:
    """I1 over every overlap whose older run has ended (all of them at the end)."""
    found = []
    for older, newer in ledger.overlaps:
        if older.end is None:
            continue
        allowed = (
            older.session_lost and not older.current and older.token < newer.token
        ) and older.instance != newer.instance
        if not allowed:
            found.append(
                f"I1 {older.job}#{older.item}: {older.instance} [{older.start:.2f}, "
                f"{older.end:.2f}] token {older.token} current={older.current} "
                f"session_lost={older.session_lost} overlaps {newer.instance} from "
                f"{newer.start:.2f} token {newer.token}"
            )
    return found


class _Index:
    """Runs and skips of one item, sorted by time, for window queries."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.runs: list[Run] = []
        self.skips: list[float] = []

    def started_in(self, lo: float, hi: float) -> bool:
        n = bisect.bisect_left(self.starts, lo)
        return n < len(self.starts) and self.starts[n] < hi

    def in_progress(self, t: float) -> Run | None:
        for run in self.runs:
            if run.start < t and (run.end is None or run.end > t):
                return run
            if run.start >= t:
                return None
        return None

    def skipped_in(self, lo: float, hi: float) -> bool:
        n = bisect.bisect_left(self.skips, lo)
        return n < len(self.skips) and self.skips[n] < hi


def _index(ledger: Ledger) -> dict[tuple[str, int], _Index]:
    index: dict[tuple[str, int], _Index] = {}
    for run in ledger.runs:  # appended in start order
        entry = index.setdefault((run.job, run.item), _Index())
        entry.starts.append(run.start)
        entry.runs.append(run)
    for skip in ledger.skips:
        for item in skip.items:
            index.setdefault((skip.job, item), _Index()).skips.append(skip.at)
    return index


def check(
    ledger: Ledger,
    tracks: list[JobTrack],
    session_timeout: float,
    end: float,
    quiet: float,
) -> Verdict:
    """I1 to I3 over the whole seed (I4: :func:`check_registry`)."""
    verdict = Verdict(check_overlaps(ledger))
    index = _index(ledger)
    empty = _Index()
    shadows = sorted(ledger.disturbances)
    for track in tracks:
        period = track.period
        for probe in track.probes:
            t = probe.at
            if t + period > end or not probe.available:
                continue
            n = bisect.bisect_left(shadows, t - session_timeout - 2 * period)
            shadowed = n < len(shadows) and shadows[n] <= t + period
            for item in range(probe.total):
                entry = index.get((track.job, item), empty)
                ran = entry.started_in(t - EARLY, t + period)
                if t >= quiet:
                    verdict.item_fires += 1
                    if not ran:
                        verdict.violations.append(
                            f"I3 {track.job}#{item}: fire at {t:.2f} (after quiet time "
                            f"{quiet:.2f}) did not run"
                        )
                elif not shadowed:
                    verdict.item_fires += 1
                    if not (
                        ran
                        or entry.in_progress(t) is not None
                        or entry.skipped_in(t - EARLY, t + period)
                    ):
                        verdict.violations.append(
                            f"I2 {track.job}#{item}: fire at {t:.2f} neither ran nor was skipped"
                        )
    verdict.violations += _misfires(ledger, index, shadows, session_timeout, tracks)
    return verdict


def _misfires(
    ledger: Ledger,
    index: dict[tuple[str, int], _Index],
    shadows: list[float],
    session_timeout: float,
    tracks: list[JobTrack],
) -> list[str]:
    periods = {track.job: track.period for track in tracks}
    fire_ends: dict[tuple[str, int], float | None] = {}
    for run in ledger.runs:  # a fire holds all its items until its last one returns
        key = (run.instance, run.token)
        end = fire_ends.get(key, run.end)
        fire_ends[key] = None if end is None or run.end is None else max(end, run.end)
    found = []
    for skip in ledger.skips:
        if not skip.misfire:
            continue
        period = periods[skip.job]
        for item in skip.items:
            entry = index[(skip.job, item)]
            before = [run for run in entry.runs if run.start <= skip.at]
            until = fire_ends[(before[-1].instance, before[-1].token)] if before else skip.at
            if until is None:
                continue  # still busy at the end: I4 and I3 speak for it
            deadline = max(until, skip.at) + 1.5 * period
            # A disturbance from before the skip up to the deadline may delay the re-run.
            n = bisect.bisect_left(shadows, skip.at - session_timeout - 2 * period)
            if n < len(shadows) and shadows[n] <= deadline:
                continue
            if not entry.started_in(skip.at, deadline):
                found.append(
                    f"I2 {skip.job}#{item}: skipped at {skip.at:.2f} ({skip.reason}) with "
                    "misfire on, and not run once it could"
                )
    return found


def check_registry(
    ledger: Ledger,
    jobs: list[str],
    peek: Callable[[str], bytes | None],
    children: Callable[[str], list[str]],
    ahead: Callable[[str, str, int], bool],
) -> list[str]:
    """I4: no claim, failover or resharding node outlives what it stands for. A claim its
    holder made ahead of a fire still to come (``ahead(job, holder, item)``) stands for
    that fire."""
    found = []
    open_runs = {(r.job, r.item, r.instance): r for r in ledger.open_runs()}
    for job in jobs:
        paths = JobPaths(job)
        for name in children(paths.sharding):
            if not name.isdigit():
                continue
            item = int(name)
            holder = peek(paths.running(item))
            run = None if holder is None else open_runs.get((job, item, holder.decode()))
            if holder is not None and run is None and not ahead(job, holder.decode(), item):
                found.append(f"I4 {job}#{item}: stale running node (holder {holder.decode()})")
            for leaf in (paths.failover(item), paths.failovering(item)):
                if peek(leaf) is not None and (
                    run is None or run.source is not ExecutionSource.FAILOVER
                ):
                    found.append(f"I4 {job}#{item}: stale {leaf.rsplit('/', 1)[1]} node")
        for name in children(paths.failover_items):
            found.append(f"I4 {job}: failover queue entry {name} left")
        if peek(paths.sharding_processing) is not None:
            found.append(f"I4 {job}: leader/sharding/processing left")
    return found


def check_layouts(
    available: dict[str, set[str]], totals: dict[str, int], peek: Callable[[str], bytes | None]
) -> list[str]:
    """I5: every job's layout is spread over exactly its live enabled instances."""
    found = []
    for job, names in available.items():
        if not names:
            continue
        paths = JobPaths(job)
        total = totals[job]
        values = {peek(paths.item_instance(i)) for i in range(total)}
        if None in values:
            found.append(f"I5 {job}: items without an owner")
        owners = {value.decode() for value in values if value is not None}
        if strangers := sorted(owners - names):
            found.append(f"I5 {job}: items owned by {strangers}, not live enabled instances")
        if total >= len(names) and (idle := sorted(names - owners)):
            found.append(f"I5 {job}: live enabled instances {idle} own no item")
    return found
