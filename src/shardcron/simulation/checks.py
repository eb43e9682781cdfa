"""The invariants a seed must keep, checked against its :class:`Ledger`.

Terms:

* An **item-fire** is one item of one job at one fire time ``t`` of its cron, for items
  ``0 .. shardingTotalCount-1`` as the registry's config held them at ``t``.
* An instance is **live and enabled** for a job at ``t`` when its process runs (not
  killed, not stalled), its runtime for the job is not stopping, its session is
  connected, its ``instances/{id}`` node exists and its ``servers/{ip}`` is ENABLED. The
  world samples this at every fire time (``Probe``).
* A **disturbance** is any injected fault (lost request, outage, expiry, cache lag, slow
  answers, crash, stall, a step of an instance's wall clock) or operator action, and the moments their effects end (a
  reconnect, a resume, the end of a lag, a clean exit after a graceful stop). Its
  **shadow** is ``[d - period, d + session timeout + 2 periods]``: the time a fault may
  take to be seen (a session ends only after the timeout), repaired by the sweep (every
  ``HEAL_SECONDS``) and settled by the next fires. Only how soon a misfired item runs
  again is left unjudged there (I2's last sentence); the per-kind tally counts the
  item-fires in each kind's shadow.

I1 (checked on every run start, settled when the older run ends): no item runs on two
instances at overlapping times, unless the session that made the older run's claim
ended where its holder could not act on it (while the item ran: an outage or a stall
past the session timeout; or before the item started, while its holder was stalled
since the claim), its ``ctx.claim_is_current()`` was false when it ended, and its
``ctx.fencing_token`` is lower than the newer run's (or the registry lost its data, and
the tokens started over, between them). A run started by a holder that
had already been told its session ended is never excused.

I2 (every item-fire, matched to what became of it): the runs for that fire (source
NORMAL_TRIGGER, ``ctx.scheduled_fire_time`` equal to ``t``) and the skips that name it
(``ItemsSkipped.fire_time``). A skip is recorded beside its run only by another
instance, one that did not know yet that the item had moved, and never a "nobody ran
it" record (:mod:`shardcron.coordination.inherited`) made after the run started. While
a live enabled instance exists, every item-fire runs once or is recorded skipped, near
a fault or not. Four exceptions, named and counted (:data:`NOBODY_LEFT`,
:data:`NEVER_LAID_OUT`, :data:`CLOCKS_APART`, :data:`DATA_LOST`):

* the item's fires are recorded by whoever fires it next (from its stamp): excused when
  nobody fired the item after ``t`` (no run of it started, no skip of it was recorded)
  and the job has no live enabled instance at the end: every instance that could have
  taken the item over stopped or died;
* an item that a raised count added and a lowered count took away again before any
  layout gave it an owner (the leader could not reshard in between: dead, cut off,
  paused): nobody ever fired it, no item node ever held its stamp;
* while a step has left an instance's wall clock off the others' (until a step puts it
  back, see ``ledger.Skew``), a fire run on two instances, or on none without a record
  (:data:`CLOCKS_APART`; see ``_judge``); a "nobody ran it" record beside a run is let
  pass if a fire of an earlier second was claimed after that run. A fire run twice by
  one instance is never excused;
* a fire with neither due from a session timeout and two periods before the registry
  lost its data until the job's first run after it: the stamps that tell a next owner
  what nobody ran went with the data (see :func:`_lost_stamps`).

With misfire on, every skipped item runs again after its skip, unless a lower count
dropped it or no live enabled instance is left at the end; outside every shadow, within
one period and a half after the fire that kept it busy ended.

I3 (from the *quiet time*: the last disturbance, or the end of the last long item if
later, + session timeout + 2 periods; to the end): every item-fire starts a run in ``[t - 0.1, t +
period)`` whenever a live enabled instance exists; skips do not count. A job that stops firing
fails this. The window is read on the wall clock of the instance that runs the item
(``Run.wall``): one whose clock a step left off the world's fires its seconds when its
own clock reads them. Everything else is on the world's time.

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
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from shardcron.coordination.inherited import DEAD_OWNER
from shardcron.coordination.paths import JobPaths
from shardcron.model import ExecutionSource
from shardcron.simulation.ledger import Ledger, Run, Skip

EARLY = 0.1  # a fire's items are claimed (and may start) this much before it at most
# I2's exceptions (see the module docstring), by name.
NOBODY_LEFT = "nobody left to take the item over"
NEVER_LAID_OUT = "added and dropped by the count before any layout"
CLOCKS_APART = "instances' wall clocks apart (a step not put back)"
DATA_LOST = "due around a loss of the registry's data (the stamps went with it)"


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
    # Item-fires with neither run nor record that I2 excuses, by exception (NOBODY_LEFT,
    # NEVER_LAID_OUT; see the module docstring).
    excused: Counter[str] = field(default_factory=Counter)
    # Per fault or operator action kind whose shadow holds the item-fire ("none": no
    # shadow): item-fires checked, "ran", the excused by exception, skipped by reason.
    near: dict[str, Counter[str]] = field(default_factory=dict)


def check_overlaps(ledger: Ledger) -> list[str]:
    """I1 over every overlap whose older run has ended (all of them at the end)."""
    found = []
    for older, newer in ledger.overlaps:
        if older.end is None:
            continue
        allowed = (
            older.session_lost
            and not older.current
            and (older.token < newer.token or older.losses < newer.losses)
        ) and older.instance != newer.instance
        if not allowed:
            found.append(
                f"I1 {older.job}#{older.item}: {older.instance} [{older.start:.2f}, "
                f"{older.end:.2f}] token {older.token} current={older.current} "
                f"session_lost={older.session_lost} overlaps {newer.instance} from "
                f"{newer.start:.2f} token {newer.token}"
            )
    return found


def _outcomes(ledger: Ledger) -> dict[tuple[str, int, float], list[Run | Skip]]:
    """What became of each item-fire, by (job, item, fire second): the runs for that
    fire (source NORMAL_TRIGGER) and the skips that name it."""
    found: dict[tuple[str, int, float], list[Run | Skip]] = {}
    for run in ledger.runs:
        if run.source is ExecutionSource.NORMAL_TRIGGER and run.fire is not None:
            found.setdefault((run.job, run.item, run.fire), []).append(run)
    for skip in ledger.skips:
        if skip.source is ExecutionSource.NORMAL_TRIGGER:
            for item in skip.items:
                found.setdefault((skip.job, item, skip.fire), []).append(skip)
    return found


def check(
    ledger: Ledger,
    tracks: list[JobTrack],
    session_timeout: float,
    end: float,
    quiet: float,
) -> Verdict:
    """I1 to I3 over the whole seed (I4: :func:`check_registry`)."""
    verdict = Verdict(check_overlaps(ledger))
    outcomes = _outcomes(ledger)
    shadows = sorted(ledger.disturbances)
    marks = sorted(ledger.marks)
    starts: dict[tuple[str, int], list[float]] = {}
    walls: dict[tuple[str, int], list[float]] = {}  # on the runners' clocks, for I3
    normal: dict[tuple[str, int], list[Run]] = {}  # for _stamped_back
    for run in ledger.runs:  # appended in start order
        starts.setdefault((run.job, run.item), []).append(run.start)
        bisect.insort(walls.setdefault((run.job, run.item), []), run.wall)
        if run.source is ExecutionSource.NORMAL_TRIGGER and run.fire is not None:
            normal.setdefault((run.job, run.item), []).append(run)
    fired = _last_fired(ledger)
    lost = _lost_stamps(ledger, session_timeout)
    # Only a job with a live enabled instance at the end has anybody to run it again.
    last = {t.job: t.probes[-1].total for t in tracks if t.probes and t.probes[-1].available}
    for track in tracks:
        period = track.period
        for probe in track.probes:
            t = probe.at
            if t + period > end:
                continue
            lo = bisect.bisect_left(marks, (t - session_timeout - 2 * period, ""))
            hi = bisect.bisect_right(marks, (t + period, "~"))
            kinds = {kind for _, kind in marks[lo:hi]} or {"none"}
            apart = {s.kind for s in ledger.skews if s.start <= t <= s.end}  # see _judge
            if apart:
                kinds = (kinds - {"none"}) | apart
            for item in range(probe.total):
                if t >= quiet:
                    if not probe.available:
                        continue
                    verdict.item_fires += 1
                    if not _started_in(walls.get((track.job, item), []), t - EARLY, t + period):
                        verdict.violations.append(
                            f"I3 {track.job}#{item}: fire at {t:.2f} (after quiet time "
                            f"{quiet:.2f}) did not run"
                        )
                    continue
                found = outcomes.get((track.job, item, t), [])
                if probe.available or found:
                    verdict.item_fires += 1
                    _tally(verdict, kinds, found)
                runs = sum(1 for o in found if isinstance(o, Run))
                twice_or_none = runs > 1 or (not found and probe.available)
                if apart and len({o.instance for o in found}) != 1 and twice_or_none:
                    verdict.excused[CLOCKS_APART] += 1
                    for kind in kinds:
                        verdict.near[kind][CLOCKS_APART] += 1
                    continue
                back = bool(apart) and _stamped_back(normal.get((track.job, item), []), found)
                verdict.violations += _judge(track.job, item, t, found, back)
                if found or not probe.available:
                    continue
                excuse = _excuse(track, item, t, fired, last) or lost(track, item, t)
                if excuse is not None:
                    verdict.excused[excuse] += 1
                    for kind in kinds:
                        verdict.near[kind][excuse] += 1
                    continue
                verdict.violations.append(
                    f"I2 {track.job}#{item}: fire at {t:.2f} neither ran nor was recorded skipped"
                )
    verdict.violations += _misfires(ledger, starts, last)
    verdict.violations += _late_reruns(ledger, starts, shadows, session_timeout, tracks)
    return verdict


def _excuse(
    track: JobTrack, item: int, t: float, fired: dict[tuple[str, int], float], last: dict[str, int]
) -> str | None:
    """Which of I2's exceptions holds for an item-fire with neither run nor record."""
    when = fired.get((track.job, item))
    if when is None and any(p.at > t and p.total <= item for p in track.probes):
        return NEVER_LAID_OUT
    if track.job not in last and (when is None or when < t):
        return NOBODY_LEFT
    return None


def _lost_stamps(
    ledger: Ledger, session_timeout: float
) -> Callable[[JobTrack, int, float], str | None]:
    """:data:`DATA_LOST`: an item-fire due from a session timeout and two periods before a
    loss of the registry's data until the job's first run after it. Such a fire is
    recorded by its owner only while the owner is live and connected; a dead, frozen or
    stopping owner's is recorded by the next owner from the item's stamp, which went with
    the data, and the new layout's owners know only the fires due after the loss."""
    losses = [at for at, kind in ledger.marks if kind == "registry-lost-data"]
    first_run: dict[tuple[str, float], float] = {}
    for run in ledger.runs:
        for loss in losses:
            if run.start > loss:
                key = (run.job, loss)
                first_run[key] = min(run.start, first_run.get(key, math.inf))

    def excuse(track: JobTrack, item: int, t: float) -> str | None:
        for loss in losses:
            if (
                loss - session_timeout - 2 * track.period
                <= t
                < first_run.get((track.job, loss), math.inf)
            ):
                return DATA_LOST
        return None

    return excuse


def _last_fired(ledger: Ledger) -> dict[tuple[str, int], float]:
    """When each item was last fired by anybody: a run of it started, or a skip of it was
    recorded (any source, any fire)."""
    fired: dict[tuple[str, int], float] = {}
    for run in ledger.runs:
        fired[(run.job, run.item)] = max(run.start, fired.get((run.job, run.item), -math.inf))
    for skip in ledger.skips:
        for item in skip.items:
            fired[(skip.job, item)] = max(skip.at, fired.get((skip.job, item), -math.inf))
    return fired


def _tally(verdict: Verdict, kinds: set[str], found: list[Run | Skip]) -> None:
    for kind in kinds:
        counts = verdict.near.setdefault(kind, Counter())
        counts["checked"] += 1
        if any(isinstance(o, Run) for o in found):
            counts["ran"] += 1
        elif found:
            counts[found[0].reason if isinstance(found[0], Skip) else "ran"] += 1


def _started_in(starts: list[float], lo: float, hi: float) -> bool:
    n = bisect.bisect_left(starts, lo)
    return n < len(starts) and starts[n] < hi


def _stamped_back(runs: list[Run], found: list[Run | Skip]) -> bool:
    """Whether another instance's claim may have stamped the item back to before the run
    in ``found`` (clocks apart, see :func:`_judge`): the run came early, on a clock ahead
    of the world's, or a fire of an earlier second started after it (``runs``: the item's
    fires, in start order)."""
    ran = next((o for o in found if isinstance(o, Run)), None)
    if ran is None or ran.fire is None:
        return False
    if ran.wall > ran.start:
        return True
    return any(r.start > ran.start and r.fire is not None and r.fire < ran.fire for r in runs)


def _judge(
    job: str, item: int, t: float, found: list[Run | Skip], stamped_back: bool = False
) -> list[str]:
    """I2 for one item-fire's outcomes: at most one run, and no skip recorded beside it but
    by an instance that did not know yet that the item had moved.

    While a step has left an instance's wall clock off the others' (not put back yet),
    they reach a fire's second at different moments, so an item that moves between them
    may run a fire on both, or on neither without a record (counted by the caller, not
    failed). And a fire of an earlier second claimed after the item ran a later one (a
    clock behind, or the others behind one ahead) stamps the item back: the instance
    that takes it over next records what ran since as run by nobody. ``stamped_back``
    (see :func:`_stamped_back`) lets such a "nobody ran it" record pass. None of this is
    promised (see the guarantees); each instance on its own still runs a fire once,
    however its clock steps, and repairs and failovers never stamp an item back."""
    runs = [o for o in found if isinstance(o, Run)]
    skips = [o for o in found if isinstance(o, Skip)]
    where = f"I2 {job}#{item}: fire at {t:.2f}"
    if len(runs) > 1:
        return [f"{where} ran {len(runs)} times ({', '.join(r.instance for r in runs)})"]
    # An instance that does not know yet that the item moved records it skipped as its
    # own while its new owner runs it: the record is wrong, nothing is lost or doubled.
    # A "nobody ran it" record is wrong if the run came first; a late run after it (a
    # fire that waited out a lost connection) leaves it true when it was made.
    if stamped_back:
        skips = [s for s in skips if s.reason != DEAD_OWNER]
    wrong = (
        [
            s
            for s in skips
            if s.instance == runs[0].instance or (s.reason == DEAD_OWNER and s.at > runs[0].start)
        ]
        if runs
        else []
    )
    if wrong:
        return [f"{where} ran on {runs[0].instance} and was recorded skipped ({wrong[0].reason})"]
    return []


def _misfires(
    ledger: Ledger, starts: dict[tuple[str, int], list[float]], totals: dict[str, int]
) -> list[str]:
    """With misfire on, a skipped item-fire leads to a run of the item after it (unless a
    lower count dropped the item, or no instance is left to run it)."""
    found = []
    for skip in ledger.skips:
        if not skip.misfire:
            continue
        for item in skip.items:
            if item >= totals.get(skip.job, 0):
                continue
            if not _started_in(starts.get((skip.job, item), []), skip.at - EARLY, math.inf):
                found.append(
                    f"I2 {skip.job}#{item}: fire at {skip.fire:.2f} skipped at {skip.at:.2f} "
                    f"({skip.reason}) with misfire on, and never run again"
                )
    return found


def _late_reruns(
    ledger: Ledger,
    starts: dict[tuple[str, int], list[float]],
    shadows: list[float],
    session_timeout: float,
    tracks: list[JobTrack],
) -> list[str]:
    """Outside every shadow, a misfired item runs again within one period and a half after
    the fire that kept it busy ended (a fire holds all its items until its last one
    returns), or after the skip if nothing kept it busy."""
    periods = {track.job: track.period for track in tracks}
    fire_ends: dict[tuple[str, int], float | None] = {}
    last_run: dict[tuple[str, int], list[Run]] = {}
    for run in ledger.runs:
        key = (run.instance, run.token)
        end = fire_ends.get(key, run.end)
        fire_ends[key] = None if end is None or run.end is None else max(end, run.end)
        last_run.setdefault((run.job, run.item), []).append(run)
    found = []
    for skip in ledger.skips:
        if not skip.misfire:
            continue
        period = periods[skip.job]
        for item in skip.items:
            runs = last_run.get((skip.job, item), [])
            before = [r for r in runs if r.start <= skip.at]
            until = fire_ends[(before[-1].instance, before[-1].token)] if before else skip.at
            if until is None:
                continue  # still busy at the end: I3 and I4 speak for it
            deadline = max(until, skip.at) + 1.5 * period
            n = bisect.bisect_left(shadows, skip.at - session_timeout - 2 * period)
            if n < len(shadows) and shadows[n] <= deadline:
                continue  # a fault may delay the re-run: only that it comes is checked
            if not _started_in(starts.get((skip.job, item), []), skip.at, deadline):
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
