"""The web console over HTTP: login, sessions, CSRF and origin checks, roles, every action's
registry writes, config validation, live parts, history filters and paging.

The app runs in uvicorn on a loopback port and is driven with httpx, cookies and all. The
registry is an in-memory one seeded with a job layout; the trace history is a SQLite file.
Real workers and a real browser are in ``test_console_e2e.py``.
"""

from __future__ import annotations

import html
import re
import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest
import uvicorn
from click.testing import CliRunner
from starlette.types import ASGIApp

from shardcron.cli.main import main
from shardcron.config.instancerecord import instance_yaml
from shardcron.config.job import JobConfig
from shardcron.console.app import create_app
from shardcron.console.auth import Accounts, Role, account
from shardcron.console.chart import run_chart
from shardcron.console.config_form import changed_settings, current_values, submitted_values
from shardcron.coordination.paths import JobPaths
from shardcron.operations.admin import Admin
from shardcron.registry import Registry
from shardcron.registry.memory import MemoryRegistry
from shardcron.registry.zookeeper import ZooKeeperRegistry
from shardcron.testing.zookeeper import ZooKeeperServer, unique_namespace
from shardcron.tracing import ExecutionRecord, StatusRecord
from shardcron.tracing.history import RunPoint
from shardcron.tracing.sql import SqlSink, open_engine
from tests.conftest import zk_config
from tests.helpers import wait_until
from tests.workers import ROOT

A, B = "10.0.0.1@-@101", "10.0.0.2@-@102"
IP_A, IP_B = "10.0.0.1", "10.0.0.2"
ORDERS = JobPaths("orders")
ADMIN, GUEST = ("root", "root-pass-1"), ("viewer", "viewer-pass-1")
EVIL = "http://evil.example"
SESSION = "shardcron_console"


# -- serving an app ------------------------------------------------------------------------------


@contextmanager
def serving(app: ASGIApp) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free loopback port, in a thread; yield its base URL."""
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, name="console", daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, timeout=10, what="the console to listen")
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "no CSRF token on the page"
    return found.group(1)


def flash_of(page: str) -> str:
    found = re.search(r'class="flash flash-(\w+)"[^>]*>([^<]*)<', page)
    assert found, "no message on the page"
    return f"{found.group(1)}: {html.unescape(found.group(2).strip())}"


def log_in(client: httpx.Client, user: str, password: str) -> str:
    """Log in through the form; return the session's CSRF token."""
    token = csrf_of(client.get("/login").text)
    answer = client.post("/login", data={"user": user, "password": password, "csrf": token})
    assert answer.status_code == 303, answer.text
    return csrf_of(client.get("/jobs").text)


# -- a seeded namespace ----------------------------------------------------------------------------


def seed(registry: Registry) -> None:
    """A 3-item job on two live instances (item 1 running), and a one-off job never run."""
    config = JobConfig(
        job_name="orders",
        cron="0/5 * * * * ?",
        time_zone="Europe/Paris",
        sharding_total_count=3,
        sharding_item_parameters="0=north,1=south,2=west",
        failover=True,
        props={"region": "eu"},
    )
    registry.put(ORDERS.config, config.to_yaml().encode())
    for instance, ip in ((A, IP_A), (B, IP_B)):
        registry.put(ORDERS.server(ip), b"ENABLED")
        registry.create(ORDERS.instance(instance), instance_yaml(instance, ip).encode())
    for item, owner in ((0, A), (1, B), (2, A)):
        registry.put(ORDERS.item_instance(item), owner.encode())
    registry.put(ORDERS.running(1), b"")
    registry.put(ORDERS.election_instance, A.encode())
    report = JobPaths("report")
    registry.put(
        report.config, JobConfig(job_name="report", sharding_total_count=1).to_yaml().encode()
    )


def trace(url: str) -> None:
    """Twelve runs of orders (item 2 of the last fire failed, item 0 still running) and states."""
    base = datetime.now() - timedelta(minutes=10)
    records: list[ExecutionRecord | StatusRecord] = []
    for fire in range(4):
        start = base + timedelta(seconds=5 * fire)
        task = f"orders@-@0,1,2@-@READY@-@{IP_A}@-@101"
        for item in range(3):
            begun = start + timedelta(milliseconds=item)  # a fixed order within the fire
            failed = fire == 3 and item == 2
            running = fire == 3 and item == 0
            records.append(
                ExecutionRecord(
                    id=uuid.uuid4().hex,
                    job_name="orders",
                    task_id=task,
                    hostname="host-a",
                    ip=IP_A,
                    sharding_item=item,
                    execution_source="NORMAL_TRIGGER",
                    start_time=begun,
                    complete_time=None if running else begun + timedelta(seconds=0.25 * item),
                    is_success=not failed,
                    failure_cause="RuntimeError: no stock" if failed else None,
                )
            )
        for n, state in enumerate(("TASK_STAGING", "TASK_RUNNING", "TASK_FINISHED")):
            records.append(
                StatusRecord(
                    id=uuid.uuid4().hex,
                    job_name="orders",
                    original_task_id="",
                    task_id=task,
                    slave_id=IP_A,
                    source="LITE_EXECUTOR",
                    execution_type="READY",
                    sharding_item="[0, 1, 2]",
                    state=state,
                    message=None,
                    creation_time=start + timedelta(milliseconds=n),
                )
            )
    sink = SqlSink(url)
    sink.write(records)
    sink.close()


@dataclass
class Console:
    registry: Registry
    base: str
    url: str | None  # of the trace database

    def client(self, origin: str | None = None, session: str | None = None) -> httpx.Client:
        headers = {"Origin": origin} if origin else {}
        cookies = {SESSION: session} if session else {}
        return httpx.Client(base_url=self.base, headers=headers, cookies=cookies, timeout=10)

    def admin_client(self) -> tuple[httpx.Client, str]:
        client = self.client(self.base)
        return client, log_in(client, *ADMIN)

    def guest_client(self) -> tuple[httpx.Client, str]:
        client = self.client(self.base)
        return client, log_in(client, *GUEST)


def accounts() -> Accounts:
    return Accounts([account(":".join(ADMIN), Role.ADMIN), account(":".join(GUEST), Role.GUEST)])


@contextmanager
def console_on(
    registry: Registry, trace_url: str | None, secret: str | None = None
) -> Iterator[Console]:
    engine = open_engine(trace_url) if trace_url else None
    with Admin(registry, cached=True) as admin:
        app = create_app(admin, accounts(), tracing=engine, secret=secret)
        with serving(app) as base:
            yield Console(registry, base, trace_url)
    if engine is not None:
        engine.dispose()


@pytest.fixture
def memory() -> Iterator[Registry]:
    registry = MemoryRegistry(namespace=unique_namespace("console"))
    registry.start()
    seed(registry)
    try:
        yield registry
    finally:
        registry.close()


@pytest.fixture
def console(memory: Registry, tmp_path: Path) -> Iterator[Console]:
    url = f"sqlite:///{tmp_path / 'trace.db'}"
    trace(url)
    with console_on(memory, url) as made:
        yield made


# -- login and sessions -----------------------------------------------------------------------------


def test_every_page_needs_a_login_and_a_wrong_password_is_refused(console: Console) -> None:
    client = console.client()
    for path in ("/jobs", "/jobs/orders", "/servers", "/history/executions"):
        answer = client.get(path)
        assert answer.status_code == 303
        assert answer.headers["location"] == f"/login?next={path.replace('/', '%2F')}"
    # A live part cannot be redirected: the page's script gets a 401 and goes to the login.
    assert client.get("/jobs?part=table").status_code == 401

    token = csrf_of(client.get("/login").text)
    wrong = client.post("/login", data={"user": "root", "password": "nope", "csrf": token})
    unknown = client.post("/login", data={"user": "nobody", "password": "x", "csrf": token})
    for answer in (wrong, unknown):
        assert answer.status_code == 401
        assert flash_of(answer.text) == "error: Wrong user name or password."
    assert client.get("/jobs").status_code == 303

    ok = client.post(
        "/login",
        data={"user": "root", "password": ADMIN[1], "csrf": token, "next": "/servers"},
    )
    assert (ok.status_code, ok.headers["location"]) == (303, "/servers")
    page = client.get("/jobs")
    assert page.status_code == 200
    assert 'data-job="orders"' in page.text and 'data-job="report"' in page.text


def test_sessions_are_signed_httponly_samesite_cookies_that_end_at_logout(
    memory: Registry,
) -> None:
    with console_on(memory, None, secret="s" * 32) as first:
        leaving, token = first.admin_client()
        staying, _ = first.guest_client()
        left, kept = leaving.cookies[SESSION], staying.cookies[SESSION]
        assert leaving.get("/login").status_code == 303  # logged in: the login page sends you on
        set_cookie = leaving.post("/logout", data={"csrf": token}).headers["set-cookie"].lower()
        assert "httponly" in set_cookie and "samesite=lax" in set_cookie
        assert leaving.get("/jobs").status_code == 303
        # A copy of the cookie taken before the logout is worth nothing either.
        assert first.client(session=left).get("/jobs").status_code == 303
        assert first.client(session=kept).get("/jobs").status_code == 200

    forged = kept[:-4] + ("AAAA" if not kept.endswith("AAAA") else "BBBB")
    with console_on(memory, None, secret="s" * 32) as same_secret:  # --secret keeps sessions
        assert same_secret.client(session=kept).get("/jobs").status_code == 200
        assert same_secret.client(session=forged).get("/jobs").status_code == 303
    with console_on(memory, None) as random_secret:  # without it a restart ends them
        assert random_secret.client(session=kept).get("/jobs").status_code == 303


def test_the_login_form_itself_needs_its_token(console: Console) -> None:
    client = console.client()
    client.get("/login")
    answer = client.post("/login", data={"user": "root", "password": ADMIN[1], "csrf": "forged"})
    assert answer.status_code == 403
    assert client.get("/jobs").status_code == 303


def test_login_sends_you_on_only_within_the_console(console: Console) -> None:
    client = console.client()
    token = csrf_of(client.get("/login").text)
    for target in ("https://evil.example/", "//evil.example/x", "/\\evil.example"):
        answer = client.post(
            "/login",
            data={"user": "root", "password": ADMIN[1], "csrf": token, "next": target},
        )
        assert answer.headers["location"] == "/jobs"
        token = csrf_of(client.get("/jobs").text)
        client.post("/logout", data={"csrf": token})
        token = csrf_of(client.get("/login").text)


def test_responses_forbid_framing_inline_script_and_caching(console: Console) -> None:
    client, _ = console.admin_client()
    page = client.get("/jobs/orders")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["cache-control"] == "no-store"
    assert "<script>" not in page.text and "onclick" not in page.text and 'style="' not in page.text
    assert client.get("/static/console.js").status_code == 200


# -- CSRF, origin, roles ------------------------------------------------------------------------------

# Every action the console offers, with the registry change that shows it ran.
ACTIONS: list[tuple[str, dict[str, str]]] = [
    ("/jobs/orders/trigger", {}),
    ("/jobs/orders/disable", {}),
    ("/jobs/orders/enable", {}),
    ("/jobs/orders/shutdown", {"confirm": "yes"}),
    ("/jobs/orders/remove", {"confirm": "yes"}),
    (f"/jobs/orders/servers/{IP_B}/disable", {}),
    (f"/jobs/orders/servers/{IP_B}/enable", {}),
    (f"/jobs/orders/servers/{IP_B}/shutdown", {"confirm": "yes"}),
    (f"/jobs/orders/servers/{IP_B}/remove", {"confirm": "yes"}),
    ("/jobs/orders/items/2/disable", {}),
    ("/jobs/orders/items/2/enable", {}),
    (f"/servers/{IP_B}/disable", {}),
    (f"/servers/{IP_B}/enable", {}),
    (f"/servers/{IP_B}/shutdown", {"confirm": "yes"}),
    (f"/servers/{IP_B}/remove", {"confirm": "yes"}),
    ("/jobs/orders/config", {"shardingTotalCount": "5", "cron": "0/5 * * * * ?"}),
]


def snapshot(registry: Registry, path: str = "/") -> dict[str, bytes | None]:
    """Every node below ``path`` with its value."""
    nodes = {path: registry.get(path)}
    for child in registry.children(path):
        nodes.update(snapshot(registry, f"{path.rstrip('/')}/{child}"))
    return nodes


def test_no_action_runs_without_the_token_or_from_another_origin(console: Console) -> None:
    client, token = console.admin_client()
    foreign = console.client(EVIL)
    foreign.cookies = client.cookies
    before = snapshot(console.registry)
    for path, fields in ACTIONS:
        assert client.post(path, data=fields).status_code == 403, path
        assert client.post(path, data={**fields, "csrf": "x" + token}).status_code == 403, path
        assert foreign.post(path, data={**fields, "csrf": token}).status_code == 403, path
        logged_out = console.client().post(path, data={**fields, "csrf": token})
        assert (logged_out.status_code, logged_out.headers["location"]) == (303, "/login")
    assert snapshot(console.registry) == before


def test_a_guest_sees_every_page_but_no_button_and_cannot_act(console: Console) -> None:
    client, token = console.guest_client()
    for path in ("/jobs", "/jobs/orders", "/servers", f"/servers/{IP_A}", "/history/executions"):
        page = client.get(path)
        assert page.status_code == 200, path
        forms = re.findall(r'<form method="post" action="([^"]+)"', page.text)
        assert forms == ["/logout"], (path, forms)
    assert 'data-item="1"' in client.get("/jobs/orders").text  # the sharding table is there
    assert 'id="config-form"' not in client.get("/jobs/orders").text

    before = snapshot(console.registry)
    for path, fields in ACTIONS:
        answer = client.post(path, data={**fields, "csrf": token})
        assert answer.status_code == 403, path
        assert "guest role" in answer.text
    assert snapshot(console.registry) == before
    assert client.post("/logout", data={"csrf": token}).status_code == 303


# -- actions ----------------------------------------------------------------------------------------


def act(client: httpx.Client, token: str, path: str, **fields: str) -> str:
    """POST an action, follow the redirect, return the message shown."""
    answer = client.post(path, data={"csrf": token, **fields})
    assert answer.status_code == 303, answer.text
    return flash_of(client.get(answer.headers["location"]).text)


def test_actions_write_the_registry_and_say_what_they_did(console: Console) -> None:
    client, token = console.admin_client()
    registry = console.registry

    message = act(client, token, "/jobs/orders/trigger", next="/jobs")
    assert message == "ok: Triggered job 'orders' (2 registry nodes changed)."
    assert registry.children(ORDERS.triggers) == sorted([A, B])
    assert act(client, token, "/jobs/report/trigger") == (
        "error: job 'report' has no online instance; nothing was triggered"
    )

    act(client, token, f"/jobs/orders/servers/{IP_B}/disable")
    assert registry.get(ORDERS.server(IP_B)) == b"DISABLED"
    assert registry.get(ORDERS.server(IP_A)) == b"ENABLED"
    act(client, token, "/jobs/orders/disable")
    assert {registry.get(ORDERS.server(ip)) for ip in (IP_A, IP_B)} == {b"DISABLED"}
    act(client, token, "/jobs/orders/enable")
    assert {registry.get(ORDERS.server(ip)) for ip in (IP_A, IP_B)} == {b"ENABLED"}
    act(client, token, f"/servers/{IP_A}/disable")
    assert registry.get(ORDERS.server(IP_A)) == b"DISABLED"

    assert act(client, token, "/jobs/orders/items/2/disable") == (
        "ok: Disabled item 2 of job 'orders' (1 registry node changed)."
    )
    assert registry.get(ORDERS.disabled(2)) == b""
    act(client, token, "/jobs/orders/items/2/enable")
    assert registry.get(ORDERS.disabled(2)) is None
    assert act(client, token, "/jobs/orders/items/7/disable") == (
        "error: job 'orders': item: 7 is out of range 0..2 (shardingTotalCount is 3)"
    )
    assert act(client, token, "/jobs/nope/trigger").startswith("error: job 'nope' not found")

    act(client, token, f"/jobs/orders/servers/{IP_B}/shutdown", confirm="yes")
    assert registry.children(ORDERS.instances) == [A]


def test_destructive_actions_are_confirmed_first(console: Console) -> None:
    client, token = console.admin_client()
    page = client.get("/jobs/orders").text
    assert 'action="/jobs/orders/remove" class="inline" data-confirm="Remove job' in page
    assert 'action="/jobs/orders/trigger" class="inline">' in page  # no question for a trigger

    asked = client.post("/jobs/orders/remove", data={"csrf": token, "next": "/jobs/orders"})
    assert asked.status_code == 200
    assert "Remove job &#39;orders&#39;? Its instances stop it" in asked.text
    assert console.registry.get(ORDERS.config) is not None  # nothing happened yet
    assert csrf_of(asked.text) == token and 'name="confirm" value="yes"' in asked.text

    done = client.post("/jobs/orders/remove", data={"csrf": token, "confirm": "yes"})
    assert (done.status_code, done.headers["location"]) == (303, "/jobs")
    assert console.registry.get(ORDERS.root) is None
    assert flash_of(client.get("/jobs").text).startswith("ok: Removed job 'orders'")


def test_config_edits_write_only_changed_keys_and_name_a_bad_value(console: Console) -> None:
    client, token = console.admin_client()
    stored = console.registry.get(ORDERS.config)
    page = client.get("/jobs/orders").text
    assert 'name="shardingItemParameters" value="0=north,1=south,2=west"' in page
    fields = browser_form(current_values(JobConfig.from_yaml((stored or b"").decode())))

    bad = client.post(
        "/jobs/orders/config", data={**fields, "csrf": token, "shardingTotalCount": "x"}
    )
    assert bad.status_code == 400
    assert (
        "job &#39;orders&#39;: shardingTotalCount: expected an integer, got &#39;x&#39;" in bad.text
    )
    assert re.search(r'class="field invalid">\s*<label for="f-shardingTotalCount"', bad.text)
    assert 'name="shardingTotalCount" value="x"' in bad.text  # what was typed stays
    bad_cron = client.post(
        "/jobs/orders/config", data={**fields, "csrf": token, "cron": "61 * * * * ?"}
    )
    assert bad_cron.status_code == 400 and "cron:" in bad_cron.text
    assert console.registry.get(ORDERS.config) == stored

    saved = client.post(
        "/jobs/orders/config",
        data={**fields, "csrf": token, "shardingTotalCount": "4", "props": "region=us\ntier=gold"},
    )
    assert saved.status_code == 303
    assert flash_of(client.get("/jobs/orders").text) == (
        "ok: Saved the config of job 'orders': shardingTotalCount, props.region, props.tier."
    )
    config = JobConfig.from_yaml((console.registry.get(ORDERS.config) or b"").decode())
    assert config.sharding_total_count == 4
    assert dict(config.props) == {"region": "us", "tier": "gold"}
    assert config.failover and config.time_zone == "Europe/Paris"  # untouched keys kept

    client.post("/jobs/orders/config", data={**browser_form(current_values(config)), "csrf": token})
    assert flash_of(client.get("/jobs/orders").text) == "ok: Nothing changed in the config."


def browser_form(values: dict[str, str], **changes: str) -> dict[str, str]:
    """What a browser posts for the form showing ``values``: unchecked boxes are left out."""
    return {k: v for k, v in {**values, **changes}.items() if v != "false" and v != ""}


def test_config_form_sends_only_what_differs() -> None:
    config = JobConfig(
        job_name="j", sharding_total_count=2, cron="0 * * * * ?", props={"a": "1", "b": "2"}
    )
    shown = current_values(config)
    assert changed_settings(config, submitted_values(browser_form(shown))) == {}
    posted = browser_form(shown, misfire="", failover="true", props="a=1\nc=3\n")
    assert changed_settings(config, submitted_values(posted)) == {
        "misfire": "false",
        "failover": "true",
        "props.b": "",
        "props.c": "3",
    }
    posted = browser_form(shown, cron="", shardingTotalCount=" 3 ")
    assert changed_settings(config, submitted_values(posted)) == {
        "cron": "",
        "shardingTotalCount": "3",
    }


# -- live parts and history ---------------------------------------------------------------------------


def test_live_parts_follow_the_registry(console: Console) -> None:
    client, _ = console.admin_client()

    def item_row(item: int) -> str:
        part = client.get("/jobs/orders?part=state")
        assert part.status_code == 200 and "<html" not in part.text
        found = re.search(
            rf'<tr data-item="{item}" data-status="(\w+)" data-instance="([^"]*)"', part.text
        )
        assert found
        return f"{found.group(1)} {found.group(2)}"

    assert item_row(1) == f"RUNNING {B}"
    console.registry.delete(ORDERS.running(1))
    console.registry.delete(ORDERS.instance(B))  # B's session ended
    wait_until(lambda: item_row(1) == f"SHARDING_FLAG {B}", what="item 1 orphaned")
    console.registry.put(ORDERS.item_instance(1), A.encode())  # resharded onto A
    wait_until(lambda: item_row(1) == f"PENDING {A}", what="item 1 on A")
    jobs = client.get("/jobs?part=table").text
    assert re.search(r'data-job="orders">.*?status-ok', jobs, re.DOTALL)
    assert client.get("/jobs?part=nothing").status_code == 404


def rows(html: str, table: str) -> list[str]:
    body = html.split(f'id="{table}"', 1)[1].split("</table>", 1)[0]
    return re.findall(r"<tr data-job", body)


def test_execution_history_filters_and_pages(console: Console) -> None:
    client, _ = console.admin_client()
    everything = client.get("/history/executions").text
    assert "Rows 1–12 of 12" in everything
    assert len(rows(everything, "executions-table")) == 12

    failed = client.get("/history/executions", params={"job": "orders", "outcome": "failure"}).text
    assert "Rows 1–1 of 1" in failed and "RuntimeError: no stock" in failed
    item = client.get("/history/executions", params={"item": "1", "limit": "20"}).text
    assert "Rows 1–4 of 4" in item
    instance = client.get("/history/executions", params={"instance": "10.0.0.1@-@101"}).text
    assert "of 12" in instance
    since = (datetime.now() + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M")
    assert "No rows match" in client.get("/history/executions", params={"since": since}).text

    first = client.get("/history/executions", params={"limit": "20", "job": "orders"}).text
    assert 'rel="next"' not in first
    small = client.get("/history/executions?job=orders&offset=0&limit=5")
    assert "Rows 1–5 of 12" in small.text
    link = re.search(r'href="([^"]+)" rel="next"', small.text)
    assert link
    second = client.get(link.group(1).replace("&amp;", "&")).text
    assert "Rows 6–10 of 12" in second and 'rel="prev"' in second

    for params, words in (
        ({"item": "x"}, "item: &#39;x&#39; is not an item number"),
        ({"since": "yesterday"}, "since: &#39;yesterday&#39; is not a date and time"),
        ({"limit": "5000"}, "limit: 5000 is out of range; use 1 to 1000"),
    ):
        answer = client.get("/history/executions", params=params)
        assert answer.status_code == 400 and words in answer.text, params


def test_status_history_filters_by_state_and_task(console: Console) -> None:
    client, _ = console.admin_client()
    page = client.get("/history/statuses", params={"state": "TASK_RUNNING"}).text
    assert "Rows 1–4 of 4" in page
    task = f"orders@-@0,1,2@-@READY@-@{IP_A}@-@101"
    assert "of 12" in client.get("/history/statuses", params={"task_id": task}).text
    assert "of 12" in client.get("/history/statuses?part=table", params={"job": "orders"}).text


def test_job_page_charts_recent_runs_by_duration_and_outcome(console: Console) -> None:
    client, _ = console.admin_client()
    runs = client.get("/jobs/orders?part=runs").text
    bars = re.findall(r'<rect class="bar (ok|failed)"', runs)
    assert len(bars) == 11  # finished runs only: the running one has no duration yet
    assert bars.count("failed") == 1 and bars[-1] == "failed"
    assert "1 failed" in runs and 'id="recent-runs"' in runs

    chart = run_chart(
        [
            RunPoint(
                start_time=datetime(2026, 1, 1, 0, 0, n),
                seconds=s,
                success=ok,
                sharding_item=n,
                ip=IP_A,
                execution_source="NORMAL_TRIGGER",
            )
            for n, (s, ok) in enumerate(((1.0, True), (0.5, False), (0.0, True)))
        ],
        width=300,
        height=100,
    )
    assert [(b.x, round(b.height, 1), b.success) for b in chart.bars] == [
        (10.0, 100.0, True),
        (110.0, 50.0, False),
        (210.0, 1.5, True),  # a run too short to measure still shows
    ]
    assert (chart.max_seconds, chart.failures) == (1.0, 1)


def test_without_tracing_the_history_says_how_to_turn_it_on(memory: Registry) -> None:
    with console_on(memory, None) as console:
        client, _ = console.admin_client()
        for path in ("/history/executions", "/history/statuses", "/jobs/orders", "/jobs"):
            page = client.get(path)
            assert page.status_code == 200
            assert "start the console with <code>--tracing DB_URL</code>" in page.text


def test_servers_and_instances_pages(console: Console) -> None:
    client, _ = console.admin_client()
    servers = client.get("/servers").text
    assert f'data-server="{IP_A}"' in servers and f'data-instance="{B}"' in servers
    server = client.get(f"/servers/{IP_B}").text
    assert 'data-job="orders"' in server
    missing = client.get("/servers/10.9.9.9")
    assert missing.status_code == 404 and "no job has server" in missing.text
    assert client.get("/jobs/orderz").status_code == 404
    assert "did you mean &#39;orders&#39;?" in client.get("/jobs/orderz").text


# -- the command --------------------------------------------------------------------------------------


def test_the_command_refuses_to_start_without_an_admin_account() -> None:
    runner = CliRunner()
    env = {"SHARDCRON_CONSOLE_ADMIN": None, "SHARDCRON_CONSOLE_GUEST": None}
    result = runner.invoke(main, ["console", "--registry", "zk://127.0.0.1:1/x"], env=env)
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "error: console accounts: no admin account; pass --admin USER:PASSWORD "
        "or set SHARDCRON_CONSOLE_ADMIN"
    )
    result = runner.invoke(
        main, ["console", "--registry", "zk://127.0.0.1:1/x", "--admin", "root"], env=env
    )
    assert result.stderr.startswith("error: --admin: expected USER:PASSWORD")
    result = runner.invoke(
        main,
        ["console", "--registry", "zk://127.0.0.1:1/x", "--admin", "a:b", "--secret", "short"],
        env=env,
    )
    assert result.stderr.startswith("error: --secret: too short")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_the_command_serves_on_loopback_with_accounts_from_the_environment(
    zookeeper: ZooKeeperServer,
) -> None:
    namespace = unique_namespace("console")
    writer = ZooKeeperRegistry(zk_config(zookeeper, namespace))
    writer.start()
    seed(writer)
    port = free_port()
    env = {
        "SHARDCRON_CONSOLE_ADMIN": ":".join(ADMIN),
        "SHARDCRON_CONSOLE_GUEST": ":".join(GUEST),
        "PATH": "/usr/bin:/bin",
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "shardcron",
            "console",
            "--registry",
            f"zk://{zookeeper.connect_string}/{namespace}",
            "--port",
            str(port),
        ],
        env=env,
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"

        def up() -> bool:
            try:
                return httpx.get(f"{base}/login", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(up, timeout=20, what="the console command to serve")
        with httpx.Client(base_url=base) as client:
            log_in(client, *GUEST)
            assert 'data-job="orders"' in client.get("/jobs").text
        assert not listening_on_other_addresses(port)
    finally:
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=15)
        writer.close()
    assert f"shardcron console on http://127.0.0.1:{port}/ (namespace {namespace!r})" in err


def listening_on_other_addresses(port: int) -> bool:
    """True if something answers on ``port`` at a non-loopback address of this host."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the route
        address = probe.getsockname()[0]
    if address.startswith("127."):
        return False
    with socket.socket() as client:
        client.settimeout(1)
        return client.connect_ex((address, port)) == 0
