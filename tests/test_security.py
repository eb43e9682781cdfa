"""Whoever can write the registry steers schedules, never code; secrets stay on the worker.

The distributed tests run two workers, each with its own session, on the real ZooKeeper;
the "attacker" is an anonymous session on the same namespace, as anyone who reaches an
ensemble without a digest ACL is.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import socket
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from shardcron.config import plugins, secrecy
from shardcron.config.job import JobConfig
from shardcron.config.jobtypes import JobType
from shardcron.config.registry import RegistryConfig, parse_registry_url
from shardcron.coordination.paths import JobPaths
from shardcron.coordination.strategies import avg_allocation
from shardcron.errors import ConfigError
from shardcron.execution.errorhandlers import Email, _Notifying, make_error_handler
from shardcron.execution.jobs import (
    MAX_RESPONSE_BYTES,
    HttpSettings,
    ItemFailedError,
    ScriptSettings,
    call_http,
    http_request,
    run_script,
)
from shardcron.model import ShardingContext
from shardcron.observability.dump import DumpServer, request_dump
from shardcron.operations.admin import Admin
from shardcron.registry import Registry
from shardcron.registry.memory import MemoryRegistry
from shardcron.registry.zookeeper import ZooKeeperRegistry
from shardcron.scheduler.process import Scheduler
from shardcron.testing.zookeeper import ZooKeeperServer, unique_namespace
from tests import job_samples
from tests.conftest import zk_config
from tests.helpers import wait_until
from tests.job_samples import fleet
from tests.test_console import console_on

A, B = "127.0.0.1@-@5101", "127.0.0.2@-@5102"
VICTIM = JobPaths("victim")
CANARY = "tests.marker_strategy"


@pytest.fixture
def marker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "marker"
    monkeypatch.setenv("SHARDCRON_TEST_MARKER", str(path))
    sys.modules.pop(CANARY, None)
    return path


def all_znodes(registry: Registry, path: str = "/") -> Iterator[tuple[str, bytes]]:
    """Every node below ``path`` with its value, as an anonymous client reads them."""
    for name in registry.children(path):
        child = f"{path.rstrip('/')}/{name}"
        yield child, registry.get(child) or b""
        yield from all_znodes(registry, child)


# -- names from the registry never import code ------------------------------------------------


def test_a_registry_written_strategy_naming_code_runs_nothing_and_the_job_keeps_running(
    zookeeper: ZooKeeperServer, marker: Path, caplog: pytest.LogCaptureFixture
) -> None:
    job = JobConfig(job_name="victim", sharding_total_count=2)
    with fleet(zookeeper) as f:
        for instance in (A, B):
            f.start(instance, lambda s: s.add_job(job, job_samples.record))
        f.trigger("victim")
        f.wait_finished("victim", 2)

        # The attack: an anonymous session names code as the strategy, then asks for a reshard.
        attacker = f.admin
        evil = job.with_changes(job_sharding_strategy_type=f"{CANARY}:write_marker")
        attacker.put(VICTIM.config, evil.to_yaml().encode())
        attacker.put(VICTIM.sharding_necessary, b"")
        wait_until(
            lambda: len([r for r in caplog.records if "ignoring invalid config" in r.message]) >= 2,
            what="both workers to refuse the update",
        )
        f.trigger("victim")
        runs = f.wait_finished("victim", 4)

        # And the job's own code cannot be swapped through the registry either.
        swapped = job.with_changes(callable=f"{CANARY}:run_marker")
        attacker.put(VICTIM.config, swapped.to_yaml().encode())
        wait_until(lambda: not attacker.children(VICTIM.triggers), what="triggers taken")
        f.trigger("victim")
        runs = f.wait_finished("victim", 6)

    assert not marker.exists(), marker.read_text()
    assert CANARY not in sys.modules
    assert {r.instance for r in runs[2:]} == {A, B} and all(r.success for r in runs)
    refusal = next(r for r in caplog.records if "ignoring invalid config" in r.message)
    assert "jobShardingStrategyType: unknown name" in refusal.message
    assert "\n" not in refusal.message


def test_a_locally_registered_strategy_is_chosen_by_name_from_the_registry(
    zookeeper: ZooKeeperServer,
) -> None:
    def everything_to_b(ids: object, job: str, total: int) -> dict[str, list[int]]:
        return {A: [], B: list(range(total))}

    job = JobConfig(job_name="victim", sharding_total_count=3)
    try:
        with fleet(zookeeper) as f:
            for instance in (A, B):
                f.start(instance, lambda s: s.add_job(job, job_samples.record))
            plugins.register(plugins.Kind.STRATEGY, "ALL_TO_B", everything_to_b)
            Admin(f.admin).update_config("victim", {"jobShardingStrategyType": "ALL_TO_B"})
            wait_until(
                lambda: all(
                    s.runtimes["victim"].config.job_sharding_strategy_type == "ALL_TO_B"
                    for s in f.schedulers.values()
                ),
                what="the new strategy",
            )
            f.admin.put(VICTIM.sharding_necessary, b"")
            f.trigger("victim")
            runs = f.wait_finished("victim", 3)
    finally:
        plugins.unregister(plugins.Kind.STRATEGY, "ALL_TO_B")
    assert {r.instance for r in runs} == {B}


def test_the_worker_block_and_scheduler_register_names_a_local_file_may_use(
    tmp_path: Path, marker: Path
) -> None:
    scheduler = Scheduler("memory://names", strategies={"CANARY_FREE": avg_allocation})
    try:
        assert plugins.lookup(plugins.Kind.STRATEGY, "CANARY_FREE") is avg_allocation
    finally:
        plugins.unregister(plugins.Kind.STRATEGY, "CANARY_FREE")
        scheduler.registry.close()
    config = tmp_path / "jobs.yaml"
    config.write_text(
        "worker:\n  strategies: {MINE: 'tests.marker_strategy:write_marker'}\n"
        "jobs:\n  j: {shardingTotalCount: 1, callable: 'json:dumps', "
        "jobShardingStrategyType: MINE}\n",
        encoding="utf-8",
    )
    from shardcron.config.file import check_file

    try:
        assert check_file(config) == []  # the local file may name local code: it is imported
        assert plugins.lookup(plugins.Kind.STRATEGY, "MINE") is not None
    finally:
        plugins.unregister(plugins.Kind.STRATEGY, "MINE")


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"jobShardingStrategyType": "os:system"}, "jobShardingStrategyType"),
        ({"jobListenerTypes": "pty:spawn"}, "jobListenerTypes"),
        ({"jobErrorHandlerType": "os:system"}, "jobErrorHandlerType"),
        ({"props.email.password": "hunter2"}, "props.email.password"),
    ],
)
def test_operator_tools_refuse_code_references_and_literal_secrets_without_importing(
    settings: dict[str, str], field: str
) -> None:
    registry = MemoryRegistry(namespace=unique_namespace("ops"))
    registry.start()
    try:
        job = JobConfig(job_name="victim", sharding_total_count=1, callable="json:dumps")
        registry.put(VICTIM.root, b"json:dumps")
        registry.put(VICTIM.config, job.to_yaml().encode())
        with pytest.raises(ConfigError) as caught:
            Admin(registry).update_config("victim", settings)
        assert caught.value.field == field and "\n" not in str(caught.value)
        # A plain name is left to the workers to judge: the operator cannot see their tables.
        Admin(registry).update_config("victim", {"jobShardingStrategyType": "MY_STRATEGY"})
    finally:
        registry.close()


# -- secrets stay on the worker -----------------------------------------------------------------

PASSWORD, TOKEN, SIGNING = "smtp-pa55-word", "ding-t0ken-value", "ding-s1gning-secret"


def secret_jobs() -> list[JobConfig]:
    mail = {
        "email.host": "smtp.example.com",
        "email.from": "a@example.com",
        "email.to": "b@example.com",
        "email.username": "robot",
        "email.password": "${SMTP_PASSWORD}",
    }
    robot = {
        "dingtalk.webhook": "https://oapi.dingtalk.com/robot/send?access_token=${DING_TOKEN}",
        "dingtalk.secret": "${DING_SECRET}",
    }
    return [
        JobConfig(
            job_name="mailer", sharding_total_count=1, job_error_handler_type="EMAIL", props=mail
        ),
        JobConfig(
            job_name="robot", sharding_total_count=1, job_error_handler_type="DINGTALK", props=robot
        ),
    ]


def add_secret_jobs(scheduler: Scheduler) -> None:
    for job in secret_jobs():
        scheduler.add_job(job, job_samples.record)


def test_no_znode_guest_page_or_dump_holds_a_configured_secret(
    zookeeper: ZooKeeperServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SMTP_PASSWORD", PASSWORD)
    monkeypatch.setenv("DING_TOKEN", TOKEN)
    monkeypatch.setenv("DING_SECRET", SIGNING)
    secrets = (PASSWORD, TOKEN, SIGNING)
    with fleet(zookeeper) as f:
        for instance in (A, B):
            f.start(instance, add_secret_jobs)
        worker = f.schedulers[A]
        assert set(worker.runtimes) == {"mailer", "robot"}
        # The worker itself has the values: its handlers were built from the references.
        mailer = make_error_handler(secret_jobs()[0])
        assert isinstance(mailer, _Notifying) and isinstance(mailer.notify, Email)
        assert mailer.notify.password == PASSWORD

        everything = b"\n".join(v for _, v in all_znodes(f.admin)).decode()
        assert "${SMTP_PASSWORD}" in everything and "${DING_TOKEN}" in everything
        dump = DumpServer(worker.registry, 0).start()
        try:
            dumps = [request_dump("127.0.0.1", dump.port, job) for job in ("mailer", "robot")]
        finally:
            dump.stop()
        admin = Admin(f.admin)
        dumps += [admin.dump("mailer"), admin.dump("robot")]
        with console_on(f.admin, None) as console:
            client, _ = console.guest_client()
            pages = [client.get(f"/jobs/{job}").text for job in ("mailer", "robot")]
    for text in [everything, *dumps, *pages]:
        for secret in secrets:
            assert secret not in text


def test_a_literal_secret_is_a_config_error_naming_the_field_and_the_fix() -> None:
    job = secret_jobs()[0].with_changes(
        props={**secret_jobs()[0].props, "email.password": "hunter2"}
    )
    with pytest.raises(ConfigError) as caught:
        Scheduler("memory://literal").add_job(job, job_samples.record)
    message = str(caught.value)
    assert caught.value.field == "props.email.password"
    assert "${EMAIL_PASSWORD}" in message and "hunter2" not in message
    url = JobConfig(
        job_name="h",
        sharding_total_count=1,
        type=JobType.HTTP,
        props={"http.uri": "https://u:pw@h/x", "http.method": "GET"},
    )
    assert [p.field for p in url.validate_all()] == ["props.http.uri"]


def test_secrets_written_before_are_redacted_in_the_console_and_dumps(
    zookeeper: ZooKeeperServer,
) -> None:
    registry = ZooKeeperRegistry(zk_config(zookeeper, unique_namespace("legacy")))
    registry.start()
    try:
        legacy = (
            "jobName: old\nshardingTotalCount: 1\nprops:\n  email.password: hunter2\n"
            "  webhook.url: https://hooks.example.com/x?token=tok3n&room=ops\n"
        )
        registry.put("/old", b"json:dumps")
        registry.put("/old/config", legacy.encode())
        dump = Admin(registry).dump("old")
        with console_on(registry, None) as console:
            client, _ = console.guest_client()
            page = client.get("/jobs/old").text
    finally:
        registry.close()
    for text in (dump, page):
        assert "hunter2" not in text and "tok3n" not in text
        assert "room=ops" in text and "***" in text


def test_redaction_of_text_urls_and_the_registry_config() -> None:
    text = secrecy.redact_text(
        "props:\n  email.password: hunter2\n  dingtalk.keyword: shardcron\n"
        "  url: zk://user:pa55@h:2181/ns and https://h/x?access_token=abc&a=1\n"
        "  api.token: ${API_TOKEN}\n"
    )
    assert "hunter2" not in text and "pa55" not in text and "abc" not in text
    assert "dingtalk.keyword: shardcron" in text and "a=1" in text
    assert "${API_TOKEN}" in text  # a reference is not a secret
    config = parse_registry_url("zk://ops:pa55word@127.0.0.1:2181/ns")
    assert config.digest == "ops:pa55word" and "pa55word" not in repr(config)
    assert "pa55word" not in repr(RegistryConfig(servers="h:1", namespace="n", digest="a:pa55word"))
    with pytest.raises(ConfigError) as caught:
        parse_registry_url("zk://ops:pa55word@127.0.0.1:2181")
    assert "pa55word" not in str(caught.value)


def test_a_reference_missing_on_the_worker_stops_only_that_job() -> None:
    scheduler = Scheduler("memory://missing")
    scheduler.add_job(secret_jobs()[0], job_samples.record)
    scheduler.add_job(JobConfig(job_name="fine", sharding_total_count=1), job_samples.record)
    scheduler.start()
    try:
        assert set(scheduler.runtimes) == {"fine"}
        error = str(scheduler.failed["mailer"])
        assert "props.email.password" in error and "SMTP_PASSWORD" in error
    finally:
        scheduler.stop(grace=1)


# -- SCRIPT children, HTTP bodies and error messages ----------------------------------------------


def test_script_children_do_not_inherit_shardcron_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHARDCRON_REGISTRY", "zk://ops:pa55@h:2181/ns")
    monkeypatch.setenv("SHARDCRON_CONSOLE_ADMIN", "root:pa55")
    monkeypatch.setenv("APP_SETTING", "kept")
    out = tmp_path / "env.txt"
    code = (
        "import os, sys; open(sys.argv[1], 'w').write(' '.join(k for k in "
        "('SHARDCRON_REGISTRY', 'SHARDCRON_CONSOLE_ADMIN', 'APP_SETTING') if k in os.environ))"
    )
    settings = ScriptSettings((sys.executable, "-c", code, str(out)), timeout=30)
    run_script(settings, item_context("s"))
    assert out.read_text() == "APP_SETTING"


def item_context(job: str) -> ShardingContext:
    return ShardingContext(
        job_name=job,
        task_id=f"{job}@-@0@-@READY@-@127.0.0.1@-@1",
        sharding_total_count=1,
        job_parameter="",
        sharding_item=0,
        sharding_parameter=None,
    )


class _Big(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(500)
        self.send_header("Content-Length", str(4 * MAX_RESPONSE_BYTES))
        self.end_headers()
        self.wfile.write(b"x" * (4 * MAX_RESPONSE_BYTES))

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_http_bodies_are_capped_and_errors_carry_no_url_token() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Big)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/run?token=t0psecret&x=1"
    try:
        status, _, body = http_request(url, "GET", None, {}, 5, 5)
        assert status == 500 and len(body) == MAX_RESPONSE_BYTES
        settings = HttpSettings(url, "GET", "", 5, 5, None)
        ctx = item_context("h")
        with pytest.raises(ItemFailedError) as caught:
            call_http(settings, ctx)
    finally:
        server.shutdown()
        server.server_close()
    assert "t0psecret" not in str(caught.value) and "token=***" in str(caught.value)


# -- the dump port ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line", [b"dump@..\n", b"dump@.\n", b"dump@/\n", b"dump@a\x00b\n", b"\xff\xfe\n", b"x" * 9000]
)
def test_the_dump_port_answers_any_input_without_a_traceback(
    line: bytes, capfd: pytest.CaptureFixture[str]
) -> None:
    registry = MemoryRegistry(namespace=unique_namespace("dump"))
    registry.start()
    server = DumpServer(registry, 0).start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as conn:
            # A line over the 4 KiB the server reads: it closes with bytes unread, which
            # resets the connection, maybe before the client is done with it.
            reset = (OSError,) if len(line) > 4096 else ()
            with contextlib.suppress(*reset):
                conn.sendall(line)
                conn.shutdown(socket.SHUT_WR)
                assert conn.recv(1024) == b""
    finally:
        server.stop()
        registry.close()
    assert "Traceback" not in capfd.readouterr().err


# -- ACLs on a namespace created without a digest ------------------------------------------------


def test_an_open_namespace_is_reported_and_the_acl_command_closes_it(
    zookeeper: ZooKeeperServer, caplog: pytest.LogCaptureFixture
) -> None:
    namespace = unique_namespace("acl")
    anonymous = ZooKeeperRegistry(zk_config(zookeeper, namespace))
    anonymous.start()
    digest_config = dataclasses.replace(zk_config(zookeeper, namespace), digest="ops:acl-pa55")
    try:
        anonymous.put("/orders/config", b"jobName: orders\n")
        with caplog.at_level(logging.WARNING):
            secured = ZooKeeperRegistry(digest_config)
            secured.start()
        (warning,) = [r for r in caplog.records if "writable by anyone" in r.message]
        assert "shardcron acl" in warning.message and "acl-pa55" not in warning.message
        assert secured.apply_digest_acl() == 3  # the namespace, /orders, /orders/config
        assert not secured.world_writable()
        assert secured.get("/orders/config") == b"jobName: orders\n"
        secured.close()
        raw = KazooClient(hosts=f"{zookeeper.connect_string}/{namespace}")
        raw.start(timeout=10)
        try:
            with pytest.raises(NoAuthError):
                raw.get("/orders/config")
            with pytest.raises(NoAuthError):
                raw.set("/orders/config", b"jobShardingStrategyType: os:system\n")
        finally:
            raw.stop()
            raw.close()
    finally:
        anonymous.close()


def test_the_acl_command_applies_the_digest_and_needs_one(zookeeper: ZooKeeperServer) -> None:
    from click.testing import CliRunner

    from shardcron.cli.main import main

    namespace = unique_namespace("aclcli")
    anonymous = ZooKeeperRegistry(zk_config(zookeeper, namespace))
    anonymous.start()
    try:
        anonymous.put("/orders/config", b"jobName: orders\n")
    finally:
        anonymous.close()
    base = f"zk://{zookeeper.connect_string}/{namespace}"
    runner = CliRunner()
    refused = runner.invoke(main, ["acl", "--registry", base])
    assert refused.exit_code == 1 and "registry.digest" in refused.output
    done = runner.invoke(
        main, ["acl", "--registry", f"zk://ops:cli-pa55@{zookeeper.connect_string}/{namespace}"]
    )
    assert done.exit_code == 0, done.output
    assert f"digest ACL applied to 3 nodes of /{namespace}" in done.output
    assert "cli-pa55" not in done.output


def test_the_cli_log_handler_redacts_secrets(caplog: pytest.LogCaptureFixture) -> None:
    caplog.handler.addFilter(secrecy.RedactingFilter())
    logging.getLogger("shardcron.test").error(
        "could not post to %s", "https://h/hook?access_token=s3cr3t&room=1"
    )
    (record,) = caplog.records
    assert "s3cr3t" not in caplog.text and "access_token=***&room=1" in record.getMessage()
