"""Error handlers (``jobErrorHandlerType``): what happens when an item or a fire fails."""

from __future__ import annotations

from shardcron.config import JobConfig
from shardcron.runtime import ErrorHandler


def make_error_handler(config: JobConfig) -> ErrorHandler | None:
    """The handler ``config`` names; None means the default (LOG)."""
    return None
