"""What an operator relies on beyond the basic pages: the registry state in every live part,
the last run of each job, times with their zone, and the selects of the config form."""

from __future__ import annotations

import platform
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from shardcron.config.job import JobConfig
from shardcron.coordination.paths import JobPaths
from shardcron.model import ShardingContext
from shardcron.registry import Registry
from shardcron.registry.memory import MemoryRegistry
from shardcron.registry.memoryserver import MemoryServer
from shardcron.scheduler.process import Scheduler
from shardcron.testing.zookeeper import unique_namespace
from tests.helpers import wait_until
from tests.test_console import Console, console_on, seed, trace


@pytest.fixture
def server() -> MemoryServer:
    return MemoryServer()


@pytest.fixture
def registry(server: MemoryServer) -> Iterator[Registry]:
    made = MemoryRegistry(server, namespace=unique_namespace("ops"))
    made.start()
    seed(made)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def console(registry: Registry, tmp_path: Path) -> Iterator[Console]:
    url = f"sqlite:///{tmp_path / 'trace.db'}"
    trace(url)
    with console_on(registry, url) as made:
        yield made


def cell(page: str, job: str, name: str) -> str:
    row = re.search(rf'<tr data-job="{job}">(.*?)</tr>', page, re.DOTALL)
    assert row, f"no row for {job}"
    found = re.search(rf'<td class="{name}">(.*?)</td>', row.group(1), re.DOTALL)
    assert found, f"no {name} cell"
    return re.sub(r"<[^>]+>", "", found.group(1)).strip()


def test_every_live_part_says_whether_the_registry_is_reachable(
    console: Console, server: MemoryServer
) -> None:
    client, _ = console.admin_client()
    part = client.get("/jobs?part=table")
    assert part.headers["x-registry"] == "connected"
    assert cell(part.text, "orders", "job-status") == "OK"
    assert cell(part.text, "orders", "next-fire") != "unknown"

    server.set_up(False)
    part = client.get("/jobs?part=table")
    assert part.headers["x-registry"] == "down"
    assert cell(part.text, "orders", "job-status") == "UNKNOWN (registry down)"
    assert cell(part.text, "orders", "next-fire") == "unknown"
    state = client.get("/jobs/orders?part=state")
    assert state.headers["x-registry"] == "down"
    assert "OK" not in re.sub(r"<[^>]+>", "", state.text.split("<h2>")[0])
    page = client.get("/jobs")
    assert re.search(r'id="registry-down" class="banner error" role="alert">', page.text)

    server.set_up(True)
    wait_until(
        lambda: client.get("/jobs?part=table").headers["x-registry"] == "connected",
        timeout=5,
        what="the console to see the registry back",
    )
    page = client.get("/jobs")
    assert 'id="registry-down" class="banner error" role="alert" hidden>' in page.text


def test_the_jobs_table_shows_the_last_run_outcome_and_success(console: Console) -> None:
    client, _ = console.admin_client()
    page = client.get("/jobs?part=table").text
    # The last fire's last item failed; the one before it succeeded.
    assert cell(page, "orders", "last-outcome") == "failure"
    zone = r"[A-Z][A-Za-z0-9+-]*"
    assert re.fullmatch(
        rf"\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d {zone}", cell(page, "orders", "last-run")
    )
    assert re.fullmatch(
        rf"\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d {zone}", cell(page, "orders", "last-success")
    )
    assert cell(page, "report", "last-run") == "-"  # never traced
    # Every time on the page carries its zone, the next fire too.
    assert re.fullmatch(
        rf"\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d {zone}", cell(page, "orders", "next-fire")
    )


def test_enum_settings_are_selects(console: Console) -> None:
    client, _ = console.admin_client()
    page = client.get("/jobs/orders").text
    strategy = re.search(r'<select id="f-jobShardingStrategyType".*?</select>', page, re.DOTALL)
    assert strategy, "the strategy is not a select"
    options = re.findall(r'<option value="([^"]*)"', strategy.group(0))
    assert options == [
        "",
        "AVG_ALLOCATION",
        "ODEVITY",
        "ROUND_ROBIN",
        "SINGLE_SHARDING_BALANCE",
        "RENDEZVOUS",
    ]
    assert "selected>default (AVG_ALLOCATION)" in strategy.group(0)
    for key, expected in (
        ("jobErrorHandlerType", "LOG"),
        ("jobExecutorServiceHandlerType", "CPU"),
    ):
        select = re.search(rf'<select id="f-{key}".*?</select>', page, re.DOTALL)
        assert select and f"default ({expected})" in select.group(0)


def test_a_custom_strategy_stays_selected_in_the_form(console: Console, registry: Registry) -> None:
    orders = JobPaths("orders")
    config = JobConfig.from_yaml((registry.get(orders.config) or b"").decode())
    custom = config.with_changes(job_sharding_strategy_type="myapp.sharding:by_region")
    registry.put(orders.config, custom.to_yaml().encode())
    client, _ = console.admin_client()
    wait_until(
        lambda: "myapp.sharding:by_region" in client.get("/jobs/orders").text,
        timeout=5,
        what="the console to see the new config",
    )
    page = client.get("/jobs/orders").text
    assert '<option value="myapp.sharding:by_region" selected>' in page


# -- the worker page -------------------------------------------------------------------------------

WORKER = "10.0.3.1@-@6301"
release = threading.Event()


def held(ctx: ShardingContext) -> None:
    release.wait(30)


def test_the_worker_page_shows_host_version_uptime_jobs_and_pool_use(
    console: Console, server: MemoryServer, registry: Registry
) -> None:
    release.clear()
    worker = Scheduler(
        MemoryRegistry(server, registry.namespace), instance_id=WORKER, max_workers=8
    )
    worker.add_job(JobConfig(job_name="tick", cron="* * * * * ?", sharding_total_count=1), held)
    worker.start()
    client, _ = console.admin_client()
    try:
        wait_until(
            lambda: "1 of 8 threads" in client.get(f"/workers/{WORKER}?part=card").text,
            timeout=20,
            what="the card to show the held item",
        )
        page = client.get(f"/workers/{WORKER}").text
        assert f"{socket.gethostname()} · " in page and "pid " in page
        assert f"Python {platform.python_version()}" in page and "shardcron " in page
        assert re.search(r'class="uptime">\d+m \d+s<', page)
        assert re.search(r'class="started">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [A-Z]', page)
        assert re.search(r'<tr data-job="tick">.*?class="items">0<', page, re.DOTALL)
        servers = client.get("/servers").text
        assert f'href="/workers/{WORKER.replace("@", "%40")}"' in servers
    finally:
        release.set()
        worker.stop(grace=5)
    wait_until(
        lambda: client.get(f"/workers/{WORKER}").status_code == 404,
        timeout=10,
        what="the page to go once the worker stopped",
    )
