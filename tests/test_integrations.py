"""The web-framework integrations, each run as users run the example apps: gunicorn with 3
workers (plain WSGI and Django), Django's management command, and FastAPI's lifespan."""

from __future__ import annotations

import importlib
import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from shardcron.errors import ConfigError
from shardcron.registry.zookeeper import ZooKeeperRegistry
from shardcron.scheduler.launch import scheduler_from_file
from shardcron.testing.zookeeper import ZooKeeperServer, unique_namespace
from tests.conftest import zk_config
from tests.helpers import wait_until
from tests.workers import CHILD_PYTHONPATH, ROOT

DJANGO_SITE = ROOT / "examples" / "django_site"
ITEMS = 6
PERIOD = 2  # seconds between fires; fires fall on even epoch seconds


def ledger_job(tmp_path: Path, cron: str = f"0/{PERIOD} * * * * ?") -> Path:
    config = tmp_path / "jobs.yaml"
    config.write_text(
        "jobs:\n"
        "  ledger:\n"
        "    callable: tests.jobs:ledger\n"
        f'    cron: "{cron}"\n'
        f"    shardingTotalCount: {ITEMS}\n"
    )
    return config


def records(ledger: Path) -> list[dict[str, Any]]:
    if not ledger.exists():
        return []
    lines = ledger.read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["phase"] == "start"]


@pytest.fixture
def namespace(zookeeper: ZooKeeperServer) -> Iterator[tuple[str, ZooKeeperRegistry]]:
    """A fresh namespace: its URL, and a session on it to look at the job's nodes."""
    name = unique_namespace()
    admin = ZooKeeperRegistry(zk_config(zookeeper, name))
    admin.start()
    try:
        yield f"zk://{zookeeper.connect_string}/{name}?sessionTimeoutMilliseconds=4000", admin
    finally:
        admin.close()


def child_env(tmp_path: Path, url: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": CHILD_PYTHONPATH,
        "SHARDCRON_REGISTRY": url,
        "SHARDCRON_CONFIG": str(ledger_job(tmp_path)),
        "SHARDCRON_LEDGER": str(tmp_path / "ledger.jsonl"),
        "SHARDCRON_INSTANCE": "",  # each worker process names itself IP@-@PID
    }


GUNICORN_APPS = {
    "wsgi": (ROOT, ["-c", "examples/gunicorn_conf.py", "examples.wsgi_app:app"]),
    "django": (DJANGO_SITE, ["-c", "gunicorn_conf.py", "mysite.wsgi"]),
}


@pytest.mark.parametrize("app", sorted(GUNICORN_APPS))
def test_gunicorn_with_3_workers_runs_every_item_of_every_fire_exactly_once(
    app: str, namespace: tuple[str, ZooKeeperRegistry], tmp_path: Path
) -> None:
    url, admin = namespace
    cwd, args = GUNICORN_APPS[app]
    log = tmp_path / "gunicorn.log"
    ledger = tmp_path / "ledger.jsonl"
    with log.open("wb") as out:
        master = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", *args, "-b", "127.0.0.1:0", "-w", "3"],
            cwd=cwd,
            env=child_env(tmp_path, url),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        port = wait_until(
            lambda: re.search(r"Listening at: http://127\.0\.0\.1:(\d+)", log.read_text()),
            timeout=60,
            what="gunicorn listening",
        ).group(1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as response:
            assert response.status == 200
        wait_until(
            lambda: len(admin.children("/ledger/instances")) == 3,
            timeout=60,
            what=f"3 worker instances:\n{log.read_text()}",
        )
        # Once each worker has run an item, the leader has sharded over all three.
        wait_until(lambda: len({r["instance"] for r in records(ledger)}) == 3, timeout=30)
        first = max(r["start"] for r in records(ledger)) // PERIOD + 1
        window = range(int(first), int(first) + 4)
        # A fire after the window has started: every fire in it has finished.
        wait_until(
            lambda: any(r["start"] // PERIOD > window[-1] for r in records(ledger)),
            timeout=30,
            what="four more fires",
        )
    finally:
        os.killpg(master.pid, signal.SIGTERM)
        master.wait(timeout=60)
    assert master.returncode == 0, log.read_text()
    fires: dict[int, Counter[int]] = {fire: Counter() for fire in window}
    owners: set[str] = set()
    for r in records(ledger):
        if int(r["start"] // PERIOD) in fires:
            fires[int(r["start"] // PERIOD)][r["item"]] += 1
            owners.add(r["instance"])
    assert all(items == Counter(range(ITEMS)) for items in fires.values()), fires
    assert len(owners) == 3  # the items are shared among the three workers
    # worker_exit stopped each scheduler: the sessions closed, not left to expire.
    assert admin.children("/ledger/instances") == []


def test_django_management_command_runs_a_dedicated_worker(
    namespace: tuple[str, ZooKeeperRegistry], tmp_path: Path
) -> None:
    url, _ = namespace
    ledger = tmp_path / "ledger.jsonl"
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "shardcron_run", "--grace", "5"],
        cwd=DJANGO_SITE,
        env=child_env(tmp_path, url),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: len(records(ledger)) >= ITEMS, timeout=60, what="a whole fire")
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert re.search(r"shardcron worker \S+@-@\d+: running ledger", err), err
    assert f"on {url.partition('?')[0]}" in err  # the registry, named in the start-up log


def test_fastapi_lifespan_runs_the_jobs_while_the_app_serves(
    namespace: tuple[str, ZooKeeperRegistry], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, admin = namespace
    for key, value in child_env(tmp_path, url).items():
        if key.startswith("SHARDCRON_"):
            monkeypatch.setenv(key, value)
    module = importlib.import_module("examples.fastapi_app")
    module = importlib.reload(module)  # it reads SHARDCRON_CONFIG when imported
    ledger = tmp_path / "ledger.jsonl"
    with TestClient(module.app) as client:
        body = client.get("/jobs").json()
        assert body["jobs"] == ["ledger"]
        assert admin.children("/ledger/instances") == [body["instance"]]
        wait_until(lambda: len(records(ledger)) >= ITEMS, timeout=30, what="a whole fire")
    assert admin.children("/ledger/instances") == []  # stopped on shutdown


def test_shared_start_refuses_the_embedded_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SHARDCRON_REGISTRY", raising=False)
    with pytest.raises(ConfigError) as caught:
        scheduler_from_file(ledger_job(tmp_path), shared=True)
    assert str(caught.value) == (
        "registry: the embedded registry is private to one process, so every worker would run "
        "every item; pass zk://HOST:PORT/NAMESPACE or set SHARDCRON_REGISTRY"
    )
