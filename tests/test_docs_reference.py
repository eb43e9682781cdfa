"""The reference pages name only what exists: modules and their attributes, CLI commands and
options, config keys and metrics. ``test_docs_examples`` runs the examples; this checks
the prose and the tables, where a renamed option or a moved module would otherwise linger.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import click

from shardcron import _moved
from shardcron.cli.main import main as cli_main
from shardcron.config import jobtypes
from shardcron.config.file import _WORKER_KEYS
from shardcron.config.job import _FILE_KEYS
from shardcron.config.registry import _REGISTRY_KEYS
from shardcron.tracing.log import LogSink
from tests.test_docs_examples import _metric_families, _metric_series

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
DOTTED = re.compile(r"\bshardcron(?:\.[A-Za-z_]\w*)+")


def _code(text: str) -> list[str]:
    """The code of a page: fenced blocks, inline spans and ``:::`` directives."""
    fenced = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    rest = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return fenced + re.findall(r"`([^`\n]+)`", rest) + re.findall(r"^::: (\S+)", rest, re.MULTILINE)


def _exists(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


# Dotted names that are not modules: the props keys shardcron adds, the trace logger.
NOT_MODULES = {
    value
    for value in vars(jobtypes).values()
    if isinstance(value, str) and value.startswith(jobtypes.PROP_PREFIX) and value[-1] != "."
} | {inspect.signature(LogSink).parameters["logger"].default}


def test_every_module_path_the_docs_name_exists_under_its_current_name() -> None:
    wrong = []
    for page in PAGES:
        for code in _code(page.read_text(encoding="utf-8")):
            for name in DOTTED.findall(code):
                old = name.split(".")[1]
                if old in _moved.MOVED:
                    wrong.append(f"{page.name}: {name} (moved to shardcron.{_moved.MOVED[old]})")
                elif name not in NOT_MODULES and not _exists(name):
                    wrong.append(f"{page.name}: {name}")
    assert wrong == []


def _options(command: click.Command) -> set[str]:
    return {opt for p in command.params for opt in [*p.opts, *p.secondary_opts]} | {"--help"}


GLOBAL = _options(cli_main) | {"-h"}


def test_every_option_of_a_command_line_in_the_docs_exists() -> None:
    wrong = []
    for page in PAGES:
        for code in _code(page.read_text(encoding="utf-8")):
            for line in code.splitlines():
                prompt = line.startswith("$ ")
                words = line.removeprefix("$ ").split()
                if len(words) < 2 or words[0] != "shardcron":
                    continue
                names = [w for w in words[1:] if not w.startswith("-")]
                command = cli_main.commands.get(names[0]) if names else None
                if command is None and not prompt:
                    continue  # a log line (``shardcron worker ...: running``), not a command
                if names and command is None and re.fullmatch(r"[a-z][a-z-]*", names[0]):
                    wrong.append(f"{page.name}: no command {names[0]!r} in {line.strip()!r}")
                known = GLOBAL | (_options(command) if command else set())
                for word in words[1:]:
                    option = word.split("=", 1)[0]
                    if re.fullmatch(r"--?[a-z][\w-]*", option) and option not in known:
                        wrong.append(f"{page.name}: {option} in {line.strip()!r}")
    assert wrong == []


def _sections(text: str) -> list[tuple[str, str]]:
    """(heading, body) of each ``###`` section (and of ``## Global options``)."""
    parts = re.split(r"^(##+ .*)$", text, flags=re.MULTILINE)
    return list(zip(parts[1::2], parts[2::2], strict=True))


def test_cli_reference_tables_list_only_options_their_command_has() -> None:
    page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    wrong, checked = [], 0
    for heading, body in _sections(page):
        named = [span.split()[0] for span in re.findall(r"`([^`]+)`", heading)]
        commands = [cli_main.commands[n] for n in named if n in cli_main.commands]
        if heading.startswith("## Global options"):
            known = GLOBAL
        elif commands:
            known = GLOBAL.union(*(_options(c) for c in commands))
        else:
            continue
        # Options in the section's own code spans: its table, and the prose about them.
        spans = re.findall(r"`([^`\n]+)`", heading + body)
        for span in spans:
            for option in re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", span):
                checked += 1
                if option not in known:
                    wrong.append(f"{heading.strip()}: {option}")
    assert checked >= 30
    assert wrong == []


def _table_rows(page: str, header: str) -> list[list[str]]:
    """The rows of the table whose header row starts with ``header``, as cells."""
    lines = page.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_configuration_tables_list_only_keys_that_exist() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    tables = {
        "| File key |": set(_FILE_KEYS),
        "| Key | Default | ElasticJob name |": set(_REGISTRY_KEYS),
        "| Key | Default | Option of `run` |": set(_WORKER_KEYS),
    }
    run_options = _options(cli_main.commands["run"])
    wrong = []
    for header, keys in tables.items():
        rows = _table_rows(page, header)
        assert len(rows) >= 5, header
        for row in rows:
            key = row[0].strip("`")
            if key not in keys:
                wrong.append(f"{header} {key}")
            if "Option of" in header and row[2]:
                wrong += [o for o in re.findall(r"--[\w-]+", row[2]) if o not in run_options]
    assert wrong == []


def test_every_metric_the_docs_name_exists_and_every_metric_is_documented() -> None:
    series, families = _metric_series(), set(_metric_families())
    modules = {path.stem for path in (ROOT / "src" / "shardcron").rglob("*.py")}
    named = {
        name
        for page in PAGES
        for name in re.findall(r"\bshardcron_[a-z_]+[a-z]", page.read_text(encoding="utf-8"))
        if name not in modules  # ``manage.py shardcron_run``, a command, not a metric
    }
    assert sorted(named - series - families) == []
    page = (ROOT / "docs" / "observability.md").read_text(encoding="utf-8")
    assert sorted(f for f in families if f not in page) == []
