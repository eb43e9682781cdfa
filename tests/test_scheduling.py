"""The scheduling core against a real ZooKeeper: several instances, each with its own session."""

from __future__ import annotations

import time

from shardcron.config.job import JobConfig
from shardcron.coordination.paths import JobPaths
from shardcron.coordination.strategies import avg_allocation, order_instances
from shardcron.scheduler.process import Scheduler
from shardcron.testing.zookeeper import ZooKeeperServer
from tests.cluster import Recorder, cluster, overlaps
from tests.helpers import wait_until

A, B, C, D = (f"127.0.0.{n}@-@{1000 + n}" for n in range(1, 5))


def every_second(name: str, items: int, **settings: object) -> JobConfig:
    return JobConfig(job_name=name, cron="* * * * * ?", sharding_total_count=items, **settings)  # type: ignore[arg-type]


def expected(instances: list[str], items: int, job: str) -> dict[int, str]:
    plan = avg_allocation(order_instances(instances), job, items)
    return {item: owner for owner, owned in plan.items() for item in owned}


def seen_by_all(schedulers: dict[str, Scheduler], job: str, instance: str) -> float:
    """When every instance's cache shows ``instance``, plus the claim lead: a fire claimed
    earlier may still use the layout from before it joined."""
    node = JobPaths(job).instance(instance)
    wait_until(
        lambda: all(s.runtimes[job].cache.exists(node) for s in schedulers.values()),
        what=f"every cache to show {instance}",
    )
    return time.time() + 0.2


def test_items_follow_avg_allocation_and_a_joining_instance_reshards(
    zookeeper: ZooKeeperServer,
) -> None:
    recorder = Recorder()
    with cluster(zookeeper, every_second("share", 6), recorder) as c:
        for instance in (A, B, C):
            c.start(instance)
        start = seen_by_all(c.schedulers, "share", C)
        assert recorder.owners_in_fire(start, 6) == expected([A, B, C], 6, "share")

        c.start(D)
        joined = seen_by_all(c.schedulers, "share", D)
        assert recorder.owners_in_fire(joined, 6) == expected([A, B, C, D], 6, "share")


def test_leader_loss_reelects_and_resharding_still_works(zookeeper: ZooKeeperServer) -> None:
    recorder = Recorder()
    paths = JobPaths("lead")
    with cluster(zookeeper, every_second("lead", 4), recorder) as c:
        c.start(A)
        wait_until(lambda: c.admin.get(paths.election_instance) == A.encode(), what="A to lead")
        c.start(B)
        c.start(C)
        dead = c.schedulers.pop(A)
        dead.registry.close()  # the leader's session ends abruptly
        dead.stop(grace=0)  # and its process goes away (no more fires, no log noise)
        new_leader = wait_until(lambda: c.admin.get(paths.election_instance), what="a new leader")
        assert new_leader is not None and new_leader.decode() in (B, C)
        after = time.time()
        wait_until(
            lambda: recorder.owners_in_fire(after, 4) == expected([B, C], 4, "lead"),
            timeout=15,
            what="resharding over B and C",
        )
        c.start(D)
        joined = time.time()
        wait_until(
            lambda: recorder.owners_in_fire(joined, 4) == expected([B, C, D], 4, "lead"),
            timeout=15,
            what="resharding after D joined under the new leader",
        )


def test_disabling_a_server_moves_its_items_and_enabling_brings_them_back(
    zookeeper: ZooKeeperServer,
) -> None:
    recorder = Recorder()
    paths = JobPaths("disable")
    with cluster(zookeeper, every_second("disable", 4), recorder) as c:
        for instance in (A, B):
            c.start(instance)
        start = time.time()
        assert recorder.owners_in_fire(start, 4) == expected([A, B], 4, "disable")
        c.admin.put(paths.server("127.0.0.1"), b"DISABLED")  # A's host, as the console writes it
        moment = time.time()
        wait_until(
            lambda: set(recorder.owners_in_fire(moment, 4).values()) == {B},
            timeout=15,
            what="all items on B",
        )
        c.admin.put(paths.server("127.0.0.1"), b"ENABLED")
        moment = time.time()
        wait_until(
            lambda: recorder.owners_in_fire(moment, 4) == expected([A, B], 4, "disable"),
            timeout=15,
            what="items back on A",
        )


def test_disabled_item_is_skipped(zookeeper: ZooKeeperServer) -> None:
    recorder = Recorder()
    paths = JobPaths("itemoff")
    with cluster(zookeeper, every_second("itemoff", 3), recorder) as c:
        c.start(A)
        recorder.owners_in_fire(time.time(), 3)
        c.admin.put(paths.disabled(1), b"")
        wait_until(lambda: c.schedulers[A].runtimes["itemoff"].cache.exists(paths.disabled(1)))
        moment = time.time() + 1
        wait_until(lambda: len({int(r.start) for r in recorder.since(moment)}) >= 3, what="3 fires")
        assert {r.item for r in recorder.since(moment)} == {0, 2}


def test_trigger_runs_a_one_off_job_once_on_every_instance(zookeeper: ZooKeeperServer) -> None:
    recorder = Recorder()
    paths = JobPaths("oneoff")
    config = JobConfig(
        job_name="oneoff", sharding_total_count=4
    )  # no cron: runs only when triggered
    with cluster(zookeeper, config, recorder) as c:
        for instance in (A, B):
            c.start(instance)
        for instance in (A, B):  # what the Java lifecycle API and console write
            c.admin.create(paths.trigger(instance))
        wait_until(lambda: len(recorder.runs) >= 4, what="the triggered items")
        wait_until(lambda: not c.admin.children(paths.triggers), what="triggers consumed")
        assert sorted(r.item for r in recorder.runs) == [0, 1, 2, 3]
        assert {r.instance for r in recorder.runs} == {A, B}


def test_steady_fires_never_overlap_and_never_skip(zookeeper: ZooKeeperServer) -> None:
    recorder = Recorder(hold=0.05)
    with cluster(zookeeper, every_second("steady", 6), recorder) as c:
        for instance in (A, B, C):
            c.start(instance)
        first = recorder.owners_in_fire(time.time(), 6)
        begin = min(r.start for r in recorder.runs if r.item in first) // 1
        # A run is recorded when it ends: wait for a 51st fire so the 50th is complete.
        wait_until(
            lambda: len({int(r.start) for r in recorder.since(begin)}) >= 51,
            timeout=75,
            what="51 fires",
        )
        runs = [r for r in recorder.since(begin) if r.start < begin + 50]
    assert overlaps(runs) == []
    per_fire: dict[int, list[int]] = {}
    for run in runs:
        per_fire.setdefault(int(run.start), []).append(run.item)
    incomplete = {
        s: sorted(items) for s, items in per_fire.items() if sorted(items) != list(range(6))
    }
    assert incomplete == {}
    assert len(per_fire) == 50


def test_round_trip_budget_per_fire(zookeeper: ZooKeeperServer) -> None:
    """At most 2 registry round trips per fire for an instance with items, 0 without."""
    recorder = Recorder()
    with cluster(zookeeper, every_second("budget", 2), recorder) as c:
        for instance in (A, B, C):
            c.start(instance)
        owners = recorder.owners_in_fire(time.time(), 2)
        idle = ({A, B, C} - set(owners.values())).pop()
        busy = sorted(set(owners.values()))
        first_fire = int(time.time()) + 1
        wait_until(lambda: time.time() >= first_fire, what="a fire boundary")
        counts = {i: c.schedulers[i].registry.request_count for i in (A, B, C)}
        wait_until(
            lambda: len({int(r.start) for r in recorder.since(first_fire)}) >= 10, timeout=20
        )
        # Read the counters between fires, once the tenth fire has completed.
        wait_until(lambda: time.time() % 1 > 0.5, what="the middle of a second")
        fires = len({int(r.start) for r in recorder.since(first_fire)})
        used = {i: c.schedulers[i].registry.request_count - counts[i] for i in (A, B, C)}
    assert used[idle] == 0, used
    for instance in busy:
        assert used[instance] <= 2 * fires, (used, fires)


def test_an_instance_id_held_by_a_live_session_is_refused(zookeeper: ZooKeeperServer) -> None:
    recorder = Recorder()
    with cluster(zookeeper, every_second("dupid", 2), recorder) as c:
        c.start(A)
        twin = Scheduler(c.registry(), instance_id=A)
        twin.add_job(c.config, recorder.job_for(A))
        twin.start()
        try:
            assert "dupid" in twin.failed
            assert "already registered by a live session" in str(twin.failed["dupid"])
            assert not twin.runtimes
        finally:
            twin.stop()


def test_a_different_job_under_the_same_name_is_refused(zookeeper: ZooKeeperServer) -> None:
    recorder = Recorder()
    with cluster(zookeeper, every_second("clash", 1, callable="tests.jobs:ledger"), recorder) as c:
        c.admin.put("/clash", b"billing.jobs:settle")  # another application's job
        scheduler = Scheduler(c.registry(), instance_id=A)
        scheduler.add_job(c.config, recorder.job_for(A))
        scheduler.start()
        try:
            assert "different job under this name" in str(scheduler.failed["clash"])
        finally:
            scheduler.stop()


def test_registry_config_wins_unless_overwrite(zookeeper: ZooKeeperServer) -> None:
    recorder = Recorder()
    paths = JobPaths("owner")
    with cluster(zookeeper, every_second("owner", 2), recorder) as c:
        c.start(A)
        stored = JobConfig.from_yaml((c.admin.get(paths.config) or b"").decode())
        assert stored.sharding_total_count == 2
        c.start(B, every_second("owner", 5))  # a stale local config does not win
        assert c.schedulers[B].runtimes["owner"].config.sharding_total_count == 2
        c.start(C, every_second("owner", 3, overwrite=True))  # overwrite does
        stored = JobConfig.from_yaml((c.admin.get(paths.config) or b"").decode())
        assert stored.sharding_total_count == 3


def test_config_updates_reshard_and_reschedule(zookeeper: ZooKeeperServer) -> None:
    recorder = Recorder()
    paths = JobPaths("live")
    with cluster(zookeeper, every_second("live", 2), recorder) as c:
        for instance in (A, B):
            c.start(instance)
        recorder.owners_in_fire(time.time(), 2)
        stored = JobConfig.from_yaml((c.admin.get(paths.config) or b"").decode())
        c.admin.put(paths.config, stored.with_changes(sharding_total_count=4).to_yaml().encode())
        changed = time.time()
        assert recorder.owners_in_fire(changed, 4) == expected([A, B], 4, "live")
        c.admin.put(
            paths.config,
            stored.with_changes(sharding_total_count=4, cron="0/3 * * * * ?").to_yaml().encode(),
        )
        rescheduled = time.time() + 1
        wait_until(
            lambda: len({int(r.start) for r in recorder.since(rescheduled)}) >= 3, timeout=15
        )
        assert all(int(r.start) % 3 == 0 for r in recorder.since(rescheduled))


def test_a_leader_whose_server_is_disabled_abdicates(zookeeper: ZooKeeperServer) -> None:
    recorder = Recorder()
    paths = JobPaths("abdicate")
    with cluster(zookeeper, every_second("abdicate", 2), recorder) as c:
        c.start(A)
        wait_until(lambda: c.admin.get(paths.election_instance) == A.encode(), what="A leads")
        c.start(B)
        c.admin.put(paths.server("127.0.0.1"), b"DISABLED")
        wait_until(
            lambda: c.admin.get(paths.election_instance) == B.encode(),
            timeout=10,
            what="B to lead once A's server is disabled",
        )
