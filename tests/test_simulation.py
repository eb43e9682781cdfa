"""Seeded fault exploration on virtual time (issue 12, point 7).

The 10,000-seed run is what CI relies on; the other tests show that the checks catch
what they are meant to catch (fed by hand) and that the world and the fault layer
behave as the invariants assume (deterministic, faults land where they are aimed).
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from shardcron.coordination.events import ItemsSkipped
from shardcron.coordination.inherited import DEAD_OWNER
from shardcron.coordination.misfires import MISSED
from shardcron.coordination.paths import JobPaths
from shardcron.errors import ConnectionLostError
from shardcron.model import ExecutionSource
from shardcron.registry import Check, Create, Delete, Op, SessionState, SetData
from shardcron.registry.memory import MemoryRegistry
from shardcron.registry.memoryserver import MemoryServer
from shardcron.simulation import checks
from shardcron.simulation.cluster import Cluster, JobSpec
from shardcron.simulation.explore import by_fault, explore, summary
from shardcron.simulation.faults import Fault, FaultyRegistry, Kind, Timing, kind_of
from shardcron.simulation.ledger import Ledger
from shardcron.simulation.scenario import run_seed
from shardcron.simulation.world import EPOCH, Node, SessionEvents, SimHost, World
from tests.conftest import FIGURES

SEEDS = 10_000
NORMAL = ExecutionSource.NORMAL_TRIGGER


@pytest.mark.timeout(900)
def test_ten_thousand_seeds_keep_every_invariant(capsys: pytest.CaptureFixture[str]) -> None:
    report = explore(range(SEEDS), processes=2)
    FIGURES.append(summary(report) + "\n" + by_fault(report))  # in pytest's closing summary
    with capsys.disabled():
        print()
        print(summary(report))
        print(by_fault(report))
        for line in report.failures():
            print(line)
    assert report.seeds == SEEDS
    assert report.item_fires > SEEDS  # the checks had something to check
    assert sum(report.faults.values()) > SEEDS // 2
    # Every kind of fault, operator action and simulated-only limit was drawn and had
    # item-fires to check near it.
    kinds = {"crash", "pause", "stall", "registry-restart", "count"}
    assert kinds | {"clock-step-back", "clock-step-forward"} <= set(report.near)
    assert not report.violations, "\n".join(report.failures())


def test_a_seed_replays_exactly() -> None:
    first, again = run_seed(1245, verbose=True), run_seed(1245, verbose=True)
    assert first.timeline == again.timeline
    assert first.timeline  # verbose keeps the timeline
    assert (first.faults, first.actions, first.item_fires) == (
        again.faults,
        again.actions,
        again.item_fires,
    )


def test_a_failing_seed_prints_the_command_that_replays_it() -> None:
    report = explore([], processes=1)
    report.violations[77] = ["I1 job0#0: overlap"]
    replay = "python -m shardcron.simulation --seed 77 --verbose"
    assert report.failures() == [f"seed 77: I1 job0#0: overlap (1 violations); replay: {replay}"]
    assert "violations: 1" in summary(report)


# -- the checks catch violations ----------------------------------------------------------


def _ledger() -> Ledger:
    return Ledger(World())


def _run(
    ledger: Ledger,
    instance: str,
    start: float,
    end: float,
    token: int,
    *,
    current: bool = True,
    lost: bool = False,
    item: int = 0,
    fire: float | None = None,
) -> None:
    ledger.world.now = EPOCH + start
    run = ledger.start(
        "job", item, instance, token, NORMAL, EPOCH + round(start) if fire is None else EPOCH + fire
    )
    ledger.world.now = EPOCH + end
    ledger.end(run, current, lost)


def test_i1_catches_two_instances_running_an_item_at_once() -> None:
    ledger = _ledger()
    ledger.world.now = EPOCH
    older = ledger.start("job", 0, "a", 10, NORMAL, EPOCH)
    _run(ledger, "b", 0.5, 0.8, token=20)
    ledger.world.now = EPOCH + 1
    ledger.end(older, True, False)
    found = checks.check_overlaps(ledger)
    assert len(found) == 1 and found[0].startswith("I1 job#0: a")


def test_i1_allows_a_stale_run_whose_session_was_lost_and_whose_token_is_lower() -> None:
    ledger = _ledger()
    ledger.world.now = EPOCH
    stale = ledger.start("job", 0, "a", 10, NORMAL, EPOCH)
    _run(ledger, "b", 4.0, 4.5, token=20)
    ledger.world.now = EPOCH + 5
    ledger.end(stale, current=False, session_lost=True)
    assert checks.check_overlaps(ledger) == []


@pytest.mark.parametrize(
    ("current", "lost", "token"),
    [(True, True, 10), (False, False, 10), (False, True, 30)],
    ids=["claim-still-current", "session-not-lost", "higher-token"],
)
def test_i1_allows_nothing_else(current: bool, lost: bool, token: int) -> None:
    ledger = _ledger()
    ledger.world.now = EPOCH
    stale = ledger.start("job", 0, "a", token, NORMAL, EPOCH)
    _run(ledger, "b", 4.0, 4.5, token=20)
    ledger.world.now = EPOCH + 5
    ledger.end(stale, current=current, session_lost=lost)
    assert len(checks.check_overlaps(ledger)) == 1


def _track(*fires: float, total: int = 1, available: bool = True) -> checks.JobTrack:
    track = checks.JobTrack("job", 1)
    track.probes = [checks.Probe(EPOCH + t, total, available) for t in fires]
    return track


def _check(ledger: Ledger, track: checks.JobTrack, quiet: float = 100.0) -> list[str]:
    return checks.check(ledger, [track], 2.0, EPOCH + 50, EPOCH + quiet).violations


def _skip(
    ledger: Ledger, at: float, fire: float, reason: str, *, misfire: bool = False, who: str = "a"
) -> None:
    ledger.world.now = EPOCH + at
    ledger.observe(
        ItemsSkipped(
            job_name="job",
            instance=who,
            items=(0,),
            reason=reason,
            misfire=misfire,
            fire_time=EPOCH + fire,
        )
    )


def test_i2_catches_an_item_fire_that_neither_ran_nor_was_skipped() -> None:
    ledger = _ledger()
    _run(ledger, "a", 10.0, 10.2, token=1)
    found = _check(ledger, _track(10, 11))
    assert found == [f"I2 job#0: fire at {EPOCH + 11:.2f} neither ran nor was recorded skipped"]


def test_i2_matches_a_skip_to_the_fire_it_names_and_fails_a_lost_fire_near_a_fault() -> None:
    ledger = _ledger()
    _skip(ledger, 10.98, 11, "still running")
    assert _check(ledger, _track(11)) == []
    # A skip of another fire does not stand for this one.
    other = _ledger()
    _skip(other, 10.98, 12, "still running")
    assert len(_check(other, _track(11))) == 1
    assert _check(_ledger(), _track(11, available=False)) == []  # nobody could run it
    # Near a fault too: a lost item-fire fails, the next fire run or not.
    near = _ledger()
    near.world.now = EPOCH + 9
    near.fault("crash", "a")
    _run(near, "b", 12.0, 12.1, token=1)
    verdict = checks.check(near, [_track(11, 12)], 2.0, EPOCH + 50, EPOCH + 100)
    lost = f"I2 job#0: fire at {EPOCH + 11:.2f} neither ran nor was recorded skipped"
    assert verdict.violations == [lost] and not verdict.excused
    assert verdict.near["crash"]["checked"] == 2


def test_i2_excuses_only_its_named_exceptions() -> None:
    # Nobody fired the item after the fire, and nobody is left at the end.
    gone = _ledger()
    _run(gone, "a", 10.0, 10.1, token=1)
    track = _track(10, 11, 12)
    track.probes[-1].available = False
    verdict = checks.check(gone, [track], 2.0, EPOCH + 50, EPOCH + 100)
    assert verdict.violations == [] and verdict.excused == {checks.NOBODY_LEFT: 1}
    # ... but somebody fired it later: it should have recorded the fire.
    _skip(gone, 11.5, 12, "registry connection lost")
    verdict = checks.check(gone, [track], 2.0, EPOCH + 50, EPOCH + 100)
    assert len(verdict.violations) == 1 and not verdict.excused
    # An item a count added and took away again, never fired by anybody.
    dropped = _ledger()
    counts = checks.JobTrack("job", 1)
    counts.probes = [checks.Probe(EPOCH + 10, 2, True), checks.Probe(EPOCH + 11, 1, True)]
    _run(dropped, "a", 10.0, 10.1, token=1)
    _run(dropped, "a", 11.0, 11.1, token=2)
    verdict = checks.check(dropped, [counts], 2.0, EPOCH + 50, EPOCH + 100)
    assert verdict.violations == [] and verdict.excused == {checks.NEVER_LAID_OUT: 1}


def test_i2_catches_a_fire_run_twice_and_a_false_record_beside_a_run() -> None:
    twice = _ledger()
    _run(twice, "a", 10.0, 10.2, token=1)
    _run(twice, "b", 11.2, 11.3, token=2, fire=10)  # late, for the same second
    assert _check(twice, _track(10)) == [f"I2 job#0: fire at {EPOCH + 10:.2f} ran 2 times (a, b)"]
    recorded = _ledger()
    _run(recorded, "a", 10.0, 10.2, token=1)
    _skip(recorded, 12.0, 10, DEAD_OWNER, who="b")
    assert len(_check(recorded, _track(10))) == 1
    # An instance that does not know yet that the item moved: its record is excused.
    stale = _ledger()
    _run(stale, "a", 10.0, 10.2, token=1)
    _skip(stale, 9.95, 10, "registry connection lost", who="b")
    assert _check(stale, _track(10)) == []


def test_i2_catches_a_misfired_item_that_never_runs_again() -> None:
    ledger = _ledger()
    _run(ledger, "a", 9.0, 11.5, token=1)
    _skip(ledger, 9.98, 10, "still running from an earlier fire", misfire=True)
    _skip(ledger, 10.98, 11, "still running from an earlier fire", misfire=True)
    found = _check(ledger, _track(9, 10, 11))
    assert any("with misfire on, and never run again" in f for f in found)
    _run(ledger, "a", 11.5, 11.6, token=2, fire=11)  # the misfire re-run
    ledger.runs[-1].source = ExecutionSource.MISFIRE
    assert _check(ledger, _track(9, 10, 11)) == []


def test_i3_wants_runs_after_the_quiet_time_not_skips() -> None:
    ledger = _ledger()
    _run(ledger, "a", 20.0, 20.1, token=1)
    _skip(ledger, 20.98, 21, "registry connection lost")
    found = _check(ledger, _track(20, 21), quiet=15)
    assert found == [
        f"I3 job#0: fire at {EPOCH + 21:.2f} (after quiet time {EPOCH + 15:.2f}) did not run"
    ]


def test_i4_catches_nodes_left_behind() -> None:
    paths = JobPaths("job")
    tree = {
        paths.running(0): b"a",
        paths.failovering(1): b"b",
        paths.failover_item(2): b"",
        paths.sharding_processing: b"",
    }
    kids = {paths.sharding: ["0", "1"], paths.failover_items: ["2"]}
    found = checks.check_registry(
        _ledger(), ["job"], tree.get, lambda p: kids.get(p, []), lambda *_: False
    )
    assert found == [
        "I4 job#0: stale running node (holder a)",
        "I4 job#1: stale failovering node",
        "I4 job: failover queue entry 2 left",
        "I4 job: leader/sharding/processing left",
    ]
    live = _ledger()
    live.start("job", 0, "a", 1, NORMAL, EPOCH)  # a running node of a run still going is fine
    tree = {paths.running(0): b"a"}
    assert checks.check_registry(live, ["job"], tree.get, lambda _: [], lambda *_: False) == []
    # A claim made ahead of a fire still to come stands for that fire.
    ahead = {("job", "a", 0)}
    items = {paths.sharding: ["0"]}
    found = checks.check_registry(
        _ledger(), ["job"], tree.get, lambda p: items.get(p, []), lambda *key: key in ahead
    )
    assert found == []
    found = checks.check_registry(
        _ledger(), ["job"], tree.get, lambda p: items.get(p, []), lambda *_: False
    )
    assert found == ["I4 job#0: stale running node (holder a)"]


# -- the fault layer ----------------------------------------------------------------------


def test_request_kinds_are_told_apart_by_their_ops() -> None:
    p = JobPaths("job")
    claim: list[Op] = [
        Create(p.running(0)),
        SetData(p.item(0), b""),
    ]
    failover: list[Op] = [
        Delete(p.failover_item(0)),
        Create(p.failover(0), ephemeral=True),
        Create(p.failovering(0)),
    ]
    assert kind_of("transaction", claim) is Kind.CLAIM
    assert kind_of("transaction", claim + failover) is Kind.FAILOVER_CLAIM
    assert kind_of("transaction", [Check(p.item(0), 3), Delete(p.running(0))]) is Kind.COMPLETION
    assert (
        kind_of("transaction", [Delete(p.running(0)), Create(p.failover_item(0))])
        is Kind.FAILOVER_QUEUE
    )
    assert kind_of("create", [Create(p.sharding_processing)]) is Kind.RESHARD_PROCESSING
    assert (
        kind_of("transaction", [Delete(p.sharding_necessary), Delete(p.sharding_processing)])
        is Kind.RESHARD_COMMIT
    )
    assert kind_of("create", [Create(p.election_instance)]) is Kind.ELECTION
    assert kind_of("create", [Create(p.instance("x@-@1"), ephemeral=True)]) is Kind.REGISTRATION
    registration = [Create(p.instance("x@-@1"), ephemeral=True), Create(p.election_instance)]
    assert kind_of("transaction", registration) is Kind.REGISTRATION
    assert kind_of("transaction", [Create(p.misfire(0))]) is Kind.MISFIRE_WRITE
    assert kind_of("transaction", [Delete(p.misfire(0))]) is Kind.MISFIRE_TAKE
    assert kind_of("get", [Check(p.config)]) is Kind.OTHER


def _faulty(world: World, server: MemoryServer) -> tuple[FaultyRegistry, list[SessionState]]:
    inner = MemoryRegistry(server, "t", events=SessionEvents(world))
    states: list[SessionState] = []
    inner.add_session_listener(states.append)

    def outage(length: float) -> None:
        inner.disconnect()
        sid = inner.session_id
        if length > 2.0:
            world.at(world.now + 2.0, lambda: server.close_session(sid))
        world.at(world.now + length, inner.reconnect)

    registry = FaultyRegistry(inner, on_break=outage)
    registry.start()
    return registry, states


@pytest.mark.parametrize("timing", list(Timing))
def test_a_lost_request_is_applied_or_not_and_the_session_drops(timing: Timing) -> None:
    world, server = World(), MemoryServer()
    registry, states = _faulty(world, server)
    registry.faults.append(Fault(timing, outage=0.5, kind=Kind.ELECTION))
    registry.create("/a")  # not the aimed kind: goes through
    with pytest.raises(ConnectionLostError):
        registry.create("/job/leader/election/instance", ephemeral=True)
    applied = server._nodes.get("/t/job/leader/election/instance") is not None
    assert applied is (timing is Timing.AFTER)
    with pytest.raises(ConnectionLostError):  # down: every request fails fast
        registry.get("/a")
    world.run_until(EPOCH + 1)
    assert registry.get("/a") == b""
    assert states == [SessionState.CONNECTED, SessionState.SUSPENDED, SessionState.RECONNECTED]


def test_an_outage_past_the_session_timeout_expires_the_session() -> None:
    world, server = World(), MemoryServer()
    registry, states = _faulty(world, server)
    registry.create("/mine", ephemeral=True)
    first = registry.session_id
    registry.faults.append(Fault(Timing.BEFORE, outage=3.0))
    with pytest.raises(ConnectionLostError):
        registry.get("/mine")
    world.run_until(EPOCH + 2.5)
    assert server._nodes.get("/t/mine") is None  # the server expired it meanwhile
    world.run_until(EPOCH + 3.5)
    assert states[-2:] == [SessionState.EXPIRED, SessionState.CONNECTED]
    assert registry.session_id != first and registry.connected


def test_a_lagging_cache_sees_changes_late_but_in_order() -> None:
    world, server = World(), MemoryServer()
    events = SessionEvents(world)
    reader = MemoryRegistry(server, "t", events=events)
    reader.start()
    writer = MemoryRegistry(server, "t", events=SessionEvents(world))
    writer.start()
    seen: list[str] = []
    cache = reader.tree_cache("/", lambda e: seen.append(f"{e.type} {e.path}"))
    events.lag = 0.5
    writer.create("/x")
    events.lag = 0.0
    writer.delete("/x")  # queued behind the lagging event, never ahead of it
    assert not cache.exists("/x") and seen == []
    world.run_until(EPOCH + 1)
    assert [e for e in seen if e.endswith("/x")] == ["ADDED /x", "REMOVED /x"]


def test_operators_and_crashes_act_on_the_simulated_cluster() -> None:
    jobs = [JobSpec("job0", items=4, period=1, failover=True, misfire=True)]
    cluster = Cluster(jobs, instances=3, session_timeout=2.0, rng=random.Random(5))
    for member in cluster.members:
        cluster.world.at(EPOCH + 0.3, lambda m=member: cluster.start(m))  # type: ignore[misc]
    cluster.world.run_until(EPOCH + 2.5)
    victim = cluster.members[2]
    cluster.crash(victim)
    cluster.world.run_until(EPOCH + 8.5)
    paths = JobPaths("job0")
    assert cluster.peek(paths.instance(victim.name)) is None  # its session expired
    owners = {cluster.peek(paths.item_instance(i)) for i in range(4)}
    assert victim.name.encode() not in owners  # resharded over the survivors
    assert checks.check_overlaps(cluster.ledger) == []


def _three_running(items: int, misfire: bool, failover: bool = False) -> Cluster:
    """Three instances of an every-second job with short items, started at 0.3 s and run
    to 3.5 s, when each has its share."""
    jobs = [JobSpec("job0", items=items, period=1, failover=failover, misfire=misfire)]
    cluster = Cluster(jobs, instances=3, session_timeout=2.0, rng=random.Random(5))
    cluster.calm = True  # short items: nothing is skipped for being busy
    for member in cluster.members:
        cluster.world.at(EPOCH + 0.3, lambda m=member: cluster.start(m))  # type: ignore[misc]
    cluster.world.run_until(EPOCH + 3.5)
    return cluster


@pytest.mark.parametrize("misfire", [True, False])
def test_fires_of_a_killed_owner_before_its_session_ends_are_recorded_by_the_new_owner(
    misfire: bool,
) -> None:
    """A SIGKILLed instance's items fire nowhere until its session ends and the leader
    reshards: the instance that gets them records those fires as skipped, naming each
    fire, and with misfire runs each item once more."""
    cluster = _three_running(items=3, misfire=misfire)
    paths = JobPaths("job0")
    victim = next(m for m in cluster.members if cluster.leader("job0") is not m)
    lost = [i for i in range(3) if cluster.peek(paths.item_instance(i)) == victim.name.encode()]
    assert lost, "the victim owns items"
    cluster.crash(victim)  # at 3.5: fires 4 and 5 come before its session ends at 5.5
    cluster.world.run_until(EPOCH + 9.5)
    ledger = cluster.ledger
    for item in lost:
        named = sorted(
            s.fire - EPOCH for s in ledger.skips if item in s.items and s.reason == DEAD_OWNER
        )
        assert named == [4.0, 5.0], f"item {item}: {named}"
        ran = [r for r in ledger.runs if r.item == item and r.start > EPOCH + 3.5]
        reruns = [r for r in ran if r.source is ExecutionSource.MISFIRE]
        assert len(reruns) == (1 if misfire else 0)
        # Each fire after the takeover ran once, for its own second.
        fires = sorted(r.fire - EPOCH for r in ran if r.fire and r.source is NORMAL)
        assert fires == sorted(set(fires)) and fires[-3:] == [7.0, 8.0, 9.0]


# -- wall-clock steps ---------------------------------------------------------------------


def test_a_simulated_step_moves_wall_clock_callbacks_and_leaves_delays_alone() -> None:
    """As the production timer (tests/test_timers.py): delays keep their length; what is
    due at a wall-clock time waits for it after a step back, and after a step forward is
    released once the timer notices the step."""
    world = World()
    host = SimHost(world, Node("a"))
    ran: list[tuple[str, float, float]] = []

    def note(what: str) -> Callable[[], None]:
        return lambda: ran.append((what, world.now - EPOCH, host.released() - EPOCH))

    host.call_later(1.0, note("delay"))
    host.call_at(EPOCH + 1.0, note("second"))
    host.step(-2.0, noticed=0.5)
    world.run_until(EPOCH + 5)
    assert ran == [("delay", 1.0, -1.0), ("second", 3.0, 1.0)]
    ran.clear()
    host.call_at(EPOCH + 6.0, note("due"))  # world 8 on the clock as it is
    host.call_at(EPOCH + 13.0, note("later"))  # world 15
    host.call_later(4.0, note("delay"))
    host.step(4.0, noticed=0.5)  # at world 5 the clock reads 7: "due" is past
    world.run_until(EPOCH + 20)
    assert ran == [("due", 5.5, 7.5), ("delay", 9.0, 11.0), ("later", 11.0, 13.0)]


def _stepped(amount: float, until: float = 12.5) -> tuple[Cluster, str, list[int]]:
    """Three instances of a job firing every second, misfire on; at 3.5 s the wall clock
    of one that owns items steps by ``amount``, noticed 0.3 s later; run to ``until``."""
    cluster = _three_running(items=4, misfire=True)
    paths = JobPaths("job0")
    member = cluster.members[1]
    items = [i for i in range(4) if cluster.peek(paths.item_instance(i)) == member.name.encode()]
    assert items, "the stepped instance owns items"
    cluster.step_clock(member, amount, noticed=0.3)
    cluster.world.run_until(EPOCH + until)
    return cluster, member.name, items


def _fires(ledger: Ledger, instance: str, item: int, source: ExecutionSource) -> list[float]:
    return [
        r.fire - EPOCH
        for r in ledger.runs
        if r.instance == instance and r.item == item and r.source is source and r.fire
    ]


def test_after_a_step_back_fires_wait_for_their_second_and_none_runs_twice() -> None:
    cluster, name, items = _stepped(-2.5)
    ledger = cluster.ledger
    for item in items:
        # Fires 1 to 3 before the step; then the clock reads 1.0 again, and fire 4 comes
        # when it reads 4.0: 2.5 s later in the world's time. No second runs twice.
        assert _fires(ledger, name, item, NORMAL) == [float(n) for n in range(1, 11)]
        for run in ledger.runs:
            if run.instance == name and run.item == item and run.start > EPOCH + 3.5:
                assert run.wall == run.fire and run.start == pytest.approx(run.wall + 2.5)
    assert not [s for s in ledger.skips if set(s.items) & set(items)]  # nothing lost
    assert checks.check_overlaps(ledger) == []


def test_after_a_step_forward_the_fires_skipped_are_recorded_and_run_once_as_a_misfire() -> None:
    cluster, name, items = _stepped(2.5)
    ledger = cluster.ledger
    for item in items:
        # At 3.5 the clock reads 6.0; the timer notices at 3.8 (6.3): fires 4 and 5 are
        # more than a second late, recorded skipped; fire 6, 0.3 s late, runs.
        skipped = sorted(
            s.fire - EPOCH for s in ledger.skips if item in s.items and s.instance == name
        )
        assert skipped == [4.0, 5.0]
        assert all(s.reason == MISSED for s in ledger.skips if item in s.items)
        fires = _fires(ledger, name, item, NORMAL)
        assert fires == [1.0, 2.0, 3.0, *(float(n) for n in range(6, 16))]
        # One misfire run stands for both, right after fire 6, before fire 7.
        reruns = [r for r in ledger.runs if r.item == item and r.source is ExecutionSource.MISFIRE]
        assert len(reruns) == 1 and EPOCH + 3.8 <= reruns[0].start < EPOCH + 4.5


def test_fires_run_before_a_step_back_are_not_recorded_later_as_run_by_nobody() -> None:
    """A clock stepped forward runs fires early; put back, it claims (here a trigger) at
    seconds before them. The claim must not stamp its item back: the instance that takes
    the item over after a crash would record the fires run early as fires nobody ran."""
    cluster, name, items = _stepped(2.5, until=5.7)  # ran fires 6 to 8 by then
    member = next(m for m in cluster.members if m.name == name)
    cluster.step_clock(member, -2.5, noticed=0.3)  # its clock reads 5.7 again
    cluster.world.run_until(EPOCH + 5.8)
    cluster.trigger("job0")
    cluster.world.run_until(EPOCH + 6.2)
    cluster.crash(member)
    cluster.world.run_until(EPOCH + 12.5)
    ledger = cluster.ledger
    for item in items:
        assert _fires(ledger, name, item, NORMAL)[-4:] == pytest.approx([6.0, 7.0, 8.0, 5.8])
        # The new owner takes over from fire 9 and records no fire as run by nobody.
        named = [s.fire - EPOCH for s in ledger.skips if item in s.items and s.reason == DEAD_OWNER]
        assert named == []
        after = [r.fire for r in ledger.runs if r.item == item and r.instance != name]
        assert after[0] == EPOCH + 9.0


def _slow(world: World, server: MemoryServer, delays: list[float]) -> FaultyRegistry:
    inner = MemoryRegistry(server, "t", events=SessionEvents(world))
    registry = FaultyRegistry(
        inner, on_break=lambda _outage: None, clock=lambda: world.now, defer=world.at
    )
    registry.start()
    registry.put("/namespace", b"")  # a transaction creates no parents: the namespace's
    drawn = iter(delays)
    registry.slow_requests(lambda: next(drawn))
    return registry


def test_slow_requests_apply_late_in_the_order_sent_while_the_world_goes_on() -> None:
    world, server = World(), MemoryServer()
    registry = _slow(world, server, [1.0, 0.2])
    other = MemoryRegistry(server, "t")
    other.start()
    answers: list[object] = []
    registry.send_transaction([Create("/a")], answers.append)
    registry.send_transaction([Create("/b")], answers.append)  # drawn shorter: still second
    other.create("/c")  # another session goes on meanwhile
    world.run_until(EPOCH + 0.9)
    assert answers == [] and other.get("/a") is None and other.get("/b") is None
    world.run_until(EPOCH + 1.0)
    assert answers == [["/a"], ["/b"]]


def test_a_synchronous_request_applies_after_the_slow_ones_sent_before_it() -> None:
    world, server = World(), MemoryServer()
    registry = _slow(world, server, [1.0])
    answers: list[object] = []
    registry.send_transaction([Create("/a")], answers.append)
    assert registry.get("/a") == b""  # the session's order holds: /a went first
    assert answers == [["/a"]]
    world.run_until(EPOCH + 2)
    assert answers == [["/a"]]  # applied and answered once


def test_a_slow_request_whose_connection_drops_on_the_way_is_never_applied() -> None:
    world, server = World(), MemoryServer()
    registry = _slow(world, server, [1.0])
    answers: list[object] = []
    registry.send_transaction([Create("/a")], answers.append)
    registry.inner.disconnect()
    registry.inner.reconnect()  # the same session, on a new connection
    world.run_until(EPOCH + 2)
    assert len(answers) == 1 and isinstance(answers[0], ConnectionLostError)
    assert server._nodes.get("/t/a") is None


def test_a_registry_that_lost_its_data_gets_its_jobs_registered_again() -> None:
    """Every node and session gone, old sessions refused: the workers give up on them
    after 1.5 session timeouts, register anew, and the config (with the operator's last
    count) and a layout over every live instance come back."""
    jobs = [JobSpec("job0", items=4, period=1, failover=True, misfire=True)]
    cluster = Cluster(jobs, instances=3, session_timeout=2.0, rng=random.Random(5))
    cluster.calm = True
    for member in cluster.members:
        cluster.world.at(EPOCH + 0.3, lambda m=member: cluster.start(m))  # type: ignore[misc]
    cluster.world.run_until(EPOCH + 2.5)
    cluster.change_config("job0", "count", sharding_total_count=5)
    cluster.world.run_until(EPOCH + 3.5)
    cluster.lose_registry_data(1.0)
    # One worker hears of its new session later: the new layout waits for it to join,
    # and the fires due meanwhile wait for the layout.
    cluster.lag(cluster.members[2], 0.6, 5.0)
    paths = JobPaths("job0")
    assert cluster.peek(paths.config) is None
    cluster.world.run_until(EPOCH + 6.4)  # refused until 1.5 timeouts have passed
    assert cluster.peek(paths.config) is None
    cluster.world.run_until(EPOCH + 10.5)
    assert cluster.total("job0") == 5
    names = {m.name for m in cluster.members}
    assert {cluster.peek(paths.item_instance(i)).decode() for i in range(5)} == names  # type: ignore[union-attr]
    assert all(cluster.available(m, "job0") for m in cluster.members)
    assert checks.check_overlaps(cluster.ledger) == []
    late = [r for r in cluster.ledger.runs if r.start > EPOCH + 9]
    assert {r.item for r in late} == set(range(5))
    # Every item-fire since the loss ran or was recorded skipped: cut off, by the owners
    # the old layout named; then, until the new layout is in, by the owners it names.
    outcomes = checks._outcomes(cluster.ledger)
    seconds = range(int(EPOCH) + 4, int(EPOCH) + 10)
    lost = [(t - EPOCH, i) for t in seconds for i in range(5) if not outcomes.get(("job0", i, t))]
    assert lost == []


def test_a_claim_whose_answer_was_lost_runs_its_fire_or_records_it_skipped() -> None:
    """The claim went through but its answer was lost: settled after the reconnect from
    what the registry holds, its item-fire runs late, or is recorded skipped."""
    cluster = _three_running(items=3, misfire=True, failover=True)
    cluster.plant(cluster.members[1], Fault(Timing.AFTER, outage=0.8, kind=Kind.CLAIM))
    cluster.world.run_until(EPOCH + 10.5)
    assert cluster.ledger.faults[str(Timing.AFTER)] == 1
    outcomes = checks._outcomes(cluster.ledger)
    seconds = range(int(EPOCH) + 3, int(EPOCH) + 10)
    lost = [(t - EPOCH, i) for t in seconds for i in range(3) if not outcomes.get(("job0", i, t))]
    assert lost == []
