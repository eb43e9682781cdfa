"""The checks catch the defects they exist for: each defect fixed once is put back into a
copy of the source, one at a time, and the test or the simulated seed named for it must
then fail. A check that passes with its defect back in place checks nothing.

Each mutation is a textual edit that must apply exactly once, so a refactoring that moves
the code makes this test fail loudly instead of passing by no longer mutating anything.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutation:
    name: str
    module: str  # below src/shardcron
    fixed: str  # the code as fixed
    broken: str  # the defect put back
    caught_by: list[str]  # a pytest node id, or simulation arguments ("--seed N")


def named(module: str, test: str) -> str:
    return f"tests/{module}::{test}"


MUTATIONS = [
    Mutation(
        "case 1: a ZooKeeper that lost its data strands its workers",
        "registry/zookeeper.py",
        "                self._renew(since)\n            self._publish(SessionState.EXPIRED)",
        "                return",
        ["tests/test_registry_data_loss.py"],
    ),
    Mutation(
        "case 2: fires of a killed owner before its session ends vanish",
        "coordination/inherited.py",
        "        misfires.skip(missed[second], DEAD_OWNER, second)\n",
        "        pass\n",
        [
            named(
                "test_simulation.py",
                "test_fires_of_a_killed_owner_before_its_session_ends_are_recorded_by_the_new_owner",
            )
        ],
    ),
    Mutation(
        "case 3: fires of an item held by a failover run are dropped silently",
        "coordination/firing.py",
        "            self.misfires.skip(held, FAILED_OVER, when, source=source)\n",
        "",
        [
            named(
                "test_misfire.py",
                "test_a_fire_of_an_item_held_by_a_failover_run_is_skipped_then_rerun_once_it_ends",
            )
        ],
    ),
    Mutation(
        "case 4: a fire due during a short pause is lost with a log line",
        "coordination/firetimer.py",
        '            self.rt.guarded(lambda: self.firing.missed(when), "missed fire")\n',
        "",
        [
            named(
                "test_misfire.py",
                "test_a_fire_due_during_a_short_pause_is_recorded_skipped_and_runs_once_after",
            )
        ],
    ),
    Mutation(
        "case 4b: a misfire after a pause names its own start, not the fire it catches up",
        "coordination/misfires.py",
        "start_at=not_before or None)",
        "start_at=not_before if not_before > now else None)",
        [
            named(
                "test_pauses_and_clock_steps.py",
                "test_a_fire_due_while_a_worker_is_paused_is_recorded_skipped_then_run_once_as_a_misfire[misfire]",
            )
        ],
    ),
    Mutation(
        "case 5: a step back of the wall clock freezes every timer",
        "scheduler/timers.py",
        "        if abs(step) < STEP_SECONDS:\n            return",
        "        return",
        [
            named(
                "test_timers.py",
                "test_after_a_step_back_delays_keep_their_length_and_fires_wait_for_their_time",
            )
        ],
    ),
    Mutation(
        "case 5b: the time-diff check goes on trusting what it measured before a clock step",
        "scheduler/timers.py",
        "        self._coordinate(self._stepped)\n",
        "",
        [
            named(
                "test_pauses_and_clock_steps.py",
                "test_a_worker_whose_wall_clock_steps_back_then_forward_runs_no_fire_twice",
            )
        ],
    ),
    Mutation(
        "case 5c: a step of the wall clock throws the claim lead off",
        "coordination/claimlead.py",
        "        self._clock = host.monotonic\n",
        "        self._clock = host.now\n",
        [
            named(
                "test_claimlead.py",
                "test_a_step_of_the_wall_clock_neither_lengthens_nor_shortens_the_lead",
            )
        ],
    ),
    Mutation(
        "case 6: dropping an item beyond the count deletes a claim the cache did not show",
        "coordination/healing.py",
        "        for item in found.items_beyond_count:\n            self._drop_item(item)",
        "        for item in found.items_beyond_count:\n"
        "            rt.registry.delete(paths.item(item), recursive=True)",
        [
            named(
                "test_late_repairs.py",
                "test_dropping_an_item_beyond_the_count_spares_a_claim_the_cache_did_not_show",
            )
        ],
    ),
    Mutation(
        "case 7: a late stale-claim repair deletes the claim made since",
        "coordination/healing.py",
        "            Check(paths.item(item), item_node[1].version),\n",
        "",
        [
            "tests/test_late_repairs.py::test_a_late_stale_claim_repair_leaves_the_claim_made_since_alone"
        ],
    ),
    Mutation(
        "an embedded registry that lost its data strands its sessions",
        "registry/memory.py",
        "            self._renewed = (self._sid, self._seen, since)\n"
        "            self._publish(SessionState.EXPIRED)\n"
        "            self._attempt()\n",
        "            return\n",
        [
            named(
                "test_registry_contract.py",
                "test_a_registry_that_lost_its_data_gets_a_new_session_and_says_so[memory]",
            )
        ],
    ),
    Mutation(
        "fires that waited for a first layout vanish unrecorded",
        "coordination/layoutwait.py",
        "                earlier.append((older.when, older.source, older.only))\n",
        "                pass\n",
        ["--seed", "109"],  # found by the CI seed budget (I2: a fire neither run nor recorded)
    ),
    Mutation(
        "a completion that is not conditional on its claim",
        "coordination/claims.py",
        "return [Check(paths.item(item), version), Delete(paths.running(item)), *extra]",
        "return [Delete(paths.running(item)), *extra]",
        ["--seed", "2672"],  # found by the CI seed budget (I1: two runs at once)
    ),
    Mutation(
        "a claim whose answer was lost is forgotten",
        "coordination/firing.py",
        '        reconnected."""\n        self._unsure.append(fire)',
        '        reconnected."""\n        self.drop(fire)',
        ["--seed", "1"],  # found by the CI seed budget (I2)
    ),
    Mutation(
        "a claim after a step back of the clock stamps its item back",
        "coordination/firing.py",
        "        self._stamped = max(self._stamped, at)\n        return self._stamped",
        "        return at",
        [
            named(
                "test_simulation.py",
                "test_fires_run_before_a_step_back_are_not_recorded_later_as_run_by_nobody",
            )
        ],
    ),
    Mutation(
        "a leader whose clock is behind stamps a repaired item back",
        "coordination/healing.py",
        "        since = max(now - claims.UNRUN_SECONDS, claims.stamped(item_node[0]) or 0.0)",
        "        since = now - claims.UNRUN_SECONDS",
        ["--seed", "6785"],  # found by the seeds with clock steps (I2: a false record)
    ),
    Mutation(
        "a failover claim on a clock behind stamps its item back",
        "coordination/failover.py",
        "        since = queued_at if stamp is None else stamp",
        "        since = queued_at",
        ["--seed", "5106"],  # found by the seeds with clock steps (I2: a false record)
    ),
    Mutation(
        "a failover claim whose cache showed the queue late stamps past fires nobody ran",
        "coordination/failover.py",
        "        since = queued_at if stamp is None else stamp",
        "        since = max(queued_at, stamp or 0.0)",
        ["--seed", "9066"],  # a cache lag (I2: a fire lost silently)
    ),
    Mutation(
        "an item whose owner dies before claiming it leaves no stamp",
        "coordination/sharding.py",
        "                ops.append(Create(paths.item(item), later.get(item, since)))",
        "                ops.append(Create(paths.item(item)))",
        ["--seed", "199"],  # I2: the dead first owner's item-fire is lost silently
    ),
    Mutation(
        "the fire a dead owner's claim was for is not recorded",
        "coordination/healing.py",
        "        inherited.record_held(rt, rt.trigger, rt.firing.misfires, item, value)\n",
        "",
        ["--seed", "2761"],
    ),
    Mutation(
        "a catch-up run overwrites a gained item's stamp unread",
        "coordination/firing.py",
        "            at = max(when, self.rt.host.now()) if catch_up else when\n",
        "            at = when\n",
        ["--seed", "634"],  # I2: the fire its owner missed while cut off is lost silently
    ),
    Mutation(
        "a read with no layout (the data lost) makes the next layout gain nothing",
        "coordination/localitems.py",
        "            self._read = (key, tuple(mine), enabled)\n            if owners:\n",
        "            self._read = (key, tuple(mine), enabled)\n            if True:\n",
        ["--seed", "1647"],  # I2: the new owner's fire missed while cut off is lost silently
    ),
    Mutation(
        "a leader whose cache never shows its own layout misses the items it got back",
        "coordination/sharding.py",
        "        rt.firing.written(assignment.get(rt.instance, []))\n",
        "",
        ["--seed", "1511"],  # I2: a fire run twice, under the layout between and after
    ),
    Mutation(
        "a late completion of an ended session's claim writes its stamp back",
        "coordination/firing.py",
        "        elif fire.source is ExecutionSource.NORMAL_TRIGGER and fire.session == session:\n",
        "        elif fire.source is ExecutionSource.NORMAL_TRIGGER:\n",
        ["--seed", "3368"],  # I2: a fire run, and recorded as run by nobody after a data loss
    ),
    Mutation(
        "a layout made after a loss of the registry's data stamps from the leader's clock only",
        "coordination/sharding.py",
        "            return claims.stamp(max(since, rt.firing.count_changed() or since)), {}\n",
        "            return claims.stamp(since), {}\n",
        ["--seed", "5848"],  # I2: fires run before the loss recorded as run by nobody
    ),
    Mutation(
        "fires missed in a stall are dropped once the instance is not registered",
        "coordination/firing.py",
        "            self.misfires.skip(self.items.mine(), MISSED, when)\n            return\n",
        "            return\n",
        ["--seed", "109"],
    ),
    Mutation(
        "a gained item's stamp is read only when an owner left",
        "coordination/localitems.py",
        "                # Any gain: its owner before may have been cut off, or have handled the\n"
        "                # fire with the layout before this one (it fired ahead of the new layout).\n"
        "                self._inherited.update(set(mine).difference(self._read[1]))",
        "                    self._inherited.update(set(mine).difference(self._read[1]))",
        ["--seed", "68"],
    ),
    Mutation(
        "a fire whose read of taken-over items fails is dropped",
        "coordination/firing.py",
        "                    self.misfires.skip(sorted(items + held), READ_LOST, when, source=source)\n",
        "",
        ["--seed", "1384"],
    ),
    Mutation(
        "an item dropped by a lowered count takes its owner's missed fires with it",
        "coordination/healing.py",
        "            inherited.record_dropped(rt, rt.trigger, rt.firing.misfires, stamps)",
        "            pass",
        ["--seed", "1056"],
    ),
    Mutation(
        "a late fire takes the read of a gained item from the fire after it",
        "coordination/firing.py",
        "and monitored and at >= latest\n",
        "and monitored\n",
        ["--seed", "5536"],
    ),
    Mutation(
        "a fire that waited for a layout is neither run nor recorded after a later one ran",
        "coordination/layoutwait.py",
        "            earlier = [*earlier, (waiting.when, waiting.source, waiting.only)]\n",
        "            pass\n",
        ["--seed", "379"],
    ),
    Mutation(
        "a stop hands back a claimed fire unrecorded",
        "coordination/firing.py",
        "            self.misfires.skip(unrun, STOPPED, fire.when, misfire=False, source=fire.source)\n",
        "",
        ["--seed", "1677"],
    ),
    Mutation(
        "a failover claim stamps past the fires nobody ran since its item was queued",
        "coordination/failover.py",
        "        since = queued_at if stamp is None else stamp",
        "        since = self.rt.host.now()",
        ["--seed", "8685"],
    ),
    Mutation(
        "a late fire claims an item its new owner ran meanwhile (run twice)",
        "coordination/claims.py",
        "            checks = [Check(self.paths.item(i), self.expect[i]) for i in self._checked()]",
        "            checks: list[Op] = []",
        ["--seed", "7203"],
    ),
    Mutation(
        "a late catch-up records the fires its own overdue timer still holds",
        "coordination/firing.py",
        "            if catch_up and armed is not None and armed < at:\n                at = max(when, armed)\n",
        "",
        ["--seed", "4839"],  # I2: a fire run, and recorded as run by nobody
    ),
    Mutation(
        "a re-added item is stamped before the fall that dropped it",
        "coordination/sharding.py",
        "            fell = max((at for below, at in self._falls if i >= below), default=since)",
        "            fell = since",
        ["--seed", "3444"],  # I2: a fire that ran recorded "nobody ran it"
    ),
    Mutation(
        "a repair at a fire's second stamps that fire as accounted for",
        "coordination/healing.py",
        "        since = max(now - claims.UNRUN_SECONDS, claims.stamped(item_node[0]) or 0.0)",
        "        since = max(now, claims.stamped(item_node[0]) or 0.0)",
        ["--seed", "6683"],
    ),
    Mutation(
        "a repair whose answer is lost records nothing",
        "coordination/healing.py",
        "            self._record_dead_claim(item, item_node[0], now)\n            raise",
        "            raise",
        ["--seed", "11178"],
    ),
    Mutation(
        "a BaseException from job code escapes its lane",
        "execution/lanes.py",
        "        except BaseException as exc:  # noqa: BLE001",
        "        except Exception as exc:  # noqa: BLE001",
        [
            named(
                "test_regressions.py",
                "test_case7_system_exit_and_keyboard_interrupt_fail_their_item_only",
            )
        ],
    ),
    Mutation(
        "a create fails when a lagging cache still shows a parent gone since",
        "registry/zookeeper.py",
        "                with contextlib.suppress(kx.NodeExistsError, kx.NoNodeError):",
        "                with contextlib.suppress(kx.NodeExistsError):",
        [
            named(
                "test_registry_contract.py",
                "test_create_makes_the_parents_a_lagging_cache_still_shows[zookeeper]",
            )
        ],
    ),
    Mutation(
        "the embedded registry names sequential nodes unlike ZooKeeper",
        "registry/memoryserver.py",
        '            path = f"{op.path}{pnode.sequence:010d}"\n'
        "        if path in self._nodes:\n"
        "            raise NodeExistsError(path)\n"
        "        now = int(self.clock() * 1000)\n"
        "        self._nodes[path] = _Node(\n"
        "            op.data, self._zxid, self._zxid, now, now, owner=sid if op.ephemeral else 0\n"
        "        )\n"
        '        pnode.children.add(path.rsplit("/", 1)[1])\n'
        "        pnode.sequence += 1  # every child counts",
        '            path = f"{op.path}{pnode.sequence:010d}"\n'
        "            pnode.sequence += 1\n"
        "        if path in self._nodes:\n"
        "            raise NodeExistsError(path)\n"
        "        now = int(self.clock() * 1000)\n"
        "        self._nodes[path] = _Node(\n"
        "            op.data, self._zxid, self._zxid, now, now, owner=sid if op.ephemeral else 0\n"
        "        )\n"
        '        pnode.children.add(path.rsplit("/", 1)[1])\n'
        "        # every child counts",
        [
            named(
                "test_registry_contract.py",
                "test_a_sequential_name_counts_every_child_created_before_it[memory]",
            )
        ],
    ),
    Mutation(
        "a claim whose answer was lost is settled on an earlier session's running",
        "coordination/claims.py",
        "            and running.czxid > lease.czxid\n",
        "",
        [
            named(
                "test_claim_settle.py",
                "test_a_claim_of_the_new_session_is_not_settled_on_the_old_sessions_running",
            )
        ],
    ),
]


def _mutated_copy(tmp: Path, mutation: Mutation) -> Path:
    src = tmp / "src"
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__"))
    path = src / "shardcron" / mutation.module
    text = path.read_text(encoding="utf-8")
    assert text.count(mutation.fixed) == 1, f"{mutation.name}: the fixed code moved"
    path.write_text(text.replace(mutation.fixed, mutation.broken), encoding="utf-8")
    return src


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.name.split(":")[0])
def test_the_defect_put_back_is_caught(mutation: Mutation, tmp_path: Path) -> None:
    src = _mutated_copy(tmp_path, mutation)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(ROOT)])}
    if mutation.caught_by[0].startswith("--"):
        cmd = [sys.executable, "-m", "shardcron.simulation", *mutation.caught_by]
    else:
        cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"]
        cmd += mutation.caught_by
    done = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    tail = (done.stdout + done.stderr)[-1500:]
    assert done.returncode == 1, f"{mutation.name}: not caught by {mutation.caught_by}\n{tail}"
    if not mutation.caught_by[0].startswith("--"):
        assert " failed" in tail, tail  # failed on an assertion, not on a collection error
