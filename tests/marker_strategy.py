"""The security tests' canary: a module a registry value names, which no worker may import.

Importing it, or calling :func:`write_marker`, writes the file named by
``$SHARDCRON_TEST_MARKER``; the tests assert that file never appears.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from shardcron.model import ShardingContext


def _mark(what: str) -> None:
    path = os.environ.get("SHARDCRON_TEST_MARKER")
    if path:
        with Path(path).open("a", encoding="utf-8") as out:
            out.write(f"{what}\n")


_mark("imported")


def write_marker(instance_ids: Sequence[str], job_name: str, total: int) -> dict[str, list[int]]:
    _mark("strategy called")
    return {instance_id: list(range(total)) for instance_id in instance_ids}


def run_marker(ctx: ShardingContext) -> None:
    _mark("job code called")
