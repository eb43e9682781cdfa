"""Operating jobs from outside: the lifecycle API (:mod:`.admin`) and the statistics it
reads from a namespace's znodes (:mod:`.jobstats`). The CLI and the console call these.

May import: everything below it, up to :mod:`shardcron.scheduler`.
"""

from __future__ import annotations

from shardcron.operations.admin import Admin, JobNotFoundError, JobStatus, ServerNotFoundError

__all__ = ["Admin", "JobNotFoundError", "JobStatus", "ServerNotFoundError"]
