"""Job types (SIMPLE, coroutine, DATAFLOW, SCRIPT, HTTP), one-off jobs and the decorator API.

Each type runs on two instances against the real ZooKeeper; the finer points of each
runner are checked by calling it directly with a context.
"""

from __future__ import annotations

import json
import logging
import shlex
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from shardcron.config.file import load_config_file
from shardcron.config.job import JobConfig
from shardcron.config.jobtypes import JobType
from shardcron.coordination.paths import JobPaths
from shardcron.errors import ConfigError
from shardcron.execution.jobs import (
    AsyncLoop,
    ItemFailedError,
    ItemRunner,
    make_runner,
    prop_problems,
)
from shardcron.model import ShardingContext
from shardcron.registry.memory import MemoryRegistry
from shardcron.scheduler.process import Scheduler
from shardcron.testing.zookeeper import ZooKeeperServer
from tests import job_samples
from tests.helpers import wait_until
from tests.job_samples import GATES, Backlog, fleet, http_sink

A, B = "127.0.0.1@-@3001", "127.0.0.2@-@3002"


def context(item: int = 0, job: str = "job", keep_going: bool = True) -> ShardingContext:
    return ShardingContext(
        job_name=job,
        task_id=f"{job}@-@{item}@-@READY@-@127.0.0.1@-@1",
        sharding_total_count=4,
        job_parameter="",
        sharding_item=item,
        sharding_parameter=None,
        _keep_going=lambda: keep_going,
    )


def typed(job_type: JobType, **props: str) -> JobConfig:
    return JobConfig(job_name="job", sharding_total_count=4, type=job_type, props=props)


@pytest.fixture
def loop() -> Iterator[AsyncLoop]:
    made = AsyncLoop()
    yield made
    made.stop()


# -- one-off jobs from a config file, and the decorator -----------------------------------


def test_one_off_job_from_a_config_file_runs_on_each_instance_when_triggered(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> None:
    file = tmp_path / "jobs.yaml"
    file.write_text(
        "jobs:\n"
        "  yaml-oneoff:\n"
        "    callable: tests.job_samples:record\n"
        "    shardingTotalCount: 4\n"
        "    shardingItemParameters: 0=a,1=b,2=c,3=d\n"
    )
    (config,) = load_config_file(file).jobs
    assert config.cron is None
    job_samples.RUNS.clear()
    with fleet(zookeeper) as f:
        for instance in (A, B):
            f.start(instance, lambda s: s.add_job(config))
        f.trigger("yaml-oneoff")
        runs = f.wait_finished("yaml-oneoff", 4)
        wait_until(lambda: not f.admin.children(JobPaths("yaml-oneoff").triggers), what="consumed")
        assert sorted(r.context.sharding_item for r in runs) == [0, 1, 2, 3]
        assert {r.instance for r in runs} == {A, B}
        assert all(r.success for r in runs)
        params = {c.sharding_item: c.sharding_parameter for c in job_samples.RUNS}
        assert params == {0: "a", 1: "b", 2: "c", 3: "d"}

        f.trigger("yaml-oneoff")  # runs again, once per trigger
        assert len(f.wait_finished("yaml-oneoff", 8)) == 8


def test_decorator_maps_snake_case_settings_and_the_job_runs(zookeeper: ZooKeeperServer) -> None:
    seen: list[tuple[str, int, str | None]] = []

    def declare(scheduler: Scheduler) -> None:
        def decorated(ctx: ShardingContext) -> None:
            seen.append((ctx.job_parameter, ctx.sharding_item, ctx.sharding_parameter))

        returned = scheduler.job(
            "* * * * * ?",
            name="decorated",
            sharding_total_count=2,
            sharding_item_parameters="0=north,1=south",
            job_parameter="p",
            failover=True,
            misfire=False,
            description="from code",
        )(decorated)
        assert returned is decorated

    with fleet(zookeeper) as f:
        for instance in (A, B):
            f.start(instance, declare)
        stored = yaml.safe_load(f.admin.get(JobPaths("decorated").config) or b"")
        assert stored["cron"] == "* * * * * ?"
        assert stored["shardingTotalCount"] == 2
        assert stored["shardingItemParameters"] == "0=north,1=south"
        assert stored["jobParameter"] == "p"
        assert stored["failover"] is True
        assert stored["misfire"] is False
        assert stored["description"] == "from code"
        runs = f.wait_finished("decorated", 2)
        assert {r.instance for r in runs[:2]} == {A, B}
        assert {("p", 0, "north"), ("p", 1, "south")} <= set(seen)


# -- coroutine jobs -------------------------------------------------------------------------


def test_coroutine_jobs_share_the_scheduler_loop_without_blocking_each_other(
    zookeeper: ZooKeeperServer,
) -> None:
    """``waiter`` parks on a future that only the other job, ``opener``, resolves: if the
    loop ran one coroutine at a time, the waiter would never finish."""
    GATES.reset(2)

    def declare(scheduler: Scheduler) -> None:
        for name, fn in (("waiter", job_samples.waiter), ("opener", job_samples.opener)):
            scheduler.add_job(JobConfig(job_name=name, sharding_total_count=2), fn)

    with fleet(zookeeper) as f:
        for instance in (A, B):
            f.start(instance, declare)
        f.trigger("waiter")
        wait_until(lambda: all(e.is_set() for e in GATES.parked.values()), what="waiters parked")
        assert set(GATES.threads.values()) == {"shardcron-asyncio"}
        assert f.finished("waiter") == []
        f.trigger("opener")
        waited = f.wait_finished("waiter", 2)
        assert all(r.success for r in waited + f.wait_finished("opener", 2))
        assert {r.instance for r in waited} == {A, B}


def test_a_failing_coroutine_fails_its_item(loop: AsyncLoop) -> None:
    async def broken(ctx: ShardingContext) -> None:
        raise ValueError(f"bad item {ctx.sharding_item}")

    run = make_runner(JobConfig(job_name="job", sharding_total_count=1), broken, loop)
    with pytest.raises(ValueError, match="bad item 3"):
        run(context(3))


# -- DATAFLOW ---------------------------------------------------------------------------------


def test_streaming_dataflow_drains_every_item_on_two_instances(zookeeper: ZooKeeperServer) -> None:
    Backlog.reset({item: [item * 10 + n for n in range(5)] for item in range(4)})
    config = JobConfig(
        job_name="flow",
        sharding_total_count=4,
        type=JobType.DATAFLOW,
        callable="tests.job_samples:Backlog",
        props={"streaming.process": "true"},
    )
    with fleet(zookeeper) as f:
        for instance in (A, B):
            f.start(instance, lambda s: s.add_job(config))
        f.trigger("flow")
        runs = f.wait_finished("flow", 4)
        assert all(r.success for r in runs) and {r.instance for r in runs} == {A, B}
    for item in range(4):
        batches = [data for owner, data in Backlog.batches if owner == item]
        base = item * 10
        assert batches == [[base, base + 1], [base + 2, base + 3], [base + 4]]


def test_dataflow_without_streaming_fetches_once(loop: AsyncLoop) -> None:
    Backlog.reset({0: [1, 2, 3], 1: []})
    run = make_runner(typed(JobType.DATAFLOW), Backlog(), loop)
    run(context(0))
    run(context(1))  # an empty fetch: nothing to process
    assert Backlog.batches == [(0, [1, 2])]


def test_streaming_dataflow_stops_when_the_context_says_so(loop: AsyncLoop) -> None:
    Backlog.reset({0: [1, 2, 3, 4, 5]})
    run = make_runner(typed(JobType.DATAFLOW, **{"streaming.process": "true"}), Backlog, loop)
    run(context(0, keep_going=False))
    assert Backlog.batches == [(0, [1, 2])]


def test_dataflow_with_coroutine_methods(loop: AsyncLoop) -> None:
    Backlog.reset({0: [1, 2, 3]})
    config = typed(JobType.DATAFLOW, **{"streaming.process": "true"})
    make_runner(config, job_samples.AsyncBacklog(), loop)(context(0))
    assert Backlog.batches == [(0, [1, 2]), (0, [3])]


@pytest.mark.parametrize(
    ("target", "props", "field"),
    [
        (job_samples.NotAListener(), {}, "callable"),
        (job_samples.NeedsArguments, {}, "callable"),
        (Backlog(), {"streaming.process": "yes"}, "props.streaming.process"),
    ],
)
def test_bad_dataflow_settings_are_one_line_config_errors(
    loop: AsyncLoop, target: object, props: dict[str, str], field: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        make_runner(typed(JobType.DATAFLOW, **props), target, loop)
    assert caught.value.field == field and "\n" not in str(caught.value)


# -- SCRIPT -----------------------------------------------------------------------------------

ECHO_ARGS = """
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
item = json.loads(sys.argv[-1])["shardingItem"]
(out / f"{item}.json").write_text(json.dumps(sys.argv[2:]))
print(f"hello from item {item}")
print("second line")
print("to stderr", file=sys.stderr)
"""


def test_script_job_gets_the_exact_context_json_as_last_argument_on_two_instances(
    zookeeper: ZooKeeperServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="shardcron.execution.jobs")
    script = tmp_path / "echo_args.py"
    script.write_text(ECHO_ARGS)
    out = tmp_path / "out"
    out.mkdir()
    line = shlex.join([sys.executable, str(script), str(out)]) + " 'two words' '$HOME;echo'"
    config = JobConfig(
        job_name="script",
        sharding_total_count=4,
        sharding_item_parameters="0=a,1=b,2=c",
        job_parameter='say "hi"',
        type=JobType.SCRIPT,
        props={"script.command.line": line},
    )
    with fleet(zookeeper) as f:
        for instance in (A, B):
            f.start(instance, lambda s: s.add_job(config))
        f.trigger("script")
        runs = f.wait_finished("script", 4)
    assert all(r.success for r in runs), [r.error for r in runs]
    owner = {r.context.sharding_item: r.instance for r in runs}
    assert set(owner.values()) == {A, B}
    for item in range(4):
        mine = ",".join(str(i) for i in sorted(i for i in owner if owner[i] == owner[item]))
        task = f"script@-@{mine}@-@READY@-@{owner[item]}"  # the instance id is ip@-@pid
        param = {0: '"a"', 1: '"b"', 2: '"c"', 3: "null"}[item]
        exact = (
            f'{{"jobName":"script","taskId":"{task}","shardingTotalCount":4,'
            f'"jobParameter":"say \\"hi\\"","shardingItem":{item},"shardingParameter":{param}}}'
        )
        assert json.loads((out / f"{item}.json").read_text()) == ["two words", "$HOME;echo", exact]
    logged = [r.getMessage() for r in caplog.records if r.name == "shardcron.execution.jobs"]
    for item in range(4):
        assert f"job script item {item} stdout: hello from item {item}" in logged
        assert f"job script item {item} stdout: second line" in logged
        assert f"job script item {item} stderr: to stderr" in logged


def test_script_non_zero_exit_fails_the_item_naming_the_code(loop: AsyncLoop) -> None:
    run = make_runner(
        typed(JobType.SCRIPT, **{"script.command.line": f"{sys.executable} -c 'exit(3)'"}),
        None,
        loop,
    )
    with pytest.raises(ItemFailedError, match=r"job job item 2: script exited with code 3"):
        run(context(2))


def test_script_that_cannot_start_fails_the_item(loop: AsyncLoop, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-program"
    run = make_runner(typed(JobType.SCRIPT, **{"script.command.line": str(missing)}), None, loop)
    with pytest.raises(ItemFailedError, match="cannot start"):
        run(context())


def test_script_timeout_kills_the_whole_process_group(loop: AsyncLoop, tmp_path: Path) -> None:
    pids = tmp_path / "child.pid"
    body = (
        "import subprocess, sys, pathlib, time; "
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"pathlib.Path({str(pids)!r}).write_text(str(child.pid)); "
        "time.sleep(60)"
    )
    config = typed(
        JobType.SCRIPT,
        **{"script.command.line": shlex.join([sys.executable, "-c", body])},
        **{"script.timeout.seconds": "1.5"},
    )
    run = make_runner(config, None, loop)
    with pytest.raises(ItemFailedError, match=r"timed out after 1.5s and was killed"):
        run(context())
    child = int(pids.read_text())
    wait_until(lambda: not alive(child), what="the script's child to be killed too")


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize(
    ("props", "field"),
    [
        ({"script.command.line": "  "}, "props.script.command.line"),
        ({"script.command.line": "run 'unclosed"}, "props.script.command.line"),
        (
            {"script.command.line": "true", "script.timeout.seconds": "soon"},
            "props.script.timeout.seconds",
        ),
        (
            {"script.command.line": "true", "script.timeout.seconds": "-1"},
            "props.script.timeout.seconds",
        ),
    ],
)
def test_bad_script_props_are_one_line_config_errors(
    loop: AsyncLoop, props: dict[str, str], field: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        make_runner(typed(JobType.SCRIPT, **props), None, loop)
    assert caught.value.field == field and "\n" not in str(caught.value)


def test_script_and_http_jobs_take_no_callable(loop: AsyncLoop) -> None:
    with pytest.raises(ConfigError, match="register them without a callable"):
        make_runner(typed(JobType.SCRIPT, **{"script.command.line": "true"}), print, loop)


# -- HTTP ---------------------------------------------------------------------------------------


def test_http_job_posts_each_item_with_its_context_header_on_two_instances(
    zookeeper: ZooKeeperServer,
) -> None:
    with http_sink() as sink, fleet(zookeeper) as f:
        config = JobConfig(
            job_name="hook",
            sharding_total_count=4,
            job_parameter="ü",
            type=JobType.HTTP,
            props={
                "http.uri": sink.url("/run?from=shardcron"),
                "http.method": "post",
                "http.data": "source=test",
                "http.content.type": "application/x-www-form-urlencoded",
            },
        )
        for instance in (A, B):
            f.start(instance, lambda s: s.add_job(config))
        f.trigger("hook")
        runs = f.wait_finished("hook", 4)
        requests = sink.received()
    assert all(r.success for r in runs), [r.error for r in runs]
    assert {r.instance for r in runs} == {A, B}
    assert len(requests) == 4
    contexts = sorted(
        (json.loads(r.headers["shardingContext"]) for r in requests),
        key=lambda c: int(c["shardingItem"]),
    )
    assert [c["shardingItem"] for c in contexts] == [0, 1, 2, 3]
    assert all(c["jobName"] == "hook" and c["jobParameter"] == "ü" for c in contexts)
    for request in requests:
        assert (request.method, request.path, request.body) == (
            "POST",
            "/run?from=shardcron",
            b"source=test",
        )
        assert request.headers["Content-Type"] == "application/x-www-form-urlencoded"


def http_runner(loop: AsyncLoop, uri: str, method: str = "GET", **props: str) -> ItemRunner:
    config = typed(JobType.HTTP, **{"http.uri": uri, "http.method": method, **props})
    return make_runner(config, None, loop)


def test_http_get_sends_no_body(loop: AsyncLoop) -> None:
    with http_sink() as sink:
        http_runner(loop, sink.url("/get"), "GET", **{"http.data": "ignored"})(context())
        (request,) = sink.received()
    assert request.method == "GET" and request.body == b""
    assert "Content-Length" not in request.headers


@pytest.mark.parametrize("method", ["PUT", "DELETE"])
def test_http_put_and_delete_send_the_body(loop: AsyncLoop, method: str) -> None:
    with http_sink() as sink:
        http_runner(loop, sink.url("/x"), method, **{"http.data": "d"})(context())
        (request,) = sink.received()
    assert (request.method, request.body) == (method, b"d")


def test_http_error_status_fails_the_item(loop: AsyncLoop) -> None:
    with http_sink() as sink:
        run = http_runner(loop, sink.url("/status/503"))
        with pytest.raises(
            ItemFailedError, match="returned 503 Service Unavailable: server says no"
        ):
            run(context())


def test_http_network_error_fails_the_item(loop: AsyncLoop) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    run = http_runner(loop, f"http://127.0.0.1:{port}/")
    with pytest.raises(ItemFailedError, match="ConnectionRefusedError"):
        run(context())


def test_http_read_timeout_fails_the_item(loop: AsyncLoop) -> None:
    with http_sink() as sink:
        run = http_runner(loop, sink.url("/hang"), **{"http.read.timeout.milliseconds": "200"})
        with pytest.raises(ItemFailedError, match="timed out"):
            run(context())


@pytest.mark.parametrize(
    ("props", "field"),
    [
        ({"http.uri": "ftp://host/x", "http.method": "GET"}, "props.http.uri"),
        ({"http.uri": "http://host:99999/x", "http.method": "GET"}, "props.http.uri"),
        ({"http.uri": "http://host/x"}, "props.http.method"),
        (
            {
                "http.uri": "http://h/",
                "http.method": "GET",
                "http.connect.timeout.milliseconds": "0",
            },
            "props.http.connect.timeout.milliseconds",
        ),
        (
            {"http.uri": "http://h/", "http.method": "GET", "http.read.timeout.milliseconds": "x"},
            "props.http.read.timeout.milliseconds",
        ),
    ],
)
def test_bad_http_props_are_one_line_config_errors(
    loop: AsyncLoop, props: dict[str, str], field: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        make_runner(typed(JobType.HTTP, **props), None, loop)
    assert caught.value.field == field and "\n" not in str(caught.value)


def test_prop_problems_checks_props_without_touching_user_code() -> None:
    bad = typed(JobType.SCRIPT, **{"script.command.line": "x", "script.timeout.seconds": "0"})
    assert [p.field for p in prop_problems(bad)] == ["props.script.timeout.seconds"]
    flow = JobConfig(
        job_name="job",
        sharding_total_count=1,
        type=JobType.DATAFLOW,
        callable="no.such.module:Flow",
        props={"streaming.process": "sometimes"},
    )
    assert [p.field for p in prop_problems(flow)] == ["props.streaming.process"]
    assert prop_problems(JobConfig(job_name="job", sharding_total_count=1)) == []


def test_the_decorator_needs_the_item_count_like_a_config_file() -> None:
    scheduler = Scheduler(MemoryRegistry())
    with pytest.raises(ConfigError) as raised:
        scheduler.job("* * * * * ?")
    assert str(raised.value) == "shardingTotalCount: required: pass e.g. sharding_total_count=3"
    with pytest.raises(ConfigError, match="shardingTotalCount: required"):  # as in a file
        JobConfig.from_mapping({"callable": "json:dumps"}, "j")
