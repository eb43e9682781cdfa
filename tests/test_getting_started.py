"""The "Getting started" walk-through works as written: two workers share a job on ZooKeeper.

The job module and the config file are taken from ``docs/getting-started.md`` itself (the
blocks headed ``# myapp/jobs.py`` and ``# jobs.yaml``); the test only points the config at
the suite's ZooKeeper, on a fresh namespace, and makes the cron fire every second instead
of every five so the test is short. The workers are started with the page's command lines.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from shardcron.config.registry import RegistryConfig
from shardcron.errors import JobNotFoundError
from shardcron.operations.admin import Admin
from shardcron.registry.zookeeper import ZooKeeperRegistry
from shardcron.testing.zookeeper import ZooKeeperServer, unique_namespace
from tests.helpers import wait_until

pytestmark = pytest.mark.zookeeper

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "getting-started.md"


def _block(header: str) -> str:
    text = PAGE.read_text(encoding="utf-8")
    match = re.search(rf"^```\w+\n({re.escape(header)}\n.*?)^```", text, re.MULTILINE | re.DOTALL)
    assert match, f"{PAGE.name} has no block starting with {header!r}"
    return match.group(1)


def _command(prefix: str) -> list[str]:
    """The page's command line starting with ``prefix``, without its comment."""
    text = PAGE.read_text(encoding="utf-8")
    match = re.search(rf"^{re.escape(prefix)}[^#\n]*", text, re.MULTILINE)
    assert match, f"{PAGE.name} has no command starting with {prefix!r}"
    return match.group(0).split()


@pytest.fixture
def project(tmp_path: Path, zookeeper: ZooKeeperServer) -> tuple[Path, str]:
    namespace = unique_namespace("gs")
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "jobs.py").write_text(_block("# myapp/jobs.py"))
    config = _block("# jobs.yaml")
    for old, new in [
        ("servers: 127.0.0.1:2181", f"servers: {zookeeper.connect_string}"),
        ("namespace: my-app", f"namespace: {namespace}"),
        ('cron: "0/5 * * * * ?"', 'cron: "* * * * * ?"'),
    ]:
        assert old in config
        config = config.replace(old, new)
    (tmp_path / "jobs.yaml").write_text(config)
    return tmp_path, namespace


@pytest.fixture
def admin(zookeeper: ZooKeeperServer, project: tuple[Path, str]) -> Iterator[Admin]:
    registry = ZooKeeperRegistry(
        RegistryConfig(servers=zookeeper.connect_string, namespace=project[1])
    )
    registry.start(timeout=10)
    try:
        yield Admin(registry)
    finally:
        registry.close()


def _owners(admin: Admin) -> dict[int, str | None]:
    try:
        return {item.item: item.instance_id for item in admin.sharding("orders")}
    except JobNotFoundError:  # not registered yet
        return {}


def _split(admin: Admin, names: set[str]) -> dict[int, str | None] | None:
    """The owners of items 0-2 once every item has one and each worker owns some."""
    owners = _owners(admin)
    ran_by = {owner.rsplit("@-@", 1)[1] for owner in owners.values() if owner}
    return owners if sorted(owners) == [0, 1, 2] and ran_by == names else None


def _ran(out: Path, items: list[int]) -> bool:
    """The worker printed a run of each of ``items`` (the page's job prints one line each)."""
    text = out.read_text()
    return all(f"item {item}: orders of" in text for item in items)


def _alive(workers: dict[str, tuple[subprocess.Popen[bytes], Path]]) -> bool:
    for name, (proc, out) in workers.items():
        assert proc.poll() is None, f"{name} exited:\n{out.read_text()}"
    return True


def test_two_workers_share_the_first_job(
    project: tuple[Path, str], admin: Admin, zookeeper: ZooKeeperServer
) -> None:
    workdir, namespace = project
    # The checkout's code, whatever the working directory; unbuffered, so prints show at once.
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "PYTHONUNBUFFERED": "1"}
    workers: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    for name in ("worker1", "worker2"):
        args = _command(f"shardcron run jobs.yaml --instance-id 127.0.0.1@-@{name}")
        out = workdir / f"{name}.out"
        with out.open("wb") as sink:
            proc = subprocess.Popen(
                [sys.executable, "-m", "shardcron", *args[1:]],
                cwd=workdir,
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        workers[name] = (proc, out)
    try:
        split = wait_until(
            lambda: _split(admin, set(workers)) if _alive(workers) else None,
            timeout=60,
            what="the 3 items to be split over both workers",
        )
        for name, (_, out) in workers.items():
            mine = sorted(item for item, owner in split.items() if owner and owner.endswith(name))
            wait_until(
                functools.partial(_ran, out, mine),
                timeout=30,
                what=f"{name} to run its items {mine}",
            )

        status = subprocess.run(
            [sys.executable, "-m", "shardcron", *_command("shardcron status orders")[1:]],
            cwd=workdir,
            env={**env, "SHARDCRON_REGISTRY": f"zk://{zookeeper.connect_string}/{namespace}"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert status.returncode == 0, status.stderr
        assert "127.0.0.1@-@worker1" in status.stdout and "127.0.0.1@-@worker2" in status.stdout

        # The page: stop a worker and its items move to the survivor.
        proc, _ = workers.pop("worker1")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        wait_until(
            lambda: set(_owners(admin).values()) == {"127.0.0.1@-@worker2"},
            timeout=60,
            what="worker2 to own every item",
        )
        survivor = workers["worker2"][1]
        wait_until(
            functools.partial(_ran, survivor, [0, 1, 2]),
            timeout=30,
            what="worker2 to run every item",
        )
    finally:
        for proc, _ in workers.values():
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
