"""The package as users get it: version, sdist and wheel, a fresh install that runs.

The build runs ``python -m build`` on a copy of the project (so the checkout gets no
``build/`` or ``*.egg-info``); ``twine check`` validates what PyPI would render. The wheel
is then installed into a fresh virtualenv with ``pip install --no-index``: its
dependencies come from this test environment's site-packages, which a ``.pth`` file adds
*after* the new venv's own (the same effect as ``--system-site-packages``, which would
point at the base interpreter instead). So the test needs no network, yet pip still
checks the wheel's dependency metadata, and the code that runs is the wheel's: its
``shardcron`` command, imported from the new venv.
"""

from __future__ import annotations

import email
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

import shardcron
from shardcron.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
PROJECT_FILES = ["pyproject.toml", "README.md", "CHANGELOG.md", "LICENSE", "MANIFEST.in"]


def test_version_is_one_string_everywhere() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"shardcron, version {shardcron.__version__}\n"
    parts = shardcron.__version__.split(".")
    assert len(parts) == 3 and all(p.isdigit() for p in parts)
    assert f"## [{shardcron.__version__}]" in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")


def _run(args: list[str | Path], cwd: Path, timeout: float = 120) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = tmp_path_factory.mktemp("project")
    for name in PROJECT_FILES:
        shutil.copy(ROOT / name, project / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
    shutil.copytree(ROOT / "src", project / "src", ignore=ignore)
    _run([sys.executable, "-m", "build", "--outdir", "dist", "."], project, timeout=180)
    return project / "dist"


@pytest.mark.timeout(300)
def test_sdist_and_wheel_hold_the_package_and_pass_twine_check(dist: Path) -> None:
    version = shardcron.__version__
    sdist = dist / f"shardcron-{version}.tar.gz"
    wheel = dist / f"shardcron-{version}-py3-none-any.whl"
    assert sorted(p.name for p in dist.iterdir()) == sorted([sdist.name, wheel.name])
    _run([sys.executable, "-m", "twine", "check", "--strict", sdist, wheel], dist)

    with tarfile.open(sdist) as tar:
        in_sdist = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    for name in ["LICENSE", "CHANGELOG.md", "README.md", "src/shardcron/py.typed"]:
        assert name in in_sdist, f"{name} missing from the sdist"

    with zipfile.ZipFile(wheel) as whl:
        in_wheel = set(whl.namelist())
        meta = email.message_from_bytes(whl.read(f"shardcron-{version}.dist-info/METADATA"))
        entry_points = whl.read(f"shardcron-{version}.dist-info/entry_points.txt").decode()
    assert "shardcron/py.typed" in in_wheel
    assert "shardcron/console/templates/base.html" in in_wheel
    assert "shardcron/console/static/console.js" in in_wheel
    assert not any(name.startswith("tests/") for name in in_wheel)
    assert "shardcron = shardcron.cli:main" in entry_points
    assert meta["Version"] == version
    assert meta["License-Expression"] == "Apache-2.0"
    assert "Programming Language :: Python :: 3.11" in meta.get_all("Classifier", [])
    urls = " ".join(meta.get_all("Project-URL", []))
    assert "Documentation" in urls and "Changelog" in urls
    assert meta.get_content_type() == "text/plain"  # the README is the long description
    assert "Two commands" in (meta.get_payload() or "")


@pytest.mark.timeout(300)
def test_the_wheel_installs_into_a_fresh_venv_and_runs_the_demo(dist: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", venv], tmp_path)
    python = venv / "bin" / "python"
    site = Path(
        _run(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], tmp_path
        ).strip()
    )
    (site / "zz_test_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    wheel = next(dist.glob("*.whl"))
    _run([python, "-m", "pip", "install", "--no-index", "--no-cache-dir", "-q", wheel], tmp_path)

    where = _run([python, "-c", "import shardcron; print(shardcron.__file__)"], tmp_path)
    assert where.startswith(str(site)), f"shardcron imported from {where}, not the wheel"
    version = _run([venv / "bin" / "shardcron", "--version"], tmp_path)
    assert version == f"shardcron, version {shardcron.__version__}\n"

    out = _run([python, "-m", "shardcron", "demo", "--seconds", "4"], tmp_path)
    lines = out.splitlines()
    assert lines[0] == "3 instances share job 'demo' (6 items, every second); Ctrl-C to quit"
    fires = [line for line in lines if "0->" in line]
    assert fires, out
    assert all(f"{item}->" in fires[0] for item in range(6)), out
    assert lines[-1] == "demo finished"
