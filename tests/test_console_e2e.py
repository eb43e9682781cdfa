"""The console in a real browser (Debian's headless Chromium, driven by Playwright) against a
real ZooKeeper and two ``shardcron run`` worker processes that trace to a SQLite file the
console reads.

An operator logs in, sees the job table, triggers a job and finds its runs in the history,
disables an item and sees it skipped, edits the config with a bad value, SIGKILLs a worker
and watches the sharding table move its items without reloading the page, and removes a
job through the confirmation dialog; a guest sees everything and can do nothing.
Screenshots of the main pages go to ``artifacts/`` (git-ignored) for the README's reader.

Chromium must be installed (``apt-get install chromium``): without it these tests fail.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from playwright.sync_api import Browser, Page, expect, sync_playwright
from sqlalchemy.engine import Engine

from shardcron.console.app import create_app
from shardcron.operations.admin import Admin
from shardcron.registry.zookeeper import ZooKeeperRegistry
from shardcron.testing.zookeeper import ZooKeeperServer, unique_namespace
from shardcron.tracing.history import executions
from shardcron.tracing.sql import open_engine
from tests.conftest import zk_config
from tests.helpers import wait_until
from tests.test_console import ADMIN, GUEST, accounts, serving
from tests.workers import ROOT, Workers, registered, workers

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = ROOT / "artifacts"
A, B = "10.0.1.1@-@6101", "10.0.1.2@-@6102"
SESSION_MS = 2000
WAIT_MS = 20_000  # the longest a page may take to show a change (a session expiry and a fire)
JOBS: dict[str, dict[str, object]] = {
    "orders": {
        "callable": "tests.jobs:ledger",
        "cron": "* * * * * ?",
        "shardingTotalCount": 4,
        "shardingItemParameters": "0=north,1=south,2=east,3=west",
        "failover": True,
        "description": "settle orders",
    },
    "report": {"callable": "tests.jobs:ledger", "shardingTotalCount": 2},
}


@dataclass
class Stack:
    base: str
    workers: Workers
    engine: Engine
    browser: Browser


@pytest.fixture(scope="module")
def stack(zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    assert CHROMIUM.exists(), f"{CHROMIUM} is missing: apt-get install -y chromium"
    tmp = tmp_path_factory.mktemp("console-e2e")
    namespace = unique_namespace("console")
    trace_url = f"sqlite:///{tmp / 'trace.db'}"
    registry = ZooKeeperRegistry(zk_config(zookeeper, namespace))
    registry.start()
    engine = open_engine(trace_url)
    with workers(tmp, zookeeper.connect_string, namespace, JOBS, SESSION_MS) as running:
        # The same file as ``shardcron run --tracing URL``: the worker block of the config.
        running.config.write_text(yaml.safe_dump({"jobs": JOBS, "worker": {"tracing": trace_url}}))
        for instance in (A, B):
            running.start(instance)
        wait_until(
            lambda: all(registered(registry, j, i) for j in JOBS for i in (A, B)),
            timeout=30,
            what="both workers running both jobs",
        )
        with (
            Admin(registry, cached=True) as admin,
            serving(create_app(admin, accounts(), tracing=engine)) as base,
            sync_playwright() as playwright,
        ):
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                yield Stack(base, running, engine, browser)
            finally:
                browser.close()
    engine.dispose()
    registry.close()


def new_page(stack: Stack) -> Page:
    page = stack.browser.new_context(viewport={"width": 1360, "height": 900}).new_page()
    page.set_default_timeout(WAIT_MS)
    return page


def log_in(page: Page, base: str, user: str, password: str) -> None:
    page.goto(f"{base}/jobs")
    expect(page).to_have_url(re.compile(r"/login\?next=%2Fjobs$"))
    page.fill("input[name=user]", user)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{base}/jobs")


def shoot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"console-{name}.png"), full_page=True)


def runs_since(engine: Engine, moment: datetime) -> list[tuple[int, datetime]]:
    """(item, start) of every finished run of orders that started after ``moment``."""
    page = executions(engine, job="orders", since=moment, limit=1000)
    return [(r.sharding_item, r.start_time) for r in page.rows if r.completed]


def test_an_operator_steers_the_cluster_from_the_browser(stack: Stack) -> None:
    page = new_page(stack)
    base = stack.base
    page.goto(f"{base}/login")
    shoot(page, "login")
    log_in(page, base, *ADMIN)

    # The job table: both jobs; orders becomes OK once its first fire has sharded it.
    orders_row = page.locator('#jobs-table tr[data-job="orders"]')
    expect(orders_row.locator(".job-status")).to_have_text("OK")
    expect(orders_row).to_contain_text("* * * * * ?")
    expect(page.locator('#jobs-table tr[data-job="report"]')).to_contain_text("one-off")
    expect(orders_row.locator("td.instances")).to_have_text("2")

    # Trigger the one-off job and find its two item runs in the execution history.
    page.locator('#jobs-table tr[data-job="report"]').get_by_role("button", name="Trigger").click()
    expect(page.locator(".flash-ok")).to_have_text(
        "Triggered job 'report' (2 registry nodes changed)."
    )
    shoot(page, "jobs")
    page.goto(f"{base}/history/executions?job=report")
    # The history section refreshes itself: no reload needed while the runs are written.
    expect(page.locator('#executions-table tr[data-job="report"]')).to_have_count(2)
    expect(page.locator("#executions-table")).to_contain_text("NORMAL_TRIGGER")
    page.goto(f"{base}/history/executions")
    shoot(page, "executions")
    page.goto(f"{base}/history/statuses?job=report")
    expect(page.locator('#statuses-table tr[data-state="TASK_FINISHED"]')).to_have_count(2)
    shoot(page, "statuses")

    # Disable item 2 of orders: the table says DISABLED and later fires leave it out.
    page.goto(f"{base}/jobs/orders")
    sharding = page.locator("#sharding-table")
    expect(sharding.locator("tr[data-item]")).to_have_count(4)
    sharding.locator('tr[data-item="2"]').get_by_role("button", name="Disable item").click()
    expect(page.locator(".flash-ok")).to_contain_text("Disabled item 2 of job 'orders'")
    expect(sharding.locator('tr[data-item="2"] .item-status')).to_have_text("DISABLED")
    disabled_at = datetime.now()

    def second_fire() -> datetime | None:
        """The start of the second fire that began after the item was disabled."""
        starts = sorted(
            {t.replace(microsecond=0) for i, t in runs_since(stack.engine, disabled_at) if i == 0}
        )
        return starts[1] if len(starts) >= 2 else None

    later = wait_until(second_fire, timeout=15, what="two fires after disabling item 2")
    since = later.strftime("%Y-%m-%dT%H:%M:%S")
    page.goto(f"{base}/history/executions?job=orders&item=2&since={since}")
    expect(page.locator("#history .paging")).to_contain_text("No rows match")
    page.goto(f"{base}/history/executions?job=orders&since={since}&limit=200")
    expect(page.locator('#executions-table tr[data-item="0"]').first).to_be_visible()
    assert page.locator('#executions-table tr[data-item="2"]').count() == 0
    assert {i for i, _ in runs_since(stack.engine, later)} >= {0, 1, 3}

    # A bad config value is refused with a message naming the key; nothing is written.
    page.goto(f"{base}/jobs/orders")
    page.fill("#f-shardingTotalCount", "four")
    page.get_by_role("button", name="Save config").click()
    expect(page.locator("#config-error")).to_have_text(
        "job 'orders': shardingTotalCount: expected an integer, got 'four'"
    )
    expect(page.locator(".field.invalid #f-shardingTotalCount")).to_have_value("four")
    expect(page.locator("#config-yaml")).to_contain_text("shardingTotalCount: 4")
    shoot(page, "config-error")

    # SIGKILL worker B: the sharding table moves B's items to A, live, without a reload.
    page.goto(f"{base}/jobs/orders")
    expect(sharding.locator(f'tr[data-instance="{B}"]').first).to_be_visible()
    expect(page.locator("#runs-chart rect.bar").first).to_be_visible()
    shoot(page, "job")
    page.evaluate("window.sameDocument = true")
    stack.workers.workers[B].kill(signal.SIGKILL)
    expect(sharding.locator(f'tr[data-instance="{B}"]')).to_have_count(0)
    expect(sharding.locator(f'tr[data-instance="{A}"]')).to_have_count(4)
    expect(page.locator("#instances-table tr[data-instance]")).to_have_count(1)
    expect(sharding.locator('tr[data-item="2"] .item-status')).to_have_text("DISABLED")
    assert page.evaluate("window.sameDocument") is True  # the page was never reloaded
    shoot(page, "job-after-kill")
    page.goto(f"{base}/servers")
    expect(page.locator("#instances-table tr[data-instance]")).to_have_count(1)
    shoot(page, "servers")

    # Removing a job asks first: dismissed, nothing happens; accepted, the job is gone.
    page.goto(f"{base}/jobs/report")
    remove = page.get_by_role("button", name="Remove job")
    page.once("dialog", lambda dialog: dialog.dismiss())
    remove.click()
    expect(page).to_have_url(f"{base}/jobs/report")
    assert stack.workers.workers[A].alive()
    page.once("dialog", lambda dialog: dialog.accept())
    remove.click()
    expect(page).to_have_url(f"{base}/jobs")
    expect(page.locator(".flash-ok")).to_contain_text("Removed job 'report'")
    expect(page.locator('#jobs-table tr[data-job="report"]')).to_have_count(0)


def test_a_guest_sees_the_cluster_but_cannot_act(stack: Stack) -> None:
    page = new_page(stack)
    base = stack.base
    log_in(page, base, *GUEST)
    expect(page.locator('#jobs-table tr[data-job="orders"]')).to_be_visible()
    page.goto(f"{base}/jobs/orders")
    expect(page.locator("#sharding-table tr[data-item]")).to_have_count(4)
    # No button but "Log out", no config form, and the live refresh still works for a guest.
    expect(page.locator("main button")).to_have_count(0)
    expect(page.locator("#config-form")).to_have_count(0)
    expect(page.locator("#state")).to_have_attribute("data-updated", re.compile(r"\d+"))
    shoot(page, "guest")

    # Even a hand-made request with the guest's own valid token is refused by the server.
    token = page.locator('header form[action="/logout"] input[name=csrf]').get_attribute("value")
    assert token
    answer = page.request.post(
        f"{base}/jobs/orders/trigger", form={"csrf": token}, headers={"Origin": base}
    )
    assert answer.status == 403
    assert "guest role" in answer.text()
