"""A ``shardcron run`` worker's threads share two malloc arenas (glibc, this machine's C
library): the memory per job of a worker with a full pool depends on it."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.workers import CHILD_PYTHONPATH, ROOT

# Eight threads, all alive at once, each allocate blocks above pymalloc's limit; then
# glibc lists its arenas.
_PROBE = """
import ctypes, threading
from shardcron import arenas
print(arenas.cap(), flush=True)
kept, together = [], threading.Barrier(8)
def allocate():
    together.wait()
    kept.append([bytes(4096) for _ in range(64)])
    together.wait()
threads = [threading.Thread(target=allocate) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
ctypes.CDLL(None).malloc_stats()
"""


def _probe(**env: str) -> tuple[str, int]:
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env={**environ, "PYTHONPATH": CHILD_PYTHONPATH, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.strip(), done.stderr.count("Arena ")


def test_the_worker_caps_malloc_arenas_at_two() -> None:
    assert _probe() == ("True", 2)


def test_without_the_cap_each_thread_gets_its_own_arena() -> None:
    said, count = _probe(MALLOC_ARENA_MAX="16")
    assert said == "False"  # the operator's own setting wins
    assert count > 2
