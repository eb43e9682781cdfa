"""``shardcron run``: a job with a bad setting is reported on one line; the others run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.helpers import wait_until
from tests.workers import ROOT


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
        "PYTHONPATH": str(ROOT),
        "SHARDCRON_LEDGER": str(ledger),
        "SHARDCRON_INSTANCE": "127.0.0.1@-@7001",
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "shardcron.cli", "run", str(config), "--registry", "memory://"],
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
