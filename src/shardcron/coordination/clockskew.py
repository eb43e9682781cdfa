"""The time-diff check (ElasticJob's ``maxTimeDiffSeconds``): this host's clock against
the registry's, measured once a minute by writing a node and reading its mtime, and again
at the first fire after a step of the wall clock (an NTP step, a VM resumed).

A fire whose host clock is off by more than the job allows is reported (a ``THROW``
error handler aborts it, as in Java): cron seconds mean nothing on a wrong clock.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from shardcron.errors import ClockSkewError
from shardcron.registry import Registry

REFRESH_SECONDS = 60.0


class ClockCheck:
    __slots__ = ("_checked_at", "_job", "_node", "_now", "_offset", "_registry")  # one per job

    def __init__(self, job: str, registry: Registry, node: str, now: Callable[[], float]) -> None:
        self._job, self._registry, self._node, self._now = job, registry, node, now
        self._offset = 0.0
        self._checked_at = -REFRESH_SECONDS

    def forget(self) -> None:
        """The wall clock stepped: the offset measured before means nothing now. Kept, it
        would hide the step for up to a minute (after a step back, a minute more than the
        step)."""
        self._checked_at = -math.inf

    def skew(self, limit: int) -> ClockSkewError | None:
        """The error when this host's clock is more than ``limit`` seconds off (-1: no
        check); None when it is within it."""
        if limit < 0:
            return None
        now = self._now()
        if now - self._checked_at > REFRESH_SECONDS:
            self._offset = self._registry.server_time(self._node) - now
            self._checked_at = now
        if abs(self._offset) <= limit:
            return None
        return ClockSkewError(
            f"job {self._job!r}: local clock differs from the registry's by "
            f"{self._offset:+.1f}s, more than maxTimeDiffSeconds={limit}; sync this host's "
            "clock (NTP) or raise maxTimeDiffSeconds"
        )
