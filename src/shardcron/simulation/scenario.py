"""One seed: a random cluster, a random schedule of faults and operator actions, the checks.

A seed draws everything from ``random.Random(seed)``: 3 to 5 instances, one job (two in
a quarter of the seeds) of 2 to 6 items firing every 1 or 2 seconds, failover and
misfire on or off, a session timeout of 2 or 2.5 seconds. After a 1.5 s warm-up, a
chaos window of 3 to 5 virtual seconds holds up to 6 disturbances (and, in a quarter of
the seeds, a step of one instance's wall clock: :func:`plan_clock_step`); then the cluster runs
calm (short items, no faults) until a fire or two past the quiet time (see
:mod:`shardcron.simulation.checks`), and the checks run. Seeds are kept this small
because CI explores 10,000 of them in 4 minutes on 2 cores.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from shardcron.coordination import claims, groupcommit, sharding
from shardcron.simulation import checks, speed
from shardcron.simulation.cluster import AFTER_FIRE, Cluster, JobSpec, Member
from shardcron.simulation.faults import Fault, Kind, Timing
from shardcron.simulation.ledger import Ledger
from shardcron.simulation.world import EPOCH, Phase

WARM_UP = 1.5
# How far an operator moves a job's item count at once (from the current count, within 2-6).
COUNT_MOVES = (-3, -2, -1, 1, 2, 3)
# Kinds a random lost request aims at (None: whatever request comes next).
AIMS: list[Kind | None] = [None, None, *Kind]


@dataclass
class Result:
    seed: int
    faults: Counter[str] = field(default_factory=Counter)
    actions: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    item_fires: int = 0
    excused: Counter[str] = field(default_factory=Counter)  # see checks.Verdict
    near: dict[str, Counter[str]] = field(default_factory=dict)  # see checks.Verdict
    skipped: Counter[str] = field(default_factory=Counter)  # item-fires skipped, by reason
    violations: list[str] = field(default_factory=list)
    timeline: list[tuple[float, str]] = field(default_factory=list)

    epoch: float = EPOCH

    def replay(self) -> str:
        return f"python -m shardcron.simulation --seed {self.seed} --verbose"


def random_cluster(seed: int, verbose: bool = False) -> Cluster:
    rng = random.Random(seed)
    jobs = [
        JobSpec(
            name=f"job{n}",
            items=rng.randint(2, 6),
            period=rng.choice((1, 2)),
            failover=rng.random() < 0.5,
            misfire=rng.random() < 0.5,
        )
        for n in range(2 if rng.random() < 0.25 else 1)
    ]
    return Cluster(jobs, rng.randint(3, 5), rng.choice((2.0, 2.5)), rng, verbose)


def plan_chaos(cluster: Cluster, start: float, length: float) -> None:
    """Schedule up to 6 random disturbances in ``[start, start + length)``."""
    rng, world, timeout = cluster.rng, cluster.world, cluster.session_timeout
    for _ in range(rng.randint(0, 6)):
        at = start + rng.uniform(0, length)
        member = rng.choice(cluster.members)
        job = rng.choice(cluster.jobs).name
        act = _chaos_actions(cluster, member, job, rng, timeout)
        name = rng.choice(sorted(act))
        if name == "graceful-stop":  # its items outlast the grace: they started long
            world.at(at - 2.0, lambda m=member: setattr(m, "long_items", True))  # type: ignore[misc]
        world.at(at, act[name])


def _chaos_actions(
    cluster: Cluster, member: Member, job: str, rng: random.Random, timeout: float
) -> dict[str, Callable[[], None]]:
    outage = rng.uniform(0.05, timeout * 1.6)
    aim = rng.choice(AIMS)
    total = cluster.totals[job]
    return {
        "lost-before": lambda: cluster.plant(member, Fault(Timing.BEFORE, outage, aim)),
        "lost-after": lambda: cluster.plant(member, Fault(Timing.AFTER, outage, aim)),
        "outage": lambda: cluster.partition(member, outage),
        "expire": lambda: cluster.expire(member),
        "cache-lag": lambda: cluster.lag(member, rng.uniform(0.05, 0.5), rng.uniform(1, 3)),
        "slow-answers": lambda: cluster.slow_answers(
            member, rng.uniform(0.1, 0.9), rng.uniform(1, 3)
        ),
        # Half of them on the job's leader, whose layout commits are sent so too.
        "slow-requests": lambda: cluster.slow_requests(
            (rng.random() < 0.5 and cluster.leader(job)) or member,
            rng.uniform(0.3, 1.5),
            rng.uniform(1, 3),
        ),
        "crash": lambda: cluster.crash(member),
        "stall": lambda: cluster.stall(member, timeout + rng.uniform(0.3, 1.5)),
        # A GC pause or a short SIGSTOP: the session survives it (see Cluster.stall).
        "pause": lambda: cluster.stall(member, rng.uniform(0.3, timeout * 0.8)),
        "registry-restart": lambda: cluster.restart_registry(rng.uniform(0.2, timeout * 0.8)),
        "registry-lost-data": lambda: cluster.lose_registry_data(rng.uniform(0.2, timeout)),
        "shutdown": lambda: cluster.shutdown(member),
        "disable": lambda: _disable_for(cluster, member, rng.uniform(0.5, 4.0)),
        "failover": lambda: _toggle_failover(cluster, job),
        "count": lambda: cluster.change_config(
            job, "count", sharding_total_count=max(2, min(6, total + rng.choice(COUNT_MOVES)))
        ),
        "trigger": lambda: cluster.trigger(job),
        "graceful-stop": lambda: cluster.graceful_stop(member),
    }


def _disable_for(cluster: Cluster, member: Member, length: float) -> None:
    cluster.set_server(member, enabled=False)
    cluster.world.at(cluster.world.now + length, lambda: cluster.set_server(member, True))


def _toggle_failover(cluster: Cluster, job: str) -> None:
    stored = cluster.peek(f"/{job}/config")
    on = stored is not None and b"failover: true" in stored
    cluster.change_config(job, "failover", failover=not on)


def _run_to_quiet(cluster: Cluster, chaos_end: float) -> tuple[float, float]:
    """Run through the chaos, then calm until two fires past the quiet time; a late
    disturbance (a reconnect, a kill at the end of a grace) pushes the end further.
    Returns the quiet time and the end of the fires the checks look at."""
    world, ledger = cluster.world, cluster.ledger
    world.run_until(chaos_end)
    cluster.calm = True
    period = max(job.period for job in cluster.jobs)
    align = 2 if period == 2 else 1
    while True:
        # A long item keeps later fires of its item busy: it counts like a disturbance.
        last = max([EPOCH + WARM_UP, cluster.long_until, *ledger.disturbances])
        # A member whose clock a step left ahead fires each second that much earlier in
        # the world's time, one left behind that much later: the quiet time waits for the
        # first, the end for the second.
        offsets = [m.host.offset for m in cluster.members if m.node.phase is not Phase.DEAD]
        ahead, behind = max([0.0, *offsets]), max([0.0, *(-o for o in offsets)])
        quiet = last + cluster.session_timeout + 2 * period + ahead
        # Just after a fire of every job has run: between fires, so no item should run.
        whole = math.ceil(quiet + period + behind)
        end = whole + whole % align + AFTER_FIRE
        world.run_until(end)
        if max([last, *ledger.disturbances]) == last:
            return quiet, end - behind


def run(cluster: Cluster, chaos_end: float) -> Result:
    """Start every member, run through ``chaos_end``, then calm until the checks can run."""
    world = cluster.world
    for member in cluster.members:
        world.at(EPOCH + 0.3 + 0.01 * member.index, lambda m=member: cluster.start(m))  # type: ignore[misc]
    for track in cluster.tracks:
        _probe_every(cluster, track, EPOCH + 2 * track.period)
    with speed.yaml_once(), speed.logging_off():
        quiet, checked = _run_to_quiet(cluster, chaos_end)
    ledger = cluster.ledger
    verdict = checks.check(ledger, cluster.tracks, cluster.session_timeout, checked, quiet)
    available = {
        j.name: {m.name for m in cluster.members if cluster.available(m, j.name)}
        for j in cluster.jobs
    }
    # Only a job with a live enabled instance left has anybody to repair its nodes.
    alive = [job for job, names in available.items() if names]
    verdict.violations += checks.check_registry(
        ledger, alive, cluster.peek, cluster.kids, cluster.claimed_ahead
    )
    totals = {job.name: cluster.total(job.name) for job in cluster.jobs}
    verdict.violations += checks.check_layouts(available, totals, cluster.peek)
    return Result(
        seed=-1,
        faults=ledger.faults,
        actions=ledger.actions,
        errors=ledger.errors,
        item_fires=verdict.item_fires,
        excused=verdict.excused,
        near=verdict.near,
        skipped=_skipped(ledger),
        violations=verdict.violations,
        timeline=ledger.timeline,
    )


def _skipped(ledger: Ledger) -> Counter[str]:
    skipped: Counter[str] = Counter()
    for skip in ledger.skips:
        skipped[skip.reason] += len(skip.items)
    return skipped


def _probe_every(cluster: Cluster, track: checks.JobTrack, at: float) -> None:
    def probe() -> None:
        cluster.probe(track)
        _probe_every(cluster, track, at + track.period)

    cluster.world.at(at, probe)


# A quarter of the seeds claim in parts of one item, write layouts a few owners per
# transaction and cut group commits into multi-ops of a few ops: a fire too big for one transaction is claimed as several
# (claims.in_parts), a layout is written as several (sharding.write). Drawn apart
# from the seed's own stream, so that every seed keeps the scenario it had before.
IN_PARTS_SHARE = 0.25
IN_PARTS_BYTES = 400
IN_PARTS_OPS = 5  # and cut each tick's group commit into multi-ops of a few ops


# A share of the seeds steps one member's wall clock in the chaos window, back or forward
# by 0.5 to 4 s, and in half of those steps it back to the world's time later (the
# correction). Drawn apart from the seed's own stream, as the parts above.
CLOCK_STEP_SHARE = 0.25
CLOCK_STEP_SECONDS = (0.5, 4.0)
CLOCK_CORRECTED_SHARE = 0.5


def plan_clock_step(cluster: Cluster, seed: int, start: float, length: float) -> None:
    """Maybe schedule a step of one member's wall clock, and its correction."""
    rng = random.Random(f"clock-{seed}")
    if rng.random() >= CLOCK_STEP_SHARE:
        return
    member = rng.choice(cluster.members)
    at = start + rng.uniform(0, length)
    amount = rng.uniform(*CLOCK_STEP_SECONDS) * rng.choice((-1, 1))
    # The timer notices a step within a second (timers.CLOCK_CHECK_SECONDS).
    noticed = rng.uniform(0, 1), rng.uniform(0, 1)
    cluster.world.at(at, lambda: cluster.step_clock(member, amount, noticed[0]))
    if rng.random() < CLOCK_CORRECTED_SHARE:
        later = at + rng.uniform(0.5, 3.0)
        # Back to the world's time, whatever other steps did meanwhile.
        cluster.world.at(later, lambda: cluster.step_clock(member, -member.host.offset, noticed[1]))


def run_seed(seed: int, verbose: bool = False) -> Result:
    cluster = random_cluster(seed, verbose)
    length = cluster.rng.uniform(3.0, 5.0)
    plan_chaos(cluster, EPOCH + WARM_UP, length)
    plan_clock_step(cluster, seed, EPOCH + WARM_UP, length)
    in_parts = random.Random(f"parts-{seed}").random() < IN_PARTS_SHARE
    limits = claims.PART_BYTES, sharding.LAYOUT_BYTES, groupcommit.MAX_CHUNK_OPS
    if in_parts:
        claims.PART_BYTES = sharding.LAYOUT_BYTES = IN_PARTS_BYTES
        groupcommit.MAX_CHUNK_OPS = IN_PARTS_OPS
    try:
        result = run(cluster, EPOCH + WARM_UP + length)
    finally:
        claims.PART_BYTES, sharding.LAYOUT_BYTES, groupcommit.MAX_CHUNK_OPS = limits
    result.seed = seed
    return result
