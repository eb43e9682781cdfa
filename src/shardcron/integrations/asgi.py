"""A Starlette/FastAPI lifespan that runs a scheduler while the application serves.

::

    app = FastAPI(lifespan=lifespan(lambda: scheduler_from_file("jobs.yaml", shared=True)))

The scheduler is made inside the lifespan, so in each server process (a uvicorn or gunicorn
worker), never in a parent that forks afterwards. Requests see it as
``request.state.scheduler``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from shardcron.scheduler.process import Scheduler

CONNECT_TIMEOUT_SECONDS = 30.0


def lifespan(
    make: Callable[[], Scheduler],
    *,
    grace: float = 10.0,
    connect_timeout: float = CONNECT_TIMEOUT_SECONDS,
) -> Callable[[object], AbstractAsyncContextManager[dict[str, Scheduler]]]:
    """Start ``make()``'s scheduler on start-up, stop it on shutdown (``grace`` seconds for
    running items). A registry unreachable for ``connect_timeout`` fails the start-up."""

    @asynccontextmanager
    async def run(_app: object) -> AsyncIterator[dict[str, Scheduler]]:
        scheduler = make()
        # Both block on registry round trips; the event loop keeps serving meanwhile.
        await asyncio.to_thread(scheduler.start, connect_timeout)
        try:
            yield {"scheduler": scheduler}
        finally:
            await asyncio.to_thread(scheduler.stop, grace)

    return run
