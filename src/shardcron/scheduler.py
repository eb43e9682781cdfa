"""The process: one registry session, one timer thread, one coordinator, one worker pool.

A :class:`Scheduler` hosts any number of jobs without a thread per job: the timer thread
keeps every job's next fire time in one heap, fires run on the shared worker pool, and
registry reactions of all jobs are serialized on the coordinator thread.

Typical use::

    scheduler = Scheduler("zk://127.0.0.1:2181/my-app")

    @scheduler.job(cron="0/5 * * * * ?", sharding_total_count=3)
    def orders(ctx: ShardingContext) -> None:
        ...

    scheduler.run_forever()  # until SIGINT/SIGTERM
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, TypeVar

from shardcron.config import JobConfig, RegistryConfig, parse_registry_url
from shardcron.dump import DumpServer
from shardcron.errorhandlers import make_error_handler
from shardcron.errors import ConfigError, RegistryError, ShardcronError
from shardcron.events import Observer
from shardcron.jobs import AsyncLoop, make_runner
from shardcron.listeners import JobListener, load_listeners
from shardcron.metrics import Metrics
from shardcron.model import ExecutionSource, default_instance_id, local_ip
from shardcron.paths import instance_ip
from shardcron.registry import Registry, SessionState
from shardcron.registry.cache import EventThread
from shardcron.runtime import ErrorHandler, JobRuntime
from shardcron.tracing import open_tracer

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

# A fire found this late is not run: it was missed (a stall, a clock jump), not late.
MAX_LATENESS_SECONDS = 1.0
# Fires are prepared (items claimed in the registry) ahead of their time, so the claim's
# round trip does not make items start late; items still start on the second. The lead
# grows with the jobs of the process, whose claims share one registry connection.
CLAIM_LEAD_SECONDS = 0.02
CLAIM_LEAD_PER_JOB_SECONDS = 0.001
MAX_CLAIM_LEAD_SECONDS = 0.25


def open_registry(target: Registry | RegistryConfig | str | None) -> Registry:
    """A registry from an object, a config, a ``zk://`` or ``memory://`` URL, or None (embedded)."""
    if target is None or isinstance(target, str | RegistryConfig):
        config = (
            parse_registry_url(target or "memory://")
            if not isinstance(target, RegistryConfig)
            else target
        )
        if config.is_memory:
            from shardcron.registry.memory import MemoryRegistry

            return MemoryRegistry(namespace=config.namespace)
        from shardcron.registry.zookeeper import ZooKeeperRegistry

        return ZooKeeperRegistry(config)
    return target


def workers_for(config: JobConfig) -> int:
    if config.executor_service_handler == "SINGLE_THREAD":
        return 1
    return (os.cpu_count() or 1) * 2


class Scheduler:
    def __init__(
        self,
        registry: Registry | RegistryConfig | str | None = None,
        *,
        instance_id: str | None = None,
        max_workers: int = 32,
        observers: list[Observer] | None = None,
        error_handler: ErrorHandler | None = None,
        dump_port: int | None = None,
        tracing: str | None = None,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
    ) -> None:
        """``tracing`` is a SQLAlchemy URL for execution traces; ``metrics_port`` serves
        Prometheus metrics; ``dump_port`` serves ``dump@{job}``. All stay local to this
        process: nothing about them is written to the registry."""
        self.registry = open_registry(registry)
        self.instance_id = instance_id or default_instance_id()
        self.ip = instance_ip(self.instance_id) if instance_id else local_ip()
        self.observers = list(observers or [])
        self.tracer = open_tracer(tracing) if tracing else None
        self.metrics = Metrics(self.registry, self.tracer) if metrics_port is not None else None
        self._metrics_address = (metrics_host, metrics_port or 0)
        self.observers += [o for o in (self.tracer, self.metrics) if o is not None]
        self._error_handler = error_handler
        self._jobs: dict[str, tuple[JobConfig, object | None, list[JobListener]]] = {}
        self.runtimes: dict[str, JobRuntime] = {}
        self.failed: dict[str, ShardcronError] = {}
        self._pool = ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="shardcron-worker"
        )
        self._coordinator: EventThread | None = None
        self._loop = AsyncLoop()
        self._timer = threading.Condition()
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._generation: dict[str, int] = {}
        self._started = False
        self._stopping = threading.Event()
        self._dump_port = dump_port
        self._dump: DumpServer | None = None

    # -- declaring jobs -------------------------------------------------------------------

    def add_job(
        self,
        config: JobConfig,
        target: object | None = None,
        listeners: list[JobListener] | None = None,
    ) -> None:
        """Register a job; ``target`` is its callable when it is given in code.

        ``listeners`` run before and after each fire, with those ``jobListenerTypes`` names.
        """
        if target is None:
            config.validate()
        else:
            _validate_without_callable(config)
            if config.callable is None and callable_ref(target):
                config = config.with_changes(callable=callable_ref(target))
        if config.job_name in self._jobs:
            raise ConfigError(
                "jobName", f"{config.job_name!r} is declared twice; job names must be unique"
            )
        self._jobs[config.job_name] = (config, target, list(listeners or []))
        if self._started:
            self._start_job(*self._jobs[config.job_name])

    def job(
        self, cron: str | None = None, *, name: str | None = None, **settings: Any
    ) -> Callable[[F], F]:
        """Decorator: ``@scheduler.job(cron="0/5 * * * * ?", sharding_total_count=3)``."""

        known = {f.name for f in dataclasses.fields(JobConfig)} - {"job_name", "cron"}
        unknown = sorted(set(settings) - known)
        if unknown:
            raise ConfigError(
                unknown[0], f"not a job setting; use one of {', '.join(sorted(known))}"
            )

        def register(fn: F) -> F:
            settings.setdefault("sharding_total_count", 1)
            config = JobConfig(job_name=name or fn.__name__, cron=cron, **settings)
            self.add_job(config, fn)
            return fn

        return register

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, connect_timeout: float | None = None) -> None:
        """Connect (retrying with backoff while the registry is down) and start every job.

        A job that cannot start is logged and listed in :attr:`failed`; the others run.
        """
        self._connect(connect_timeout)
        if self._dump_port is not None:
            self._dump = DumpServer(self.registry, self._dump_port).start()
        if self.metrics is not None:
            host, port = self._metrics_address
            self.metrics.serve(port, host)
        self._coordinator = EventThread("shardcron-coordinator")
        self.registry.add_session_listener(self._on_session)
        threading.Thread(target=self._timer_loop, name="shardcron-timer", daemon=True).start()
        self._started = True
        # Each job's registration is a chain of round trips; many jobs start side by side.
        with ThreadPoolExecutor(max_workers=16, thread_name_prefix="shardcron-start") as starter:
            for job in list(self._jobs.values()):
                starter.submit(_logged, lambda job=job: self._start_job(*job))  # type: ignore[misc]

    def _connect(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.5
        while True:
            try:
                self.registry.start()
                return
            except RegistryError as exc:
                if self._stopping.is_set() or (
                    deadline is not None and time.monotonic() > deadline
                ):
                    raise
                log.error("registry unreachable (%s); retrying in %.1fs", exc, delay)
                self._stopping.wait(delay)
                delay = min(delay * 2, 30.0)

    def _start_job(
        self, config: JobConfig, target: object | None, listeners: list[JobListener]
    ) -> None:
        try:
            runner = make_runner(config, target, self._loop)
            listeners = listeners + load_listeners(config.job_listener_types)
            error_handler = make_error_handler(config, self.instance_id) or self._error_handler
            runtime = JobRuntime(
                config,
                runner,
                self.registry,
                self.instance_id,
                self.ip,
                self,
                workers=workers_for(config),
                observers=self.observers,
                listeners=listeners,
                error_handler=error_handler,
            )
            runtime.start()
        except ShardcronError as exc:
            log.error("%s", exc)
            self.failed[config.job_name] = exc
            return
        self.runtimes[config.job_name] = runtime
        self.reschedule(runtime)

    def stop(self, grace: float = 30.0) -> None:
        """Stop firing, let running items finish (up to ``grace`` seconds), deregister."""
        self._stopping.set()
        with self._timer:
            self._heap.clear()
            self._timer.notify_all()
        deadline = time.monotonic() + grace
        for runtime in list(self.runtimes.values()):
            runtime.stopped = True
        for runtime in list(self.runtimes.values()):
            runtime.stop(max(0.0, deadline - time.monotonic()))
        self.runtimes.clear()
        if self._coordinator is not None:
            self._coordinator.stop()
        if self._dump is not None:
            self._dump.stop()
        if self.metrics is not None:
            self.metrics.stop()
        if self.tracer is not None:
            self.tracer.close(timeout=5)
        self.registry.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._loop.stop()

    def run_forever(self, grace: float = 30.0) -> None:
        """Start, then run until SIGINT or SIGTERM, then stop gracefully."""
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        if not self._started:
            self.start()
        stop.wait()
        log.info("stopping: waiting up to %.0fs for running items", grace)
        self.stop(grace)

    def trigger(self, job: str) -> None:
        """Run ``job``'s items on this instance now, outside its schedule."""
        runtime = self.runtimes[job]
        self.submit(lambda: runtime.fire(ExecutionSource.NORMAL_TRIGGER))

    # -- Host, for the runtimes -----------------------------------------------------------

    def submit(self, fn: Callable[[], None]) -> None:
        if not self._stopping.is_set():
            self._pool.submit(_logged, fn)

    def coordinate(self, fn: Callable[[], None]) -> None:
        if self._coordinator is not None:
            self._coordinator.submit(fn)

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        self._push(time.time() + delay, fn)

    def reschedule(self, runtime: JobRuntime) -> None:
        name = runtime.name
        generation = self._generation.get(name, 0) + 1
        self._generation[name] = generation
        self._schedule_next(runtime, generation, time.time())

    def detach(self, runtime: JobRuntime) -> None:
        """The job was shut down on this instance from outside (an operator)."""
        runtime.stopped = True
        self._generation[runtime.name] = self._generation.get(runtime.name, 0) + 1
        self.runtimes.pop(runtime.name, None)
        self.submit(lambda: runtime.stop(30.0))

    # -- internals ------------------------------------------------------------------------

    def _on_session(self, state: SessionState) -> None:
        quiet = state in (SessionState.CONNECTED, SessionState.LOST)
        log.log(logging.INFO if quiet else logging.WARNING, "registry session %s", state)
        for runtime in list(self.runtimes.values()):
            self.coordinate(lambda rt=runtime: rt.on_session(state))  # type: ignore[misc]

    def _schedule_next(self, runtime: JobRuntime, generation: int, after: float) -> None:
        if runtime.trigger is None:
            return  # a one-off job: it runs only when triggered
        moment = runtime.trigger.next_fire(datetime.fromtimestamp(after, UTC))
        if moment is None:
            return
        when = moment.timestamp()
        lead = min(
            MAX_CLAIM_LEAD_SECONDS,
            CLAIM_LEAD_SECONDS + CLAIM_LEAD_PER_JOB_SECONDS * len(self.runtimes),
        )
        self._push(when - lead, lambda: self._fire_due(runtime, generation, when))

    def _fire_due(self, runtime: JobRuntime, generation: int, when: float) -> None:
        if self._generation.get(runtime.name) != generation or runtime.stopped:
            return
        now = time.time()
        if now - when <= MAX_LATENESS_SECONDS:
            self.submit(lambda: runtime.fire(start_at=when))
        else:
            log.warning("job %s: fire of %s missed by %.1fs", runtime.name, when, now - when)
        self._schedule_next(runtime, generation, max(when, now - MAX_LATENESS_SECONDS))

    def _push(self, when: float, fn: Callable[[], None]) -> None:
        with self._timer:
            heapq.heappush(self._heap, (when, next(self._seq), fn))
            self._timer.notify()

    def _timer_loop(self) -> None:
        with self._timer:
            while not self._stopping.is_set():
                if not self._heap:
                    self._timer.wait(60)
                    continue
                delay = self._heap[0][0] - time.time()
                if delay > 0:
                    self._timer.wait(min(delay, 60))
                    continue
                _, _, fn = heapq.heappop(self._heap)
                _logged(fn)


def _logged(fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception:
        log.exception("shardcron internal task failed")


def callable_ref(fn: object) -> str | None:
    """``module:qualname`` of a function importable by that name, else None."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or not qualname or module == "__main__" or "<" in qualname:
        return None
    return f"{module}:{qualname}"


def _validate_without_callable(config: JobConfig) -> None:
    problems = [p for p in config.validate_all() if p.field != "callable"]
    if problems:
        raise problems[0]
