"""A job's first layout is written ahead of its first fire, once the instances
starting together have joined (Firing._first_layout_ahead, sharding.FirstLayout)."""

from __future__ import annotations

import random

from shardcron.paths import JobPaths
from shardcron.sharding import FirstLayout, Joins
from shardcron.simulation.cluster import Cluster, JobSpec
from shardcron.simulation.world import EPOCH


def test_a_first_layout_is_written_ahead_of_the_first_fire_once_everyone_has_joined() -> None:
    """Two instances starting a moment apart: the leader writes the first layout for both
    once neither has seen a join for a second, before the first fire's claim; written
    with that claim, as in ElasticJob, a herd's layouts made its first fire seconds late."""
    paths = JobPaths("job0")
    jobs = [JobSpec("job0", items=4, period=2, failover=False, misfire=True)]
    cluster = Cluster(jobs, instances=2, session_timeout=2.0, rng=random.Random(1))
    cluster.calm = True
    first, second = cluster.members
    cluster.world.at(EPOCH + 2.1, lambda: cluster.start(first))
    cluster.world.at(EPOCH + 2.6, lambda: cluster.start(second))
    cluster.world.run_until(EPOCH + 3.5)
    assert cluster.peek(paths.item_instance(0)) is None  # still waiting for a quiet second
    cluster.world.run_until(EPOCH + 3.9)  # the first fire (EPOCH + 4) is not claimed yet
    owners = {cluster.peek(paths.item_instance(i)) for i in range(4)}
    assert owners == {first.name.encode(), second.name.encode()}
    assert not cluster.ledger.runs


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
