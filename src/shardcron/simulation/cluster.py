"""The simulated cluster: instances on one embedded registry server, and what the world
(faults) and operators do to them.

Each :class:`Member` is one process: its own registry session (a ``MemoryRegistry``
wrapped in the fault layer), its own :class:`SimHost`, one ``JobRuntime`` per job,
constructed as the ``Scheduler`` does. Operators write what ElasticJob's console and
lifecycle API write (see ``shardcron.operations.admin``) through a session of their own.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from shardcron.config.job import JobConfig
from shardcron.coordination.claimlead import ClaimLead
from shardcron.coordination.deregistration import Departures
from shardcron.coordination.events import Observer
from shardcron.coordination.groupcommit import GroupCommit
from shardcron.coordination.paths import JobPaths
from shardcron.coordination.runtime import JobRuntime
from shardcron.errors import NodeExistsError, RegistryError
from shardcron.execution.lanes import lanes_for
from shardcron.model import ServerStatus, ShardingContext, instance_id
from shardcron.registry import SessionState
from shardcron.registry.memory import MemoryRegistry
from shardcron.registry.memoryserver import MemoryServer
from shardcron.simulation.checks import JobTrack, Probe
from shardcron.simulation.faults import Fault, FaultyRegistry
from shardcron.simulation.ledger import Ledger, Run
from shardcron.simulation.world import Node, Phase, SessionEvents, SimHost, World

NAMESPACE = "sim"
GRACE_SECONDS = 1.0  # graceful stop: how long "shardcron run" waits before exiting
AFTER_FIRE = 0.7  # the end of a seed: this long after a fire of every job (world's clock)


@dataclass(frozen=True)
class JobSpec:
    name: str
    items: int
    period: int  # seconds between fires: 1 or 2
    failover: bool
    misfire: bool

    @property
    def cron(self) -> str:
        return "* * * * * ?" if self.period == 1 else "*/2 * * * * ?"

    def config(self) -> JobConfig:
        return JobConfig(
            job_name=self.name,
            sharding_total_count=self.items,
            cron=self.cron,
            time_zone="UTC",
            failover=self.failover,
            misfire=self.misfire,
        )


@dataclass
class Member:
    """One simulated process."""

    index: int
    name: str
    ip: str
    node: Node
    host: SimHost
    events: SessionEvents
    inner: MemoryRegistry
    registry: FaultyRegistry
    runtimes: dict[str, JobRuntime] = field(default_factory=dict)
    lead: ClaimLead | None = None  # the process's, as a Scheduler's: learned from its claims
    departures: Departures | None = None  # the process's, as a Scheduler's
    long_items: bool = False  # the next items it starts outlast the stop grace
    link_down_until: float = 0.0  # an outage of its connection lasts until then


class Cluster:
    def __init__(
        self,
        jobs: list[JobSpec],
        instances: int,
        session_timeout: float,
        rng: random.Random,
        verbose: bool = False,
    ) -> None:
        self.jobs = jobs
        self.session_timeout = session_timeout
        self.rng = rng
        self.world = World()
        self.server = MemoryServer(clock=lambda: self.world.now)
        self.ledger = Ledger(self.world, verbose)
        self.admin = self._session(SessionEvents(self.world))
        self.admin.start()
        self.totals = {job.name: job.items for job in jobs}
        self.tracks = [JobTrack(job.name, job.period) for job in jobs]
        self.members = [self._member(n) for n in range(instances)]
        self.calm = False  # after the last disturbance: items are short
        self.long_until = 0.0  # when the last long item drawn ends
        self.session_ends: dict[int, float] = {}  # session id -> when the server ended it
        self.losses = 0  # times the registry lost its data: see total()

    # -- building -------------------------------------------------------------------------

    def _member(self, n: int) -> Member:
        ip = f"10.0.0.{n + 1}"
        node = Node(instance_id(ip, 100 + n))
        node.on_error = lambda exc: self.ledger.escaped(node.name, exc)
        events = SessionEvents(self.world)
        inner = self._session(events, node)
        registry = FaultyRegistry(
            inner,
            on_break=lambda outage: self.outage(self.members[n], outage),
            on_fault=lambda fault, kind: self.ledger.fault(
                str(fault.timing), f"{node.name} {kind}"
            ),
            clock=lambda: self.world.now,
            defer=self.world.at,
        )
        return Member(n, node.name, ip, node, SimHost(self.world, node), events, inner, registry)

    def _session(self, events: SessionEvents, node: Node | None = None) -> MemoryRegistry:
        """A registry session whose watchdog runs on the world's clock (in ``node``, as
        the client library's thread of that process)."""
        world = self.world
        return MemoryRegistry(
            self.server,
            NAMESPACE,
            events=events,
            session_timeout=self.session_timeout,
            timer=lambda delay, fn: world.at(world.now + delay, fn, node),
        )

    def start(self, member: Member) -> None:
        host = member.host
        member.registry.add_session_listener(lambda state: self._route(member, state))
        member.registry.start()
        commits = GroupCommit(member.registry, host)
        departures = member.departures = Departures(member.registry, host)
        lead = member.lead = ClaimLead(lambda: len(self.jobs), host)
        for job in self.jobs:
            observers: list[Observer] = [self.ledger.observe]
            lanes = lanes_for(
                job.name,
                member.name,
                member.ip,
                host,
                self._runner(member, job.name),
                observers=observers,
            )
            runtime = JobRuntime(
                job.config(),
                lanes,
                member.registry,
                member.name,
                member.ip,
                host,
                workers=2,
                lead=lead,
                claim_took=lambda asked, m=member: self._claim_took(m, asked),  # type: ignore[misc]
                on_detach=lambda rt, m=member: m.runtimes.pop(rt.name, None),  # type: ignore[misc]
                observers=observers,
                commits=commits,
                departures=departures,
            )
            member.runtimes[job.name] = runtime
            runtime.start()
        self.ledger.note(f"{member.name} started")

    def _claim_took(self, member: Member, asked: float) -> None:
        if member.lead is not None and member.lead.took(asked):
            for runtime in list(member.runtimes.values()):  # as a Scheduler moves them
                runtime.guarded(runtime.firing.timer.relead, "claim lead")

    def _route(self, member: Member, state: SessionState) -> None:
        self.ledger.note(f"{member.name} session {state}")
        if (lead := member.lead) is not None:
            member.host.coordinate(lambda: lead.session(state))
        for runtime in list(member.runtimes.values()):
            member.host.coordinate(lambda rt=runtime: rt.on_session(state))  # type: ignore[misc]

    def _runner(self, member: Member, job: str) -> Callable[[ShardingContext], None]:
        ledger, node = self.ledger, member.node

        def run(ctx: ShardingContext) -> None:
            duration = self.duration(member)
            record = ledger.start(
                job,
                ctx.sharding_item,
                member.name,
                ctx.fencing_token,
                ctx.source,
                ctx.scheduled_fire_time,
                wall=member.host.now(),
            )
            record.losses = self.losses  # fencing tokens start over with a data loss

            def end() -> None:
                current = False
                if node.phase is not Phase.DEAD:
                    member.registry.paused = True
                    try:
                        current = ctx.claim_is_current()
                    finally:
                        member.registry.paused = False
                ledger.end(record, current, self._claim_lost(member, ctx.fencing_token, record))

            node.pending = (duration, end)

        return run

    def _claim_lost(self, member: Member, token: int, run: Run) -> bool:
        """Whether the session that made the run's claim ended where its holder could not
        act on it: while the item ran, or before it started but while the holder was
        stalled since the claim (a SIGSTOP between claiming and starting)."""
        made = [c for c in member.registry.claims.get(token, []) if c[1] <= run.start]
        if not made:
            return False
        sid, claimed_at = made[-1]
        ended = self.session_ends.get(sid)
        if ended is None or ended > self.world.now:
            return False
        if ended >= run.start:
            return True
        return any(s <= run.start and e >= claimed_at for s, e in member.node.stalls)

    def duration(self, member: Member) -> float:
        if self.calm:
            return self.rng.uniform(0.02, 0.15)
        if member.long_items or self.rng.random() < 0.04:
            length = self.rng.uniform(1.2, 2.5)
            self.long_until = max(self.long_until, self.world.now + length)
            return length
        return self.rng.uniform(0.02, 0.4)

    # -- looking at the registry (no request, no fault) ------------------------------------

    def peek(self, path: str) -> bytes | None:
        node = self.server._nodes.get(f"/{NAMESPACE}{path}")
        return None if node is None else node.data

    def kids(self, path: str) -> list[str]:
        node = self.server._nodes.get(f"/{NAMESPACE}{path}")
        return [] if node is None else sorted(node.children)

    def claimed_ahead(self, job: str, holder: str, item: int) -> bool:
        """Whether ``holder`` claimed ``item`` of ``job`` for a fire whose second is still to
        come on its clock (a claim lead learned from slow answers reaches half a period).
        The checks run :data:`AFTER_FIRE` after a fire of every job on the world's clock;
        on the clock of a holder that a step left off it, a fire may be that recent, its
        completion still on its way: it stands for that fire too."""
        member = next((m for m in self.members if m.name == holder), None)
        if member is None or (runtime := member.runtimes.get(job)) is None:
            return False
        since = member.host.now() - (AFTER_FIRE if member.host.offset else 0.0)
        return any(item in f.claim.versions and f.when > since for f in runtime.firing._fires)

    def leader(self, job: str) -> Member | None:
        value = self.peek(JobPaths(job).election_instance)
        return next((m for m in self.members if value == m.name.encode()), None)

    def available(self, member: Member, job: str) -> bool:
        runtime, paths = member.runtimes.get(job), JobPaths(job)
        return (
            member.node.phase is Phase.UP
            and runtime is not None
            and not runtime.stopped
            and member.inner.connected
            and self.peek(paths.instance(member.name)) is not None
            and self.peek(paths.server(member.ip)) == ServerStatus.ENABLED.encode()
        )

    def probe(self, track: JobTrack) -> None:
        available = any(self.available(m, track.job) for m in self.members)
        track.probes.append(Probe(self.world.now, self.total(track.job), available))

    def schedule_probes(self, start: float, end: float) -> None:
        for track in self.tracks:
            t = float(int(start) + (-int(start)) % track.period)
            while t <= end:
                self.world.at(t, lambda tr=track: self.probe(tr))  # type: ignore[misc]
                t += track.period

    # -- the world's faults ---------------------------------------------------------------

    def end_session(self, sid: int) -> None:
        """The server ends a session whose client went silent for the session timeout."""
        if sid in self.server._sessions:
            self.session_ends.setdefault(sid, self.world.now)
            self.server.close_session(sid)

    def plant(self, member: Member, fault: Fault) -> None:
        member.registry.faults.append(fault)

    def outage(self, member: Member, length: float) -> None:
        """The member's connection drops for ``length``; past the session timeout the
        server expires its session meanwhile."""
        if member.node.phase is not Phase.UP or not member.inner._link_up:
            return
        member.inner.disconnect()
        member.link_down_until = self.world.now + length
        sid = member.inner.session_id
        if length > self.session_timeout:
            self.world.at(self.world.now + self.session_timeout, lambda: self.end_session(sid))
        self.world.at(self.world.now + length, lambda: self._reconnect(member))

    def _reconnect(self, member: Member) -> None:
        if member.node.phase is Phase.UP:  # a stalled one reconnects when it resumes
            member.inner.reconnect()
            self.ledger.disturbances.append(self.world.now)
            self.ledger.note(f"{member.name} reconnects")

    def partition(self, member: Member, length: float) -> None:
        if member.node.phase is Phase.UP and member.inner._link_up:
            self.ledger.fault("outage", f"{member.name} for {length:.2f}s")
            self.outage(member, length)

    def restart_registry(self, length: float) -> None:
        """The registry server restarts with its data (shorter than the session timeout):
        every connection drops at once and comes back; the sessions survive."""
        self.ledger.fault("registry-restart", f"down for {length:.2f}s")
        for member in self.members:
            self.outage(member, length)

    def lose_registry_data(self, length: float) -> None:
        """The registry server restarts without its data (rebuilt, or restored from an old
        backup), down for ``length``: every connection drops, every node and session is
        gone, and the old sessions are refused. Each client gives up on its session 1.5
        session timeouts after its connection dropped and registers anew (see
        ``MemoryRegistry``); config and layout come back from the workers."""
        self.ledger.fault("registry-lost-data", f"down for {length:.2f}s")
        self.losses += 1
        for sid in list(self.server._sessions):
            self.session_ends.setdefault(sid, self.world.now)
        self.server.set_up(False)
        self.server.lose_data()

        def back() -> None:
            self.server.set_up(True)
            self.ledger.disturbances.append(self.world.now)

        self.world.at(self.world.now + length, back)
        # The clients give up on their sessions then: they register anew, as new jobs.
        gives_up = self.world.now + 1.5 * self.session_timeout
        self.world.at(gives_up, lambda: self.ledger.disturbances.append(self.world.now))

    def total(self, job: str) -> int:
        """The job's item count; once the registry lost its data, the count of the config
        the workers wrote again (a worker that had not seen the last change writes its own)."""
        if self.losses:
            stored = self.peek(JobPaths(job).config)
            if stored is not None:
                self.totals[job] = JobConfig.from_yaml(stored.decode(), job).sharding_total_count
        return self.totals[job]

    def expire(self, member: Member) -> None:
        if member.node.phase is Phase.UP and member.inner._link_up:
            self.ledger.fault("expire", member.name)
            self.session_ends.setdefault(member.inner.session_id, self.world.now)
            self.server.expire(member.inner.session_id)

    def lag(self, member: Member, lag: float, length: float) -> None:
        self.ledger.fault("cache-lag", f"{member.name} {lag:.2f}s for {length:.2f}s")
        member.events.lag = lag
        self._undo_after(length, lambda: setattr(member.events, "lag", 0.0))

    def slow_answers(self, member: Member, delay: float, length: float) -> None:
        """The member's transactions apply at once but are answered ``delay`` later (a
        slow link, a busy server): its fires come while its completions are on their way."""
        self.ledger.fault("slow-answers", f"{member.name} {delay:.2f}s for {length:.2f}s")
        member.registry.answer_delay = delay
        self._undo_after(length, lambda: setattr(member.registry, "answer_delay", 0.0))

    def slow_requests(self, member: Member, longest: float, length: float) -> None:
        """For ``length``, each request the member sends without waiting (claims,
        completions, misfire flags, layout commits) is applied 0.1 s to ``longest``
        later, in the order sent, while the rest of the world goes on."""
        self.ledger.fault("slow-requests", f"{member.name} up to {longest:.2f}s for {length:.2f}s")
        rng = self.rng
        member.registry.slow_requests(lambda: rng.uniform(0.1, longest))
        self._undo_after(length, lambda: member.registry.slow_requests(None))

    def _undo_after(self, length: float, undo: Callable[[], None]) -> None:
        """A disturbance ends ``length`` from now; its end is a disturbance too."""

        def back() -> None:
            undo()
            self.ledger.disturbances.append(self.world.now)

        self.world.at(self.world.now + length, back)

    def step_clock(self, member: Member, amount: float, noticed: float) -> None:
        """The member's wall clock steps by ``amount`` (an NTP step, a VM resumed); its
        timer notices a step forward ``noticed`` later (see ``SimHost.step``)."""
        if member.node.phase is Phase.DEAD or amount == 0:
            return
        kind = "clock-step-back" if amount < 0 else "clock-step-forward"
        self.ledger.fault(kind, f"{member.name} by {amount:+.2f}s")
        before = member.host.offset
        member.host.step(amount, noticed)
        self.ledger.clock_stepped(member.name, kind, before, member.host.offset)

    def crash(self, member: Member, why: str = "SIGKILL") -> None:
        """The process dies: its queue is dropped, its items end now, its session
        expires after the timeout."""
        if member.node.phase is Phase.DEAD:
            return
        self.ledger.fault("crash", f"{member.name} ({why})")
        member.node.phase = Phase.DEAD
        member.host.end_runs()
        member.events.stop()
        sid = member.inner.session_id
        member.inner.disconnect()
        self.world.at(self.world.now + self.session_timeout, lambda: self.end_session(sid))

    def stall(self, member: Member, length: float) -> None:
        """SIGSTOP for ``length``: nothing runs, its items keep "running"; past the session
        timeout its session expires meanwhile (a *stall*), short of it the session
        survives (a *pause*); then SIGCONT."""
        if member.node.phase is not Phase.UP:
            return
        kind = "stall" if length > self.session_timeout else "pause"
        self.ledger.fault(kind, f"{member.name} for {length:.2f}s")
        member.node.phase = Phase.STALLED
        member.node.resume_at = self.world.now + length
        member.node.stalls.append((self.world.now, member.node.resume_at))
        sid = member.inner.session_id
        member.inner.disconnect()
        if length > self.session_timeout:
            self.world.at(self.world.now + self.session_timeout, lambda: self.end_session(sid))

        def resume() -> None:
            if member.node.phase is Phase.STALLED:
                member.node.phase = Phase.UP
                self.ledger.disturbances.append(self.world.now)
                self.ledger.note(f"{member.name} resumes")
                if self.world.now >= member.link_down_until:  # else the outage's end does
                    member.inner.reconnect()

        self.world.at(member.node.resume_at, resume)

    # -- operators --------------------------------------------------------------------------

    @contextlib.contextmanager
    def _console(self, what: str) -> Iterator[None]:
        """An operator's console request: it fails while the registry is down."""
        try:
            yield
        except RegistryError as exc:
            self.ledger.note(f"OPERATOR {what} failed: {exc}")

    def shutdown(self, member: Member) -> None:
        """The console's shutdown: delete the instance's node in every job."""
        self.ledger.action("shutdown", member.name)
        with self._console("shutdown"):
            for job in self.jobs:
                self.admin.delete(JobPaths(job.name).instance(member.name))

    def set_server(self, member: Member, enabled: bool) -> None:
        status = ServerStatus.ENABLED if enabled else ServerStatus.DISABLED
        self.ledger.action("enable" if enabled else "disable", member.ip)
        with self._console("enable" if enabled else "disable"):
            for job in self.jobs:
                self.admin.put(JobPaths(job.name).server(member.ip), status.encode())

    def change_config(self, job: str, what: str, **changes: object) -> None:
        paths = JobPaths(job)
        with self._console(what):
            stored = self.admin.get(paths.config)
            if stored is None:
                return
            config = JobConfig.from_yaml(stored.decode(), job).with_changes(**changes)
            self.ledger.action(what, f"{job} {changes}")
            self.admin.put(paths.config, config.to_yaml().encode())
            self.totals[job] = config.sharding_total_count

    def trigger(self, job: str) -> None:
        paths = JobPaths(job)
        self.ledger.action("trigger", job)
        with self._console("trigger"):
            self.admin.delete(paths.triggers, recursive=True)
            for instance in self.admin.children(paths.instances):
                with contextlib.suppress(NodeExistsError):
                    self.admin.create(paths.trigger(instance))

    def graceful_stop(self, member: Member) -> None:
        """``shardcron run`` on SIGTERM: stop firing, wait the grace, then exit; items
        still running then die with the process (exit status 3)."""
        if member.node.phase is not Phase.UP:
            return
        self.ledger.action("graceful-stop", member.name)
        runtimes, departures = list(member.runtimes.values()), member.departures
        assert departures is not None, "a member that is up has started"
        member.host.coordinate(lambda: departures.stop(runtimes))

        def deadline() -> None:
            if member.node.phase is not Phase.UP:
                return
            if any(rt.running_items for rt in member.runtimes.values()):
                self.crash(member, "grace over, exit 3")
                return
            self.ledger.note(f"{member.name} exits cleanly")
            member.node.phase = Phase.DEAD
            self.session_ends.setdefault(member.inner.session_id, self.world.now)
            member.inner.close()
            member.events.stop()
            self.ledger.disturbances.append(self.world.now)

        # The grace is the process's own timer: a pause holds it up, as it holds the rest.
        self.world.at(self.world.now + GRACE_SECONDS, deadline, member.node)
