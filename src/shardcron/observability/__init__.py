"""What a worker shows of itself: Prometheus metrics, its card for the console, the dump.

May import: everything below it, up to :mod:`shardcron.execution` and
:mod:`shardcron.tracing`.
"""

from __future__ import annotations

from shardcron.observability.dump import DumpServer, request_dump
from shardcron.observability.metrics import Metrics

__all__ = ["DumpServer", "Metrics", "request_dump"]
