"""A ZooKeeper outage seen from a console page that stays open (headless Chromium).

The test owns its ZooKeeper (the session-wide one is shared with other tests), runs one
worker with its own session, and opens the job list. Stopping ZooKeeper must turn the
banner on and every status to "unknown" within 2 seconds, without a reload; starting it
again must bring the page back to OK.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect, sync_playwright

from shardcron.config.job import JobConfig
from shardcron.console.app import create_app
from shardcron.model import ShardingContext
from shardcron.operations.admin import Admin
from shardcron.operations.jobstats import JobStatus
from shardcron.registry.zookeeper import ZooKeeperRegistry
from shardcron.scheduler.process import Scheduler
from shardcron.testing.zookeeper import ZooKeeperServer, unique_namespace, zookeeper_server
from tests.conftest import zk_config
from tests.helpers import wait_until
from tests.test_console import ADMIN, accounts, serving
from tests.test_console_e2e import CHROMIUM, CHROMIUM_ARGS, log_in, shoot

WORKER = "10.0.2.1@-@6201"
SESSION_MS = 30_000  # long enough for both sessions to outlive the outage
OUTAGE_MS = 2_000  # the promise: the page shows the outage within 2 s


def noop(ctx: ShardingContext) -> None:
    return None


@pytest.fixture
def own_zookeeper() -> Iterator[ZooKeeperServer]:
    with zookeeper_server() as server:
        yield server


def test_an_open_page_shows_the_outage_and_the_recovery(own_zookeeper: ZooKeeperServer) -> None:
    namespace = unique_namespace("outage")
    worker = Scheduler(
        ZooKeeperRegistry(zk_config(own_zookeeper, namespace, SESSION_MS)), instance_id=WORKER
    )
    worker.add_job(JobConfig(job_name="orders", cron="* * * * * ?", sharding_total_count=2), noop)
    console_registry = ZooKeeperRegistry(zk_config(own_zookeeper, namespace, SESSION_MS))
    console_registry.start()
    worker.start()
    try:
        with Admin(console_registry, cached=True) as admin:
            wait_until(
                lambda: admin.job("orders").status is JobStatus.OK, timeout=20, what="orders OK"
            )
            with serving(create_app(admin, accounts())) as base, sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=str(CHROMIUM), args=CHROMIUM_ARGS
                )
                try:
                    page = browser.new_context().new_page()
                    page.set_default_timeout(20_000)
                    log_in(page, base, *ADMIN)
                    watch_the_outage(page, own_zookeeper)
                finally:
                    browser.close()
    finally:
        worker.stop(grace=2)
        console_registry.close()


def watch_the_outage(page: Page, server: ZooKeeperServer) -> None:
    banner = page.locator("#registry-down")
    row = page.locator("#jobs-table tr[data-job=orders]")
    expect(row.locator(".job-status")).to_have_text("OK")
    expect(banner).to_be_hidden()
    page.evaluate("window.__loaded = true")  # gone if the page were reloaded

    server.stop()
    expect(banner).to_be_visible(timeout=OUTAGE_MS)
    expect(row.locator(".job-status")).to_have_text("UNKNOWN (registry down)", timeout=OUTAGE_MS)
    expect(row.locator(".next-fire")).to_have_text("unknown")
    assert page.evaluate("window.__loaded") is True  # the same page: no reload happened
    shoot(page, "outage")

    server.start()
    expect(banner).to_be_hidden()
    expect(row.locator(".job-status")).to_have_text("OK")
    assert page.evaluate("window.__loaded") is True
