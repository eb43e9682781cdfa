"""The claim protocol, checked exhaustively: SPIN explores every interleaving of the
Promela model in ``spec/claims.pml`` (claims, completions, failover, the leader's
repairs, resharding, a lowered count) with lost requests, lost answers, crashes and
expired sessions, and every run must keep the model's assertions.

A model that cannot fail checks nothing: the same model with a known defect switched on
(a completion or repair not conditional on what it read, a claim without its lease
check, a count lowering that deletes a claim, a lost claim answer settled on an earlier
session's claim) must make SPIN report a violation.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

SPEC = Path(__file__).resolve().parent.parent / "spec" / "claims.pml"

# Small configurations (macros of the model, see its header), each searched exhaustively
# in well under a minute on one core: each has a crash or an expiry, all but the one so
# named a lost request or answer too. QCAP=1: one request in flight per instance.
CONFIGS = {
    "2 instances, 1 item": [],
    "3 instances, 1 item": ["-DNI=3", "-DQCAP=1"],
    "2 instances, 1 item beyond a lowered count": ["-DCOUNTS=1", "-DQCAP=1"],
    "2 instances, 2 items, no lost request": ["-DNITEMS=2", "-DFAULTS=0"],
    # An instance whose session expired fires again on its new session while its old
    # claim is being repaired (no new layout: the item fails over).
    "2 instances, 1 item, 2 fires each, no resharding": ["-DFIRES=2", "-DRESHARDS=0"],
}

# A defect, the configuration it shows in, and the start of the assertion it breaks.
I1 = "assertion violated ( !(live["  # two runs at once, the older one's session alive
I2 = "assertion violated (rtok[i]==t)"  # a claim deleted by a request that did not read it
DEFECTS = {
    "completion without its version check": ("COMPLETE_UNCONDITIONAL", [], I2),
    "repair without its version check": ("REPAIR_UNCONDITIONAL", [], I2),
    "repair reading running before the item node": ("REPAIR_READS_RUNNING_FIRST", [], I2),
    "claim without its lease check": ("CLAIM_WITHOUT_LEASE", [], I1),
    "count lowering deleting a claim": (
        "DROP_WITH_CLAIM",
        CONFIGS["2 instances, 1 item beyond a lowered count"],
        I2,
    ),
    "lost claim answer settled on an earlier session's running": (
        "SETTLE_ANY_SESSION",
        CONFIGS["2 instances, 1 item, 2 fires each, no resharding"],
        I1,
    ),
}


@dataclass(frozen=True)
class Search:
    errors: int
    states: int
    seconds: float
    complete: bool
    output: str


def _tool(name: str) -> str:
    path = shutil.which(name)
    assert path is not None, (
        f"{name} is not installed: the model check needs Debian's spin and gcc "
        "(apt-get install spin gcc; test.sh installs them)"
    )
    return path


def _number(pattern: str, text: str) -> float:
    found = re.search(pattern, text)
    assert found is not None, f"no {pattern!r} in SPIN's output:\n{text}"
    return float(found.group(1))


def search(workdir: Path, defines: list[str], optimize: bool = True) -> Search:
    """Generate the verifier from the model, compile it and run it: every state, no
    bound on the depth reached (the model's budgets bound it). Without ``optimize`` it
    compiles several times faster and searches a few times slower: for a search that
    stops at its first violation."""
    model = workdir / SPEC.name
    shutil.copyfile(SPEC, model)
    spin, gcc = _tool("spin"), _tool("gcc")
    subprocess.run([spin, "-a", *defines, model.name], cwd=workdir, check=True)
    # SAFETY: assertions and end states only; COLLAPSE: lossless compression of states.
    flags = ["-O2" if optimize else "-O0", "-DSAFETY", "-DCOLLAPSE", "-o", "pan", "pan.c"]
    subprocess.run([gcc, *flags], cwd=workdir, check=True)
    # pan exits non-zero when it finds a violation: its report says which.
    run = subprocess.run(
        ["./pan", "-m100000"], cwd=workdir, capture_output=True, text=True, timeout=110, check=False
    )
    out = run.stdout + run.stderr
    return Search(
        errors=int(_number(r"errors: (\d+)", out)),
        states=int(_number(r"(\d+) states, stored", out)),
        seconds=_number(r"elapsed time ([\d.e+]+) seconds", out),
        complete="Search not completed" not in out and "max search depth too small" not in out,
        output=out,
    )


@pytest.mark.parametrize("config", list(CONFIGS))
def test_every_interleaving_keeps_the_claim_invariants(
    config: str, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    found = search(tmp_path, CONFIGS[config])
    summary = f"{config}: {found.states:,} states stored, {found.seconds:.1f} s"
    print(summary)
    record_property("spin_states", found.states)
    record_property("spin_seconds", found.seconds)
    assert found.errors == 0, f"{summary}; SPIN found a violation:\n{found.output}"
    assert found.complete, f"{summary}; the search did not complete:\n{found.output}"


@pytest.mark.parametrize("defect", list(DEFECTS))
def test_spin_finds_a_defect_put_into_the_model(defect: str, tmp_path: Path) -> None:
    macro, config, violation = DEFECTS[defect]
    found = search(tmp_path, [*config, f"-DDEFECT_{macro}"], optimize=False)
    assert found.errors > 0 and violation in found.output, (
        f"{defect}: SPIN did not report {violation!r}:\n{found.output}"
    )
