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
        "a completion that is not conditional on its claim",
        "coordination/claims.py",
        "return [Check(paths.item(item), version), Delete(paths.running(item)), *extra]",
        "return [Delete(paths.running(item)), *extra]",
        ["--seed", "1449"],  # found by the CI seed budget (I1: two runs at once)
    ),
    Mutation(
        "a claim whose answer was lost is forgotten",
        "coordination/firing.py",
        '        reconnected."""\n        self._unsure.append(fire)',
        '        reconnected."""\n        self.drop(fire)',
        ["--seed", "5294"],  # found by the CI seed budget (I3: the job stops firing)
    ),
    Mutation(
        "an item whose owner dies before claiming it leaves no stamp",
        "coordination/sharding.py",
        "                ops.append(Create(paths.item(item), later.get(item, since)))",
        "                ops.append(Create(paths.item(item)))",
        ["--seed", "216"],  # I2: the dead first owner's item-fire is lost silently
    ),
    Mutation(
        "the fire a dead owner's claim was for is not recorded",
        "coordination/healing.py",
        "        inherited.record_held(rt, rt.trigger, rt.firing.misfires, item, value)\n",
        "",
        ["--seed", "2761"],
    ),
    Mutation(
        "fires missed in a stall are dropped once the instance is not registered",
        "coordination/firing.py",
        "            self.misfires.skip(self.items.mine(), MISSED, when)\n            return\n",
        "            return\n",
        ["--seed", "943"],
    ),
    Mutation(
        "a gained item's stamp is read only when an owner left",
        "coordination/localitems.py",
        "                # Any gain: its owner before may have been cut off, or have handled the\n"
        "                # fire with the layout before this one (it fired ahead of the new layout).\n"
        "                self._inherited.update(set(mine).difference(self._read[1]))",
        "                    self._inherited.update(set(mine).difference(self._read[1]))",
        ["--seed", "1355"],
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
        ["--seed", "1405"],
    ),
    Mutation(
        "a late fire takes the read of a gained item from the fire after it",
        "coordination/firing.py",
        "and monitored and when >= latest\n",
        "and monitored\n",
        ["--seed", "651"],
    ),
    Mutation(
        "a fire that waited for a layout is neither run nor recorded after a later one ran",
        "coordination/layoutwait.py",
        "            earlier = [*earlier, (waiting.when, waiting.source, waiting.only)]\n",
        "            pass\n",
        ["--seed", "1116"],
    ),
    Mutation(
        "a stop hands back a claimed fire unrecorded",
        "coordination/firing.py",
        "            self.misfires.skip(unrun, STOPPED, fire.when, misfire=False, source=fire.source)\n",
        "",
        ["--seed", "1463"],
    ),
    Mutation(
        "a failover claim stamps past the fires nobody ran since its item was queued",
        "coordination/failover.py",
        "when=claims.stamp(self._seen.get(item, self.rt.host.now()) - claims.UNRUN_SECONDS),",
        "when=claims.stamp(self.rt.host.now()),",
        ["--seed", "1358"],
    ),
    Mutation(
        "a late fire claims an item its new owner ran meanwhile (run twice)",
        "coordination/claims.py",
        "            checks = [Check(self.paths.item(i), self.expect[i]) for i in self._checked()]",
        "            checks: list[Op] = []",
        ["--seed", "7203"],
    ),
    Mutation(
        "a re-added item is stamped before the fall that dropped it",
        "coordination/sharding.py",
        "            fell = max((at for below, at in self._falls if i >= below), default=since)",
        "            fell = since",
        ["--seed", "6883"],  # I2: a fire that ran recorded "nobody ran it"
    ),
    Mutation(
        "a repair at a fire's second stamps that fire as accounted for",
        "coordination/healing.py",
        "            SetData(paths.item(item), claims.stamp(now - claims.UNRUN_SECONDS)),",
        "            SetData(paths.item(item), claims.stamp(now)),",
        ["--seed", "8902"],
    ),
    Mutation(
        "a repair whose answer is lost records nothing",
        "coordination/healing.py",
        "            self._record_dead_claim(item, item_node[0], now)\n            raise",
        "            raise",
        ["--seed", "9138"],
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
