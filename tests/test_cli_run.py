"""``shardcron run`` as a subprocess: bad jobs on one line, the registry it joins and says."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from shardcron.testing.zookeeper import ZooKeeperServer, unique_namespace
from tests.helpers import wait_until
from tests.workers import CHILD_PYTHONPATH, ROOT


def test_a_bad_job_is_reported_and_the_good_ones_run(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    config = tmp_path / "jobs.yaml"
    config.write_text(
        "jobs:\n"
        "  good:\n"
        "    callable: tests.jobs:ledger\n"
        '    cron: "* * * * * ?"\n'
        "    shardingTotalCount: 2\n"
        "  bad:\n"
        "    callable: tests.jobs:ledger\n"
        '    cron: "0 0 25 * * ?"\n'
        "    shardingTotalCount: 1\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": CHILD_PYTHONPATH,
        "SHARDCRON_LEDGER": str(ledger),
        "SHARDCRON_INSTANCE": "127.0.0.1@-@7001",
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "shardcron", "run", str(config), "--registry", "memory://"],
        env=env,
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: ledger.exists() and ledger.read_text().count('"end"') >= 2, timeout=20)
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    assert worker.returncode == 0  # graceful stop on SIGTERM
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    expected = (
        "error: job 'bad': cron: '0 0 25 * * ?' hour 25 is out of range 0-23; use a Quartz "
        "expression like '0/5 * * * * ?' (job not started)"
    )
    assert errors == [expected]
    assert "running good" in err


RUN = (sys.executable, "-m", "shardcron", "run")


def _start(
    config: Path, ledger: Path, instance: str, registry_env: str | None
) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONPATH": CHILD_PYTHONPATH,
        "SHARDCRON_LEDGER": str(ledger),
        "SHARDCRON_INSTANCE": instance,
    }
    env.pop("SHARDCRON_REGISTRY", None)
    if registry_env is not None:
        env["SHARDCRON_REGISTRY"] = registry_env
    return subprocess.Popen(
        [*RUN, str(config), "--instance-id", instance, "--grace", "5"],
        env=env,
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stop(worker: subprocess.Popen[str]) -> str:
    worker.send_signal(signal.SIGTERM)
    try:
        _, err = worker.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        worker.kill()
        _, err = worker.communicate()
        raise AssertionError(f"worker did not stop on SIGTERM:\n{err}") from None
    assert worker.returncode == 0, err
    return err


PERIOD = 2  # seconds between fires: a run that starts a little late stays in its fire


def _ledger_job(tmp_path: Path, items: int) -> Path:
    config = tmp_path / "jobs.yaml"
    config.write_text(
        "jobs:\n"
        "  shared:\n"
        "    callable: tests.jobs:ledger\n"
        f'    cron: "0/{PERIOD} * * * * ?"\n'
        f"    shardingTotalCount: {items}\n"
    )
    return config


def test_run_joins_the_registry_of_shardcron_registry_and_names_it(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    namespace = unique_namespace()
    url = f"zk://{zookeeper.connect_string}/{namespace}"
    ledger = tmp_path / "ledger.jsonl"
    config = _ledger_job(tmp_path, 4)
    a, b = "127.0.0.1@-@7101", "127.0.0.2@-@7102"
    workers = [_start(config, ledger, a, url), _start(config, ledger, b, url)]
    errs = []
    try:
        # Both workers share the items: once each has run some, the split is in place.
        wait_until(
            lambda: {r["instance"] for r in _records(ledger)} == {a, b}, timeout=40, what="both run"
        )
        status = subprocess.run(
            [sys.executable, "-m", "shardcron", "status", "shared"],
            env={**os.environ, "SHARDCRON_REGISTRY": url},
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert status.returncode == 0, status.stderr
        assert a in status.stdout and b in status.stdout
        split_at = max(r["start"] for r in _records(ledger)) + 1
        wait_until(
            lambda: (
                len({r["start"] // PERIOD for r in _records(ledger) if r["start"] > split_at}) >= 3
            ),
            timeout=30,
            what="three more fires",
        )
    finally:
        errs = [_stop(w) for w in workers]
    fires: dict[int, list[int]] = {}
    for r in _records(ledger):
        if r["start"] > split_at and r["phase"] == "start":
            fires.setdefault(int(r["start"] // PERIOD), []).append(r["item"])
    assert all(sorted(items) == sorted(set(items)) for items in fires.values()), fires
    for err in errs:
        assert f"running shared on {url}" in err
        assert "EMBEDDED REGISTRY" not in err


def test_run_without_a_registry_warns_that_it_works_alone(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.jsonl"
    worker = _start(_ledger_job(tmp_path, 1), ledger, "127.0.0.1@-@7201", None)
    try:
        wait_until(lambda: any(r["phase"] == "end" for r in _records(ledger)), timeout=30)
    finally:
        err = _stop(worker)
    assert "running shared on embedded: this process only" in err
    [warning] = [line for line in err.splitlines() if "EMBEDDED REGISTRY" in line]
    assert " WARNING " in warning
    assert "other processes do not share its work" in warning
    assert "SHARDCRON_REGISTRY" in warning


def _records(ledger: Path) -> list[dict[str, Any]]:
    if not ledger.exists():
        return []
    return [json.loads(line) for line in ledger.read_text().splitlines() if line.strip()]
