"""Systematic fault points (issue 12, point 8).

Every coordination request kind x {lost before applied, applied with the answer lost} x
{leader, follower}: on the simulated cluster (embedded registry, virtual time), the fault
is planted on the target after warm-up and breaks the target's first request of that
kind; a fixed script then makes every kind of request happen (a long item for the
misfire flags, a ``shardingTotalCount`` change for resharding, two crashes for failover,
a session expiry for registration and election), the cluster calms down, and I1 to I4
of :mod:`shardcron.simulation.checks` must hold.

A resharding that fits one transaction creates ``processing`` inside it; only one cut into
several creates it first, on its own: the ``reshard-processing`` points shrink the
transaction limit so that this job's resharding is cut.

Resharding and failover queueing are the leader's requests: the follower variant breaks
the first one it makes once it has been elected, after the old leader's session ended
(its fault waits, planted, until then). Every planted fault must fire.
"""

from __future__ import annotations

import random

import pytest

from shardcron.coordination import sharding
from shardcron.simulation.cluster import Cluster, JobSpec, Member
from shardcron.simulation.faults import Fault, Kind, Timing
from shardcron.simulation.scenario import run
from shardcron.simulation.world import EPOCH

KINDS = [kind for kind in Kind if kind is not Kind.OTHER]
WARM_UP = 2.5
SCRIPT_END = 24.0
OUTAGE = 1.0  # shorter than the session timeout: the session survives the fault


def _at(cluster: Cluster, t: float, fn: object) -> None:
    cluster.world.at(EPOCH + t, fn)  # type: ignore[arg-type]


def _script(cluster: Cluster, target: Member, leader: Member, others: list[Member]) -> None:
    """Provoke every request kind from ``target`` (see the module docstring)."""
    job = cluster.jobs[0].name

    def long_items(member: Member, on: bool) -> None:
        member.long_items = on

    # A long item: the next fire skips it (misfire flag written), its end takes the flag.
    _at(cluster, 2.6, lambda: long_items(target, True))
    _at(cluster, 3.5, lambda: long_items(target, False))
    # Resharding by the leader.
    _at(cluster, 8.0, lambda: cluster.change_config(job, "count", sharding_total_count=7))
    # Two instances die while running items: the leader queues them, the survivors claim.
    victims = [m for m in cluster.members if m not in (target, leader)][-2:]
    if target is leader:
        victims = others[-2:]
    for victim in victims:
        _at(cluster, 10.5, lambda v=victim: long_items(v, True))
        _at(cluster, 11.1, lambda v=victim: cluster.crash(v))
    survivor = next(m for m in cluster.members if m not in victims and m is not target)
    if target is leader:
        # The other survivor is disabled, so the leader, back with a new session, is
        # the only one to elect itself (and registers again).
        _at(cluster, 17.0, lambda: cluster.set_server(survivor, enabled=False))
        _at(cluster, 18.0, lambda: cluster.expire(target))
        _at(cluster, 21.0, lambda: cluster.set_server(survivor, enabled=True))
    else:
        # The leader's session ends: the follower elects itself (and reshards); then it
        # registers again; then the old leader dies running items, and the follower, last
        # one standing and leader again, queues them for failover.
        _at(cluster, 18.0, lambda: cluster.expire(leader))
        _at(cluster, 20.0, lambda: cluster.expire(target))
        _at(cluster, 21.5, lambda: long_items(leader, True))
        _at(cluster, 22.1, lambda: cluster.crash(leader))


@pytest.mark.parametrize("role", ["leader", "follower"])
@pytest.mark.parametrize("timing", list(Timing), ids=[t.value for t in Timing])
@pytest.mark.parametrize("kind", KINDS, ids=[k.value for k in KINDS])
def test_fault_point(
    kind: Kind, timing: Timing, role: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if kind is Kind.RESHARD_PROCESSING:
        monkeypatch.setattr(sharding, "LAYOUT_BYTES", 400)  # a few owners each
    jobs = [JobSpec("job0", items=6, period=1, failover=True, misfire=True)]
    cluster = Cluster(jobs, instances=4, session_timeout=2.0, rng=random.Random(12))
    fault = Fault(timing, OUTAGE, kind)

    def plant() -> None:
        leader = cluster.leader("job0")
        assert leader is not None, "no leader after warm-up"
        others = [m for m in cluster.members if m is not leader]
        target = leader if role == "leader" else others[0]
        cluster.plant(target, fault)
        _script(cluster, target, leader, others)

    _at(cluster, WARM_UP, plant)
    result = run(cluster, EPOCH + SCRIPT_END)

    assert result.violations == [], "\n".join(result.violations)
    assert fault.fired, f"the script never made the {role} send a {kind} request"
    assert result.item_fires > 0
