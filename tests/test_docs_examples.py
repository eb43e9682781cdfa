"""The code examples of the docs and the README run as written.

Every ```python block of ``README.md`` and ``docs/**/*.md`` is executed (as a module not
named ``__main__``, so ``run_forever()`` guards do not block) in a scratch directory, on
the embedded registry. An HTML comment on the line above a block changes that:

* ``<!-- docs-test: zookeeper -->``: its ``zk://HOST:PORT/NAMESPACE`` URLs are pointed at
  the suite's ZooKeeper (on a fresh namespace);
* ``<!-- docs-test: skip (why) -->``: a fragment that cannot run alone; the reason is
  required.

A ``Scheduler`` the example leaves behind is started and stopped, so its jobs are
validated by the real start-up path. Every ``jobs:`` mapping of a ```yaml block is loaded
as a config file (keys and types checked; callables are not imported).
"""

from __future__ import annotations

import io
import json
import re
import tokenize
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest
import yaml

from shardcron.cli.main import main as cli_main
from shardcron.config.file import _WORKER_KEYS, load_config_file
from shardcron.config.job import _FILE_KEYS
from shardcron.config.registry import _REGISTRY_KEYS
from shardcron.observability.metrics import Metrics
from shardcron.operations.admin import Admin
from shardcron.registry.memory import MemoryRegistry
from shardcron.registry.zookeeper import ZooKeeperRegistry
from shardcron.scheduler.process import Scheduler
from shardcron.testing.zookeeper import ZooKeeperServer
from shardcron.tracing import Tracer, open_tracer

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
MARKER = re.compile(r"<!--\s*docs-test:\s*(\w+)\s*(.*?)\s*-->\s*$")
ZK_URL = re.compile(r"zk://[^/\"'\s]+/([\w.-]+)")
MODES = ("run", "zookeeper", "skip")

T = TypeVar("T")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    code: str
    mode: str
    reason: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks() -> Iterator[Block]:
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            marker = MARKER.search(before)
            mode, reason = (marker.group(1), marker.group(2)) if marker else ("run", "")
            yield Block(page, line, match.group(1), match.group(2), mode, reason)


PYTHON = [b for b in blocks() if b.lang == "python" and b.mode != "skip"]


def test_every_marker_is_known_and_every_skip_says_why() -> None:
    bad = [
        f"{b.where}: {b.mode!r} {b.reason!r}"
        for b in blocks()
        if b.mode not in MODES or (b.mode == "skip" and not b.reason.strip("() "))
    ]
    assert not bad, f"use docs-test: run|zookeeper|skip (why): {bad}"


def test_the_docs_have_runnable_examples() -> None:
    # A regex gone wrong would silently collect nothing and pass.
    assert len(PYTHON) >= 10
    assert {b.mode for b in PYTHON} == {"run", "zookeeper"}


@pytest.mark.parametrize(
    "block",
    [
        pytest.param(b, id=b.where, marks=[pytest.mark.zookeeper] if b.mode == "zookeeper" else [])
        for b in PYTHON
    ],
)
def test_python_example_runs(
    block: Block, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = block.code
    if block.mode == "zookeeper":
        server: ZooKeeperServer = request.getfixturevalue("zookeeper")
        suffix = uuid.uuid4().hex[:8]
        code = ZK_URL.sub(lambda m: f"zk://{server.connect_string}/{m.group(1)}-{suffix}", code)
    else:
        used = [text for text in _strings(code) if "zk://" in text]
        assert not used, f"{block.where} uses ZooKeeper {used}: mark it docs-test: zookeeper"
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "docs_example"}
    try:
        exec(compile(code, block.where, "exec"), namespace)  # noqa: S102 (running it is the test)
        for scheduler in _of_type(namespace, Scheduler):
            scheduler.start(connect_timeout=15)
            try:
                assert not scheduler.failed, f"{block.where}: jobs failed to start"
            finally:
                scheduler.stop(grace=1)
    finally:
        for tracer in _of_type(namespace, Tracer):
            tracer.close(timeout=5)
        for admin in _of_type(namespace, Admin):
            admin.close()
        for registry in _of_type(namespace, ZooKeeperRegistry):
            registry.close()


def _strings(code: str) -> list[str]:
    """The string literals of ``code`` (a URL in a comment is not used)."""
    tokens = tokenize.generate_tokens(io.StringIO(code).readline)
    return [tok.string for tok in tokens if tok.type == tokenize.STRING]


def _of_type(namespace: dict[str, object], kind: type[T]) -> list[T]:
    return [value for value in namespace.values() if isinstance(value, kind)]


def _config_file(code: str) -> bool:
    try:
        data = yaml.safe_load(code)
    except yaml.YAMLError:
        return False
    return isinstance(data, dict) and isinstance(data.get("jobs"), dict)


CONFIGS = [b for b in blocks() if b.lang == "yaml" and b.mode != "skip" and _config_file(b.code)]


def test_the_docs_have_config_examples() -> None:
    assert len(CONFIGS) >= 8


@pytest.mark.parametrize("block", CONFIGS, ids=lambda b: b.where)
def test_yaml_config_example_loads(block: Block, tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(block.code, encoding="utf-8")
    load_config_file(path, validate=False)  # raises a one-line ConfigError naming the key


def test_configuration_reference_names_every_key() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    keys = [*_FILE_KEYS, *_REGISTRY_KEYS, *_WORKER_KEYS]
    missing = [key for key in keys if f"`{key}`" not in page]
    assert not missing, f"docs/configuration.md does not document {missing}"


def test_cli_reference_names_every_command() -> None:
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^### `([\w-]+)", page, re.MULTILINE))
    documented |= set(re.findall(r"^### `[^\n]*`, `([\w-]+)", page, re.MULTILINE))
    missing = sorted(set(cli_main.commands) - documented)
    assert not missing, f"docs/cli.md has no section for {missing}"


def _metric_families() -> dict[str, str]:
    """Every metric family a worker can expose (name: type), as Metrics registers them."""
    tracer = open_tracer(None)
    try:
        metrics = Metrics(MemoryRegistry(namespace="docs"), tracer)
        return {f.name: f.type for f in metrics.prometheus.collect()}
    finally:
        tracer.close(timeout=5)


def _metric_series() -> set[str]:
    """Every series name a worker can expose."""
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"], "gauge": [""]}
    return {name + suffix for name, kind in _metric_families().items() for suffix in suffixes[kind]}


def test_alert_rules_and_dashboard_use_real_metrics() -> None:
    assets = ROOT / "docs" / "assets"
    rules = yaml.safe_load((assets / "shardcron-alerts.yml").read_text(encoding="utf-8"))
    exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    dashboard = json.loads((assets / "shardcron-grafana-dashboard.json").read_text("utf-8"))
    exprs += [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = {name for expr in exprs for name in re.findall(r"\bshardcron_\w+", expr)}
    assert len(used) >= 10
    unknown = sorted(used - _metric_series())
    assert not unknown, f"no such metric: {unknown}"


def test_readme_is_a_landing_page_whose_links_resolve() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if "://" not in t]
    assert "docs/guarantees.md" in local and "docs/getting-started.md" in local
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README.md links to missing files {missing}"
