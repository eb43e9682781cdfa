"""What an item run executes: the user's callable for each job type.

A runner takes a :class:`ShardingContext` and returns when the item is done; an
exception fails that item only.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from shardcron.config import JobConfig, JobType, resolve_callable
from shardcron.errors import ConfigError
from shardcron.model import ShardingContext

ItemRunner = Callable[[ShardingContext], None]


class AsyncLoop:
    """One event loop thread per scheduler, shared by every coroutine job."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def run(self, coro: Coroutine[Any, Any, object]) -> object:
        return asyncio.run_coroutine_threadsafe(coro, self._get()).result()

    def _get(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(
                    target=loop.run_forever, name="shardcron-asyncio", daemon=True
                ).start()
                self._loop = loop
            return self._loop

    def stop(self) -> None:
        with self._lock:
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._loop = None


def make_runner(config: JobConfig, target: object | None, loop: AsyncLoop) -> ItemRunner:
    """Build the runner of ``config``; ``target`` is the callable given in code, if any."""
    if config.type is JobType.SIMPLE:
        fn = target if target is not None else resolve_callable(config.callable or "")
        return _simple(fn, loop)
    raise ConfigError("type", f"{config.type} jobs are not supported yet; use SIMPLE")


def _simple(fn: object, loop: AsyncLoop) -> ItemRunner:
    if not callable(fn):
        raise ConfigError("callable", f"{fn!r} is not callable; give a function taking a context")
    if inspect.iscoroutinefunction(fn):

        def run_async(ctx: ShardingContext) -> None:
            loop.run(fn(ctx))

        return run_async

    def run(ctx: ShardingContext) -> None:
        fn(ctx)

    return run
