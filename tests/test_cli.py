"""The operations commands against a real ZooKeeper with running instances: tables, --json,
exit codes and one-line errors."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from shardcron.cli.main import main
from shardcron.config.job import JobConfig
from shardcron.observability.dump import DumpServer
from shardcron.operations.admin import Admin
from shardcron.operations.jobstats import ItemStatus
from shardcron.testing.zookeeper import ZooKeeperServer
from tests.cluster import Cluster, Recorder, cluster
from tests.helpers import wait_until
from tests.workers import ROOT

A, B = "127.0.0.1@-@4201", "127.0.0.2@-@4202"


def url(c: Cluster) -> str:
    return f"zk://{c.server.connect_string}/{c.namespace}"


def run(*args: str, env: dict[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env={"SHARDCRON_REGISTRY": None, **(env or {})})


def ok(*args: str, env: dict[str, str | None] | None = None) -> str:
    result = run(*args, env=env)
    assert result.exit_code == 0, result.output
    return result.stdout


def fails(*args: str) -> str:
    """The one error line of a failing command."""
    result = run(*args)
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.fixture
def orders(zookeeper: ZooKeeperServer) -> Iterator[Cluster]:
    """Two instances running a 4-item job every second, each item run recorded."""
    recorder = Recorder()
    config = JobConfig(
        job_name="orders", cron="* * * * * ?", sharding_total_count=4, description="the orders"
    )
    with cluster(zookeeper, config, recorder) as c:
        c.start(A)
        c.start(B)
        wait_until(
            lambda: {r.instance for r in recorder.runs} == {A, B}, timeout=15, what="runs on both"
        )
        yield c


@pytest.fixture
def report(zookeeper: ZooKeeperServer) -> Iterator[Cluster]:
    """Two instances of a one-off 4-item job: it runs only when triggered."""
    with cluster(zookeeper, JobConfig(job_name="report", sharding_total_count=4), Recorder()) as c:
        c.start(A)
        c.start(B)
        yield c


def test_status_shows_jobs_and_servers_as_tables_and_json(orders: Cluster) -> None:
    lines = ok("status", "--registry", url(orders)).splitlines()

    assert lines[0].split() == [
        "JOB", "STATUS", "INSTANCES", "ITEMS", "CRON", "NEXT", "FIRE", "DESCRIPTION"
    ]  # fmt: skip
    assert lines[1].split()[:7] == ["orders", "OK", "2", "4", "*", "*", "*"]
    assert lines[1].endswith("the orders")
    assert lines[3].split() == ["SERVER", "INSTANCES", "JOBS", "DISABLED", "JOBS"]
    assert [line.split() for line in lines[4:]] == [
        ["127.0.0.1", "1", "1", "0"],
        ["127.0.0.2", "1", "1", "0"],
    ]

    data = json.loads(ok("status", "--json", env={"SHARDCRON_REGISTRY": url(orders)}))
    [job] = data["jobs"]
    assert (job["job_name"], job["status"], job["instance_count"]) == ("orders", "OK", 2)
    assert job["next_fire"].endswith("+00:00")
    assert [(s["server_ip"], s["instances"]) for s in data["servers"]] == [
        ("127.0.0.1", [A]),
        ("127.0.0.2", [B]),
    ]


def test_status_shows_the_next_fire_in_the_jobs_zone_as_check_does(
    zookeeper: ZooKeeperServer,
) -> None:
    config = JobConfig(
        job_name="tokyo", cron="0 0 9 * * ?", time_zone="Asia/Tokyo", sharding_total_count=1
    )
    with cluster(zookeeper, config, Recorder()) as c:
        c.start(A)
        [row] = ok("status", "--registry", url(c)).splitlines()[1:2]
        overview = dict(
            line.split(":", 1)
            for line in ok("status", "tokyo", "--registry", url(c)).split("\n\n")[0].splitlines()
        )
    # 09:00 in Tokyo, whatever this machine's zone: the time the job's cron names.
    assert re.search(r" \d{4}-\d\d-\d\d 09:00:00\+09:00 ", row), row
    assert re.fullmatch(r" *\d{4}-\d\d-\d\d 09:00:00\+09:00", overview["next fire"])


def test_status_of_one_job_shows_its_instances_and_items(orders: Cluster) -> None:
    text = ok("status", "orders", "--registry", url(orders))

    facts = dict(line.split(":", 1) for line in text.split("\n\n")[0].splitlines())
    assert facts["status"].strip() == "OK"
    assert facts["leader"].strip() in (A, B)
    instance_rows = [line.split() for line in text.split("\n\n")[1].splitlines()[1:]]
    assert {(row[0], row[1], row[2]) for row in instance_rows} == {
        (A, "127.0.0.1", "ENABLED"),
        (B, "127.0.0.2", "ENABLED"),
    }
    item_rows = [line.split() for line in text.split("\n\n")[2].splitlines()[1:]]
    assert [row[0] for row in item_rows] == ["0", "1", "2", "3"]

    view = json.loads(ok("status", "orders", "--json", "--registry", url(orders)))
    assert view["brief"]["status"] == "OK"
    assert view["config"]["shardingTotalCount"] == 4
    assert {i["instance_id"] for i in view["items"]} == {A, B}

    server = ok("status", "--server", "127.0.0.2", "--registry", url(orders)).splitlines()
    assert server[1].split() == ["orders", "OK", "1"]


def test_disable_and_enable_a_server_move_items(orders: Cluster) -> None:
    admin = Admin(orders.admin)

    out = ok("disable", "orders", "--server", "127.0.0.2", "--registry", url(orders))

    assert out == "/orders/servers/127.0.0.2 = 'DISABLED'\n"
    wait_until(
        lambda: {i.instance_id for i in admin.sharding("orders")} == {A}, what="items on A only"
    )
    data = json.loads(
        ok("enable", "orders", "--server", "127.0.0.2", "--json", "--registry", url(orders))
    )
    assert data == [{"path": "/orders/servers/127.0.0.2", "value": "ENABLED"}]
    wait_until(
        lambda: {i.instance_id for i in admin.sharding("orders")} == {A, B}, what="items on both"
    )


def test_trigger_item_switches_shutdown_and_remove_on_a_one_off_job(report: Cluster) -> None:
    recorder, admin, registry = report.recorder, Admin(report.admin), url(report)

    out = ok("trigger", "report", "--registry", registry)

    assert sorted(out.splitlines()) == [f"triggered report on {A}", f"triggered report on {B}"]
    wait_until(lambda: len(recorder.runs) == 4, what="4 triggered items")

    assert json.loads(ok("disable-item", "report", "1", "--json", "--registry", registry)) == [
        {"path": "/report/sharding/1/disabled", "value": ""}
    ]
    assert admin.sharding("report")[1].status is ItemStatus.DISABLED
    moment = time.time()
    ok("trigger", "report", "--registry", registry)
    wait_until(
        lambda: (
            {r.item for r in recorder.since(moment)} == {0, 2, 3}
            and report.admin.children("/report/trigger") == []
            and not any(i.status is ItemStatus.RUNNING for i in admin.sharding("report"))
        ),
        what="the second trigger's fires to end",
    )
    assert 1 not in {r.item for r in recorder.since(moment)}
    assert ok("enable-item", "report", "1", "--registry", registry) == (
        "/report/sharding/1/disabled deleted\n"
    )

    out = ok("shutdown", "report", "--server", "127.0.0.2", "--registry", registry)
    assert out == f"/report/instances/{B} deleted\n"
    wait_until(lambda: "report" not in report.schedulers[B].runtimes, what="B to stop the job")

    out = ok("remove", "report", "--registry", registry)
    assert out.splitlines() == [f"/report/instances/{A} deleted", "/report deleted"]
    wait_until(lambda: "report" not in report.schedulers[A].runtimes, what="A to stop the job")
    assert fails("trigger", "report", "--registry", registry).startswith(
        "error: job 'report' not found"
    )


def test_config_shows_the_stored_yaml_and_sets_validated_keys(report: Cluster) -> None:
    registry = url(report)
    stored = report.admin.get("/report/config")
    assert stored is not None
    assert ok("config", "report", "--registry", registry) == stored.decode()

    result = run(
        "config", "report", "--set", "shardingTotalCount=6", "--set", "props.region=eu",
        "--registry", registry,
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    assert "shardingTotalCount: 6\n" in result.stdout
    assert "props:\n  region: eu\n" in result.stdout
    assert result.stderr == "updated job 'report': shardingTotalCount, props.region\n"
    data = json.loads(ok("config", "report", "--json", "--registry", registry))
    assert (data["shardingTotalCount"], data["props"]) == (6, {"region": "eu"})

    for args, message in [
        (("--set", "shardingTotalCount=abc"), "shardingTotalCount: expected an integer, got 'abc'"),
        (("--set", "shardingTotalCount=0"), "shardingTotalCount: must be at least 1; got 0"),
        (("--set", "cron=soon"), "cron: 'soon'"),
        (("--set", "shardingTotalCont=3"), "did you mean 'shardingTotalCount'?"),
        (("--set", "nokey"), "--set: 'nokey' is not KEY=VALUE"),
    ]:
        assert message in fails("config", "report", *args, "--registry", registry)
    assert (
        ok("config", "report", "--json", "--registry", registry)
        == json.dumps(data, indent=2) + "\n"
    )


def test_dump_reads_the_registry_or_a_worker_port(report: Cluster) -> None:
    registry = url(report)
    admin = Admin(report.admin)

    assert ok("dump", "report", "--registry", registry) == admin.dump("report")
    unmasked = ok("dump", "report", "--no-mask", "--registry", registry)
    assert f"/report/instances/{A} | " in unmasked
    server = DumpServer(report.admin, port=0).start()
    try:
        assert ok("dump", "report", "--from", f"127.0.0.1:{server.port}") == admin.dump("report")
    finally:
        server.stop()
    assert "error: job 'nothing' not found" in fails("dump", "nothing", "--registry", registry)
    assert "ConnectionRefusedError" in fails("dump", "report", "--from", f"127.0.0.1:{server.port}")


def test_errors_are_one_line_with_exit_status_1(report: Cluster) -> None:
    registry = url(report)
    for args, message in [
        (("status", "reprot"), "job 'reprot' not found in namespace"),
        (("status", "reprot"), "did you mean 'report'?"),
        (("status", "--server", "10.1.1.1"), "no job has server '10.1.1.1'"),
        (("disable", "report", "--server", "10.1.1.1"), "has no server '10.1.1.1'"),
        (("disable",), "name a job, --server IP, or both"),
        (("shutdown",), "name a job, --server IP, or both"),
        (("disable-item", "report", "x"), "ITEM: 'x' is not an item number"),
        (("disable-item", "report", "4"), "item: 4 is out of range 0..3"),
        (("config", "report", "--set", "jobName=x"), "jobName: cannot be changed"),
    ]:
        assert message in fails(*args, "--registry", registry)
    assert "registry: not given" in fails("status")
    assert "registry: 'http://x' is not zk://" in fails("status", "--registry", "http://x")
    assert "memory:// lives inside one process" in fails("status", "--registry", "memory://")


def test_an_unreachable_registry_is_one_line_from_the_real_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "shardcron", "status", "--registry", "zk://127.0.0.1:1/x"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )

    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (
        "error: registry unreachable: no ZooKeeper answered at 127.0.0.1:1 within 5s\n"
    )


def test_demo_help_and_its_stop_line_come_after_every_earlier_fire() -> None:
    assert "How long the demo runs; one instance stops halfway through." in ok("demo", "--help")
    out = ok("demo", "--seconds", "6").splitlines()
    stop = next(i for i, line in enumerate(out) if line.startswith("-- stopping instance"))
    victim = out[stop].split()[3].split("@-@")[1]
    fires_after = [line for line in out[stop + 1 :] if re.match(r"\d\d:\d\d:\d\d ", line)]
    # At most the fire of the very second it stopped in still shows the stopped instance.
    assert sum(f"->{victim}" in line for line in fires_after) <= 1
    assert out[-1] == "demo finished"


def test_trigger_names_the_instances_not_the_znodes(report: Cluster) -> None:
    out = ok("trigger", "report", "--registry", url(report))
    assert sorted(out.splitlines()) == [f"triggered report on {A}", f"triggered report on {B}"]


def test_a_connect_error_comes_within_its_five_seconds() -> None:
    # A server that accepts connections and never answers: kazoo alone took 10 s here.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        port = silent.getsockname()[1]
        began = time.monotonic()
        message = fails("status", "--registry", f"zk://127.0.0.1:{port}/x")
        took = time.monotonic() - began
    assert (
        message
        == f"error: registry unreachable: no ZooKeeper answered at 127.0.0.1:{port} within 5s"
    )
    assert took < 6.5, f"took {took:.1f}s"


def test_ctrl_c_while_connecting_prints_one_line_and_no_traceback() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "shardcron",
            "-v",
            "status",
            "--registry",
            f"zk://127.0.0.1:{port}/x",
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # -v logs kazoo's connection attempts: it is connecting now
        seen.append(line)
        if "Connecting to" in line or "Connection dropped" in line or "refused" in line:
            break
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=20)
    rest = "".join(seen) + err
    assert proc.returncode == 130, rest
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "interrupted"


def test_ctrl_c_while_a_worker_connects_prints_one_line_and_no_traceback(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "jobs.yaml"
    config.write_text(
        f"registry: {{servers: '127.0.0.1:{port}', namespace: x}}\n"
        "jobs: {tick: {callable: 'json:dumps', cron: '* * * * * ?', shardingTotalCount: 1}}\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardcron", "run", str(config)],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stderr is not None
    for line in proc.stderr:  # the worker retries while the registry is down
        if "registry unreachable" in line:
            break
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "interrupted"


def test_a_java_update_with_a_binary_description_is_read_and_obeyed(report: Cluster) -> None:
    # What the Java lifecycle API writes after setting a description with a BEL and a cron.
    paths = "/report/config"
    stored = (report.admin.get(paths) or b"").decode()
    assert "description: ''\n" in stored
    java = "cron: '* * * * * ?'\n" + stored.replace(
        "description: ''\n",
        "description: !!binary |-\n  cmluZwc=\n",  # "ring\x07"
    )
    report.admin.put(paths, java.encode())

    data = json.loads(ok("status", "--json", "--registry", url(report)))
    [job] = data["jobs"]
    assert (job["description"], job["cron"]) == ("ring\x07", "* * * * * ?")
    table = ok("status", "--registry", url(report))
    assert "ring\\x07" in table and "\x07" not in table  # shown, not rung
    assert json.loads(ok("config", "report", "--json", "--registry", url(report)))[
        "description"
    ] == ("ring\x07")
    # The workers took the whole update: the one-off job now fires every second.
    wait_until(lambda: len(report.recorder.runs) >= 4, timeout=15, what="fires on the new cron")
