"""``shardcron check``: how each cron is read, its next fires, the Quartz-missing-a-field
warning, and the drift between the file and the registry's stored config."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from shardcron.cli.main import main
from shardcron.config.drift import drift, drift_notice
from shardcron.config.explain import explain_cron, explain_drift
from shardcron.config.file import load_config_file
from shardcron.config.job import JobConfig
from shardcron.schedule.cron import dialect
from shardcron.scheduler.process import Scheduler
from shardcron.testing.zookeeper import ZooKeeperServer, unique_namespace
from tests.conftest import zk_config

NOW = datetime(2026, 3, 7, 23, 59, 58, tzinfo=UTC)
JOB = JobConfig(job_name="orders", cron="0/5 * * * * ?", sharding_total_count=3)


def check(*args: str) -> Result:
    return CliRunner().invoke(main, ["check", *args], env={"SHARDCRON_REGISTRY": None})


def write(tmp_path: Path, jobs: str) -> Path:
    path = tmp_path / "jobs.yaml"
    path.write_text("jobs:\n" + jobs)
    return path


# --- drift ---------------------------------------------------------------------------------


def test_drift_names_the_differing_yaml_keys_sorted() -> None:
    local = JOB.with_changes(
        cron="0/10 * * * * ?",
        sharding_total_count=4,
        time_zone="Asia/Shanghai",
        props={"retries": "3"},
    )
    assert drift(JOB, local) == ["cron", "props.retries", "shardingTotalCount", "timeZone"]
    assert drift(JOB, JOB) == []


def test_drift_ignores_what_the_worker_takes_from_its_own_file() -> None:
    local = JOB.with_changes(overwrite=True, callable="app.jobs:other")
    assert drift(JOB, local) == []


def test_drift_survives_the_registry_round_trip() -> None:
    local = JOB.with_changes(job_listener_types=("a",), props={"x": "1"}, description="d")
    assert drift(JobConfig.from_yaml(local.to_yaml()), local) == []


def test_drift_notice_is_one_line_naming_keys_and_the_fix() -> None:
    notice = drift_notice("orders", ["cron", "shardingTotalCount"])
    assert "\n" not in notice
    assert notice == (
        "job 'orders': the registry keeps its stored config (overwrite: false), which differs "
        "from the local one in cron, shardingTotalCount; to apply the local config, start once "
        "with overwrite: true or run 'shardcron config orders --set KEY=VALUE'"
    )
    assert "overwrite: true" in notice
    assert "shardcron config orders --set KEY=VALUE" in notice


def test_explain_drift_warns_only_when_the_registry_keeps_its_values() -> None:
    local = JOB.with_changes(cron="0/10 * * * * ?")
    [warning] = explain_drift(JOB, local).warnings
    assert "cron: registry '0/5 * * * * ?', file '0/10 * * * * ?'" in warning
    assert "overwrite: false" in warning
    replaced = explain_drift(JOB, local.with_changes(overwrite=True))
    assert replaced.warnings == []
    assert "replaces it with this file (overwrite: true)" in replaced.lines[0]
    assert "not in the registry yet" in explain_drift(None, local).lines[0]
    assert "the same config" in explain_drift(JOB, JOB).lines[0]


# --- cron explanation ----------------------------------------------------------------------


def test_dialect_follows_the_field_count() -> None:
    assert dialect("0/5 * * * * ?") == "Quartz"
    assert dialect("0 0 12 ? * WED 2027") == "Quartz"
    assert dialect("*/5 * * * *") == "Unix"
    assert dialect("@daily") == "Unix"


def test_explain_cron_gives_the_dialect_and_three_fires_in_the_jobs_zone() -> None:
    cfg = JOB.with_changes(time_zone="Asia/Shanghai")
    notes = explain_cron(cfg, NOW)
    assert notes.lines == [
        (
            "job 'orders': cron '0/5 * * * * ?' read as Quartz "
            "(second minute hour day-of-month month day-of-week [year]) in Asia/Shanghai"
        ),
        (
            "  next fires: 2026-03-08 08:00:00+08:00, 2026-03-08 08:00:05+08:00, "
            "2026-03-08 08:00:10+08:00"
        ),
    ]
    assert notes.warnings == []


def test_explain_cron_follows_daylight_saving_in_the_jobs_zone() -> None:
    cfg = JOB.with_changes(cron="30 2 * * *", time_zone="America/New_York")
    [_, fires] = explain_cron(cfg, NOW).lines
    # 2026-03-08 02:30 does not exist in New York: the fixed-time job fires at 03:00 EDT.
    assert fires == (
        "  next fires: 2026-03-08 03:00:00-04:00, 2026-03-09 02:30:00-04:00, "
        "2026-03-10 02:30:00-04:00"
    )


@pytest.mark.parametrize(
    ("cron", "says"),
    [
        ("0/5 * * * ?", "'?' is Quartz's and '0/5' is Quartz's spelling of a step"),
        ("0 12 * * ?", "'?' is Quartz's"),
        ("10/15 * * * *", "'10/15' is Quartz's spelling of a step (Unix writes */N)"),
    ],
)
def test_a_five_field_cron_that_looks_like_quartz_is_warned(cron: str, says: str) -> None:
    notes = explain_cron(JOB.with_changes(cron=cron), NOW)
    assert "read as Unix (minute hour day-of-month month day-of-week)" in notes.lines[0]
    [warning] = notes.warnings
    assert says in warning
    assert "has 5 fields, so it is Unix cron (minute first)" in warning
    assert "a Quartz expression missing a field?" in warning


@pytest.mark.parametrize("cron", ["*/5 * * * *", "0 12 * * 1-5", "@hourly", "0-59/5 * * * *"])
def test_plain_unix_crons_are_not_warned(cron: str) -> None:
    assert explain_cron(JOB.with_changes(cron=cron), NOW).warnings == []


def test_a_job_without_cron_is_explained_as_triggered_only() -> None:
    notes = explain_cron(JOB.with_changes(cron=None), NOW)
    assert notes.lines == ["job 'orders': no cron; runs only when triggered"]


# --- the command ---------------------------------------------------------------------------


def test_check_explains_every_job_and_warns_without_failing(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "  orders:\n"
        "    callable: tests.jobs:ledger\n"
        '    cron: "0/5 * * * * ?"\n'
        "    timeZone: Asia/Shanghai\n"
        "    shardingTotalCount: 3\n"
        "  poll:\n"
        "    callable: tests.jobs:ledger\n"
        '    cron: "0/5 * * * ?"\n'
        "    shardingTotalCount: 1\n",
    )
    result = check(str(path))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("job 'orders': cron '0/5 * * * * ?' read as Quartz")
    assert lines[1].startswith("  next fires: ") and lines[1].count("+08:00") == 3
    assert lines[2].startswith("job 'poll': cron '0/5 * * * ?' read as Unix")
    assert "this machine's zone" in lines[2]
    assert lines[4].startswith("warning: job 'poll': cron '0/5 * * * ?' has 5 fields")
    assert lines[-1] == f"{path}: OK (1 warning)"
    strict = check(str(path), "--strict")
    assert strict.exit_code == 1
    assert strict.stdout.splitlines()[-1].startswith("warning: job 'poll'")


def test_check_still_lists_problems_first_and_fails(tmp_path: Path) -> None:
    path = write(tmp_path, "  bad:\n    callable: tests.jobs:ledger\n    shardingTotalCount: 0\n")
    result = check(str(path))
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        f"{path}: job 'bad': shardingTotalCount: must be at least 1; got 0"
    ]


def test_check_with_a_registry_shows_what_the_stored_config_keeps(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    namespace = unique_namespace()
    url = f"zk://{zookeeper.connect_string}/{namespace}"
    first = (
        "  orders:\n"
        "    callable: tests.jobs:ledger\n"
        '    cron: "0/5 * * * * ?"\n'
        "    shardingTotalCount: 3\n"
    )
    path = write(tmp_path, first)
    # A worker stores the job as the file first says; then the file is edited.
    scheduler = Scheduler(zk_config(zookeeper, namespace), instance_id="127.0.0.1@-@7301")
    scheduler.add_job(load_config_file(path).jobs[0])
    scheduler.start()
    scheduler.stop(grace=1)
    assert check(str(path), "--registry", url).stdout.splitlines()[2:4] == [
        "job 'orders': the registry holds the same config",
        f"{path}: OK",
    ]
    write(
        tmp_path,
        first.replace("0/5 *", "0/10 *").replace("Count: 3", "Count: 4")
        + "  report:\n    callable: tests.jobs:ledger\n    shardingTotalCount: 1\n",
    )
    result = check(str(path), "--registry", url)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "job 'report': not in the registry yet; its first worker stores this file" in lines
    [warning] = [line for line in lines if line.startswith("warning:")]
    assert warning.startswith(
        "warning: job 'orders': the registry keeps its own config (overwrite: false), which "
        "differs from this file: cron: registry '0/5 * * * * ?', file '0/10 * * * * ?'; "
        "shardingTotalCount: registry 3, file 4. To apply the file, start once with "
        "overwrite: true or run 'shardcron config orders --set KEY=VALUE'"
    )


def test_check_against_the_embedded_registry_is_one_error_line(tmp_path: Path) -> None:
    path = write(
        tmp_path, "  orders:\n    callable: tests.jobs:ledger\n    shardingTotalCount: 1\n"
    )
    result = check(str(path), "--registry", "memory://")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "error: registry: memory:// lives inside one process; operate on zk://HOST:PORT/NAMESPACE"
    ]
