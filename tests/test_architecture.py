"""The tree is the architecture: the layers import one way, and no module imports itself
back through others.

Every import counts, including those under ``TYPE_CHECKING`` and inside functions: a type
that runs upward is a dependency all the same. The layers, lowest first; the subpackages
of one row are peers and may not import each other.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "shardcron"

LAYERS: list[tuple[str, ...]] = [
    ("errors", "_version", "_moved"),
    ("model",),
    ("schedule",),
    ("config",),
    ("registry",),
    ("coordination",),
    ("execution",),
    ("tracing",),
    ("observability",),
    ("scheduler",),
    ("operations", "testing"),
    ("console", "integrations", "simulation"),
    ("cli",),
    ("__init__", "__main__"),  # the public face: Scheduler and friends
]
RANK = {part: rank for rank, row in enumerate(LAYERS) for part in row}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) for every shardcron module ``path`` imports."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # ``from shardcron.coordination import sharding`` imports the submodule; a name
            # that is no submodule comes from the package's ``__init__``.
            names = [
                f"{node.module}.{alias.name}"
                if f"{node.module}.{alias.name}" in MODULES
                else node.module
                for alias in node.names
            ]
        else:
            continue
        for name in names:
            if name in MODULES:
                yield node.lineno, name


def part(module: str) -> str:
    """The layer part a module belongs to: its subpackage, or a top-level module's name."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    return parts[1]


GRAPH = {m: sorted({dep for _, dep in imports(p) if dep != m}) for m, p in MODULES.items()}


def test_every_part_of_the_package_has_a_layer() -> None:
    assert sorted({part(m) for m in MODULES} - set(RANK)) == []


def test_no_layer_imports_a_layer_above_it_or_a_peer() -> None:
    wrong = []
    for module, path in MODULES.items():
        for line, dep in imports(path):
            mine, theirs = part(module), part(dep)
            if mine != theirs and RANK[theirs] >= RANK[mine] and theirs != "__init__":
                wrong.append(f"{path.relative_to(PACKAGE)}:{line} imports {dep}")
            if theirs == "__init__" and dep == "shardcron" and mine != "__init__":
                wrong.append(f"{path.relative_to(PACKAGE)}:{line} imports the package root")
    assert wrong == []


def test_no_import_cycles() -> None:
    cycles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for dep in GRAPH[module]:
            if state.get(dep) == 1:
                cycles.append(" -> ".join([*stack[stack.index(dep) :], dep]))
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[module] = 2

    for module in sorted(GRAPH):
        if module not in state:
            visit(module)
    assert cycles == []


def test_the_checks_see_an_upward_import_and_a_cycle(tmp_path: Path) -> None:
    # The walk must not pass by construction: a config module importing the scheduler
    # is found, as is a two-module cycle.
    source = "from shardcron.scheduler.process import Scheduler\n"
    fake = tmp_path / "shardcron" / "config" / "bad.py"
    fake.parent.mkdir(parents=True)
    fake.write_text(source, encoding="utf-8")
    found = list(imports(fake))
    assert found == [(1, "shardcron.scheduler.process")]
    assert RANK[part("shardcron.scheduler.process")] > RANK[part("shardcron.config.bad")]


def test_old_module_paths_still_import_the_moved_modules_with_a_warning() -> None:
    import importlib
    import sys
    import warnings

    from shardcron import _moved

    for old, new in _moved.MOVED.items():
        sys.modules.pop(f"shardcron.{old}", None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module = importlib.import_module(f"shardcron.{old}")
        assert module is importlib.import_module(f"shardcron.{new}")
        assert [str(w.message) for w in caught if w.category is DeprecationWarning] == [
            f"shardcron.{old} has moved to shardcron.{new}; import it from there"
        ]
