"""What ran when: every item run, every skip, every fault and operator action of a seed.

The job runner of each simulated instance opens a :class:`Run` when the item starts and
closes it when its result comes back (or when its process is killed). A run that starts
while another run of the same item is open is an *overlap*; whether it is allowed is
decided when the older run ends (see :mod:`shardcron.simulation.checks`, I1).
"""

from __future__ import annotations

import math
import traceback
from collections import Counter
from dataclasses import dataclass, field

from shardcron.coordination.events import Event, ItemsSkipped, LeaderChanged
from shardcron.model import ExecutionSource
from shardcron.simulation.world import World

_EDGES = ("/simulation/", "/registry/")


@dataclass(slots=True, eq=False)
class Run:
    job: str
    item: int
    instance: str
    start: float
    token: int
    source: ExecutionSource
    fire: float | None  # ctx.scheduled_fire_time: the fire second the run is for
    wall: float  # when it started on its instance's wall clock (``start``: the world's)
    end: float | None = None
    current: bool = True  # ctx.claim_is_current() when the run ended
    # The session that made the claim ended while the item ran, or before it started while
    # its holder was stalled (so it could not know): see checks.py, I1.
    session_lost: bool = False
    losses: int = 0  # times the registry had lost its data when it started (tokens restart)


@dataclass(slots=True, frozen=True)
class Skip:
    at: float
    job: str
    instance: str
    items: tuple[int, ...]
    reason: str
    misfire: bool
    fire: float  # the second of the fire skipped
    source: ExecutionSource


@dataclass(slots=True)
class Skew:
    """The fire seconds that steps of ``instance``'s wall clock may reach while they leave
    it off the world's, from ``start`` to ``end`` (never put back: no end). A clock
    behind reaches back that far, its claims stamping seconds the others ran already; a
    clock ahead reaches that far beyond, with the fires it ran early."""

    instance: str
    kind: str  # the fault kind of the step that put it off
    start: float
    end: float = math.inf


@dataclass
class Ledger:
    world: World
    verbose: bool = False
    runs: list[Run] = field(default_factory=list)
    skips: list[Skip] = field(default_factory=list)
    overlaps: list[tuple[Run, Run]] = field(default_factory=list)
    faults: Counter[str] = field(default_factory=Counter)
    actions: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    disturbances: list[float] = field(default_factory=list)
    marks: list[tuple[float, str]] = field(default_factory=list)  # (when, fault or action kind)
    timeline: list[tuple[float, str]] = field(default_factory=list)
    skews: list[Skew] = field(default_factory=list)
    _open: dict[tuple[str, int], list[Run]] = field(default_factory=dict)

    def escaped(self, instance: str, error: Exception) -> None:
        """An exception reached the coordinator loop (production logs it and goes on)."""
        frames = traceback.extract_tb(error.__traceback__)
        # The deepest frame of the coordination code: where the request was made.
        core = [
            f
            for f in frames
            if "shardcron" in f.filename and not any(p in f.filename for p in _EDGES)
        ] or frames[-1:]
        where = core[-1] if core else None
        frame = (
            "?"
            if where is None
            else f"{where.filename.rsplit('/', 1)[-1]}:{where.name}:{where.lineno}"
        )
        self.errors[f"{type(error).__name__} from {frame}"] += 1
        self.note(f"{instance}: {type(error).__name__} escaped to the coordinator: {error}")

    def note(self, text: str) -> None:
        if self.verbose:
            self.timeline.append((self.world.now, text))

    def fault(self, kind: str, detail: str) -> None:
        self.faults[kind] += 1
        self.disturbances.append(self.world.now)
        self.marks.append((self.world.now, kind))
        self.note(f"FAULT {kind}: {detail}")

    def clock_stepped(self, instance: str, kind: str, before: float, after: float) -> None:
        """A step (a fault of ``kind``, recorded with :meth:`fault`) moved ``instance``'s
        clock from ``before`` to ``after`` off the world's."""
        now = self.world.now
        current = next(
            (s for s in self.skews if s.instance == instance and s.end == math.inf), None
        )
        if current is None:
            current = Skew(instance, kind, now)
            self.skews.append(current)
        current.start = min(current.start, now + min(0.0, after))
        if not after:
            current.end = now + max(0.0, before)

    def action(self, kind: str, detail: str) -> None:
        self.actions[kind] += 1
        self.disturbances.append(self.world.now)
        self.marks.append((self.world.now, kind))
        self.note(f"OPERATOR {kind}: {detail}")

    # -- runs -----------------------------------------------------------------------------

    def start(
        self,
        job: str,
        item: int,
        instance: str,
        token: int,
        source: ExecutionSource,
        fire: float | None,
        wall: float | None = None,
    ) -> Run:
        now = self.world.now
        run = Run(job, item, instance, now, token, source, fire, now if wall is None else wall)
        self.runs.append(run)
        running = self._open.setdefault((job, item), [])
        self.overlaps += [(other, run) for other in running]
        running.append(run)
        self.note(f"{instance} starts {job}#{item} ({source}, token {token})")
        return run

    def end(self, run: Run, current: bool, session_lost: bool) -> None:
        run.end = self.world.now
        run.current = current
        run.session_lost = session_lost
        self._open[(run.job, run.item)].remove(run)
        self.note(
            f"{run.instance} ends {run.job}#{run.item}"
            + ("" if current else " (claim no longer current)")
        )

    def open_runs(self) -> list[Run]:
        return [run for runs in self._open.values() for run in runs]

    # -- runtime events (observers) -------------------------------------------------------

    def observe(self, event: Event) -> None:
        if isinstance(event, ItemsSkipped):
            skip = Skip(
                self.world.now,
                event.job_name,
                event.instance,
                event.items,
                event.reason,
                event.misfire,
                event.fire_time,
                event.source,
            )
            self.skips.append(skip)
            self.note(
                f"{skip.instance} skips {skip.job}{list(skip.items)} of {skip.fire:.2f}: "
                f"{skip.reason}"
            )
        elif isinstance(event, LeaderChanged) and self.verbose:
            role = "becomes" if event.leader else "is no longer"
            self.note(f"{event.instance} {role} leader of {event.job_name}")
