"""Sample jobs and listeners for the job-type tests (importable by ``module:qualname``), and
:class:`Fleet`: in-process instances on one namespace, each with its own ZooKeeper
session, recording every event they emit.

Module-level state is shared by every instance of one test process; tests reset it first.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

from shardcron.config.job import JobConfig
from shardcron.coordination.events import Event, ItemFinished
from shardcron.coordination.paths import JobPaths
from shardcron.execution.lanes import ErrorHandler
from shardcron.model import FireContext, ShardingContext
from shardcron.registry import Registry
from shardcron.scheduler.process import Scheduler
from shardcron.testing.zookeeper import ZooKeeperServer
from tests.cluster import Cluster, Recorder
from tests.helpers import wait_until

# -- SIMPLE -------------------------------------------------------------------------------

RUNS: list[ShardingContext] = []
_lock = threading.Lock()


def record(ctx: ShardingContext) -> None:
    with _lock:
        RUNS.append(ctx)


def failing(ctx: ShardingContext) -> None:
    raise RuntimeError(f"boom on item {ctx.sharding_item}")


# -- coroutines ---------------------------------------------------------------------------


@dataclass
class Gates:
    """Per-item futures: ``waiter`` parks on one, ``opener`` resolves it from another job."""

    futures: dict[int, asyncio.Future[None]] = field(default_factory=dict)
    parked: dict[int, threading.Event] = field(default_factory=dict)
    threads: dict[int, str] = field(default_factory=dict)

    def reset(self, items: int) -> None:
        self.futures.clear()
        self.threads.clear()
        self.parked = {item: threading.Event() for item in range(items)}


GATES = Gates()


async def waiter(ctx: ShardingContext) -> None:
    item = ctx.sharding_item
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    GATES.futures[item] = future
    GATES.threads[item] = threading.current_thread().name
    GATES.parked[item].set()
    await future


async def opener(ctx: ShardingContext) -> None:
    future = GATES.futures[ctx.sharding_item]
    future.get_loop().call_soon_threadsafe(future.set_result, None)


# -- DATAFLOW -----------------------------------------------------------------------------


class Backlog:
    """A DATAFLOW source: each item drains its own queue, two records per fetch."""

    queues: ClassVar[dict[int, list[int]]] = {}
    batches: ClassVar[list[tuple[int, list[int]]]] = []

    @classmethod
    def reset(cls, queues: dict[int, list[int]]) -> None:
        with _lock:
            cls.queues = {item: list(records) for item, records in queues.items()}
            cls.batches = []

    def fetch_data(self, ctx: ShardingContext) -> list[int]:
        with _lock:
            queue = self.queues.get(ctx.sharding_item, [])
            batch, queue[:] = queue[:2], queue[2:]
            return batch

    def process_data(self, ctx: ShardingContext, data: list[int]) -> None:
        with _lock:
            self.batches.append((ctx.sharding_item, data))


class AsyncBacklog(Backlog):
    """The same source with coroutine methods."""

    async def fetch_data(self, ctx: ShardingContext) -> list[int]:  # type: ignore[override]
        await asyncio.sleep(0)
        return super().fetch_data(ctx)

    async def process_data(self, ctx: ShardingContext, data: list[int]) -> None:  # type: ignore[override]
        await asyncio.sleep(0)
        super().process_data(ctx, data)


# -- listeners ----------------------------------------------------------------------------

CALLS: list[tuple[str, str, tuple[int, ...]]] = []


class RecordingListener:
    """Named in ``jobListenerTypes`` by tests: records (hook, instance, items)."""

    def before_job_executed(self, fire: FireContext) -> None:
        with _lock:
            CALLS.append(("before", fire.instance, tuple(fire.items)))

    def after_job_executed(self, fire: FireContext) -> None:
        with _lock:
            CALLS.append(("after", fire.instance, tuple(fire.items)))


class FirstListener(RecordingListener):
    order = 1


class NeedsArguments:
    def __init__(self, required: str) -> None:
        self.required = required


class NotAListener:
    pass


# -- an in-process fleet ------------------------------------------------------------------


class Fleet:
    """Schedulers on one fresh namespace, each with its own session; all events recorded."""

    def __init__(self, server: ZooKeeperServer) -> None:
        # Cluster gives the namespace, the session settings and the admin session.
        self.cluster = Cluster(
            server, JobConfig(job_name="unused", sharding_total_count=1), Recorder()
        )
        self.events: list[Event] = []
        self._lock = threading.Lock()

    @property
    def admin(self) -> Registry:
        return self.cluster.admin

    @property
    def schedulers(self) -> dict[str, Scheduler]:
        return self.cluster.schedulers

    def start(
        self,
        instance: str,
        declare: Callable[[Scheduler], None],
        error_handler: ErrorHandler | None = None,
    ) -> Scheduler:
        scheduler = Scheduler(
            self.cluster.registry(),
            instance_id=instance,
            observers=[self._observe],
            error_handler=error_handler,
        )
        declare(scheduler)
        scheduler.start()
        self.cluster.schedulers[instance] = scheduler
        return scheduler

    def _observe(self, event: Event) -> None:
        with self._lock:
            self.events.append(event)

    def trigger(self, job: str) -> None:
        """What ``shardcron trigger`` and the Java console write: one node per instance."""
        for instance in self.schedulers:
            self.admin.create(JobPaths(job).trigger(instance))

    def finished(self, job: str) -> list[ItemFinished]:
        with self._lock:
            return [e for e in self.events if isinstance(e, ItemFinished) and e.job_name == job]

    def wait_finished(self, job: str, count: int, timeout: float = 15.0) -> list[ItemFinished]:
        wait_until(lambda: len(self.finished(job)) >= count, timeout, f"{count} runs of {job}")
        return self.finished(job)


@contextmanager
def fleet(server: ZooKeeperServer) -> Iterator[Fleet]:
    made = Fleet(server)
    try:
        yield made
    finally:
        made.cluster.close()


# -- a local HTTP server ------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


class HttpSink:
    """Answers every request with the status in its path (``/status/503``; else 200) and
    records it; ``/hang`` answers only once the sink closes (for read timeouts)."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.closing = threading.Event()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def handle_any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with _lock:
                    sink.requests.append(
                        Request(self.command, self.path, dict(self.headers.items()), body)
                    )
                if self.path == "/hang":
                    sink.closing.wait(30)
                parts = self.path.split("/")
                status = int(parts[2]) if len(parts) > 2 and parts[1] == "status" else 200
                answer = b"ok" if status < 400 else b"server says no"
                self.send_response(status)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = handle_any

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def received(self) -> list[Request]:
        with _lock:
            return list(self.requests)

    def close(self) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def http_sink() -> Iterator[HttpSink]:
    sink = HttpSink()
    try:
        yield sink
    finally:
        sink.close()
