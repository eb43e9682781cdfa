"""Fewer malloc arenas in a ``shardcron run`` worker.

glibc gives each thread that allocates its own arena, up to eight per core, and keeps
what an arena once held. A worker's pool runs job code on up to 32 threads, so its
resident memory grew by an arena's pages for every thread the pool started: with all 32
started, a worker of 100 every-second jobs read 3-4 KiB more per job than capped. The
allocations that matter here are made under the GIL, so threads sharing two arenas do
not wait on each other for long; this is the usual ``MALLOC_ARENA_MAX=2`` of Python
services, applied by the worker itself.

Only the ``shardcron run`` command does this, before it starts any thread: a process that
embeds a :class:`shardcron.scheduler.Scheduler` keeps its own allocator settings, and so
does a worker started with ``MALLOC_ARENA_MAX`` set.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Mapping

log = logging.getLogger(__name__)

ARENAS = 2
_M_ARENA_MAX = -8  # glibc's malloc.h


def cap(environ: Mapping[str, str] = os.environ) -> bool:
    """Limit this process to :data:`ARENAS` malloc arenas; True when it did. Does nothing
    where the C library has no ``mallopt`` (not glibc) or ``MALLOC_ARENA_MAX`` is set."""
    if "MALLOC_ARENA_MAX" in environ:
        return False
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        return False
    done = bool(mallopt(_M_ARENA_MAX, ARENAS))
    log.debug("malloc arenas capped at %d: %s", ARENAS, done)
    return done
