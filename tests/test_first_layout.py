"""A job's first layout is written ahead of its first fire, once the instances
starting together have joined (Firing._first_layout_ahead, sharding.FirstLayout)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from shardcron.coordination.paths import JobPaths
from shardcron.coordination.sharding import FirstLayout, Joins
from shardcron.simulation.cluster import Cluster, JobSpec
from shardcron.simulation.world import EPOCH

PATHS = JobPaths("job0")


@dataclass(frozen=True)
class EveryTenSeconds(JobSpec):
    @property
    def cron(self) -> str:
        return "*/10 * * * * ?"


def _two_instances(spec: JobSpec, starts: tuple[float, float] = (2.1, 2.6)) -> Cluster:
    """Two instances starting at these seconds after EPOCH (a fire of either cron)."""
    cluster = Cluster([spec], instances=2, session_timeout=2.0, rng=random.Random(1))
    cluster.calm = True
    for member, start in zip(cluster.members, starts, strict=True):
        cluster.world.at(EPOCH + start, lambda m=member: cluster.start(m))  # type: ignore[misc]
    return cluster


def _owners(cluster: Cluster) -> set[bytes | None]:
    return {cluster.peek(PATHS.item_instance(i)) for i in range(4)}


def test_a_first_layout_is_written_ahead_of_the_first_fire_once_everyone_has_joined() -> None:
    """The first fire (EPOCH + 10) is asked for its layout 5 s before its claim; the
    leader writes it for both instances once no join has come for a second, seconds
    before the claim. Written with that claim, as in ElasticJob, a herd's layouts made
    its first fire seconds late."""
    cluster = _two_instances(EveryTenSeconds("job0", 4, 10, failover=False, misfire=True))
    cluster.world.run_until(EPOCH + 4.9)
    assert _owners(cluster) == {None}  # not asked yet
    cluster.world.run_until(EPOCH + 9.5)
    assert _owners(cluster) == {m.name.encode() for m in cluster.members}
    assert not cluster.ledger.runs
    cluster.world.run_until(EPOCH + 10.5)
    assert sorted(run.start for run in cluster.ledger.runs) == [EPOCH + 10] * 4


def test_a_first_fire_sooner_than_that_has_its_layout_written_with_it() -> None:
    """A first fire 1.4 s after the start: no layout ahead (it would wait a quiet second
    after the ask anyway); the fire has it written, as in ElasticJob."""
    spec = JobSpec("job0", items=4, period=2, failover=False, misfire=True)
    cluster = _two_instances(spec, starts=(2.6, 2.9))
    cluster.world.run_until(EPOCH + 3.9)
    assert _owners(cluster) == {None}
    cluster.world.run_until(EPOCH + 4.5)
    assert _owners(cluster) == {m.name.encode() for m in cluster.members}


def test_a_first_layout_asked_ahead_waits_for_a_join_to_any_job_of_the_process() -> None:
    """A job the other instances have not registered yet shows no join of its own: the
    joins to the process's other jobs say they are still starting."""
    joins = Joins()
    layout = FirstLayout(joins)
    assert layout.wait(99.0, fire_waiting=False) == 1.0  # asked: a quiet second first
    joins.last = 100.0  # another instance joined another job of this process
    assert layout.wait(100.5, fire_waiting=False) == 0.5
    assert layout.wait(100.5, fire_waiting=True) == 0.0  # a fire waits for its own joins only
    assert layout.wait(104.5, fire_waiting=False) == 0.0  # at most 5 s after it was asked
