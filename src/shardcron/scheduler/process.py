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
import functools
import gc
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from shardcron.config import plugins
from shardcron.config.job import JobConfig, declare
from shardcron.config.registry import RegistryConfig
from shardcron.coordination import deregistration, healing, sharding
from shardcron.coordination.claimlead import ClaimLead
from shardcron.coordination.events import Observer
from shardcron.coordination.groupcommit import GroupCommit
from shardcron.coordination.misfires import MissedFires, RepeatedLines
from shardcron.coordination.registration import GROUP_SIZE, Registering, start_together
from shardcron.coordination.runtime import JobRuntime
from shardcron.coordination.strategies import Strategy
from shardcron.errors import ConfigError, RegistryError, ShardcronError
from shardcron.execution.errorhandlers import make_error_handler
from shardcron.execution.jobs import AsyncLoop, make_runner
from shardcron.execution.lanes import ErrorHandler, lanes_for
from shardcron.execution.listeners import JobListener, load_listeners
from shardcron.execution.workerpool import WorkerPool
from shardcron.model import ExecutionSource, default_instance_id, instance_ip, local_ip, some
from shardcron.observability.dump import DumpServer
from shardcron.observability.metrics import Metrics
from shardcron.observability.workercard import WorkerCard
from shardcron.registry import Registry, SessionState, open_registry
from shardcron.registry.cache import EventThread
from shardcron.scheduler.startsfirst import HandOvers, StartsFirst
from shardcron.scheduler.stopsignals import StopSignals
from shardcron.scheduler.timers import Timers, logged
from shardcron.tracing import open_tracer

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

# Room in the cyclic collector's youngest generation (the interpreter's is 700 container
# allocations). At 700, a worker of thousands of jobs promoted its fires' garbage and ran
# full collections over a million objects every few seconds (pauses up to 0.8 s); with
# room for a tick's garbage most of it dies young. The room grows with the jobs: a young
# collection scans all it holds, and the garbage it waits for is memory. Measured in
# docs/deployment.md.
GC_YOUNG_PER_JOB = 10
GC_YOUNG_THRESHOLD = 50_000  # the most, by default (reached at 5,000 jobs)
# After the grace, how long a stop with nothing running waits for its jobs to deregister
# (deregistration gives up by itself sooner unless the registry stops answering).
DEREGISTER_SECONDS = 30.0


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
        strategies: Mapping[str, Strategy] | None = None,
        listener_types: Mapping[str, Callable[[], JobListener]] | None = None,
        error_handlers: Mapping[str, ErrorHandler] | None = None,
        gc_threshold: int | None = GC_YOUNG_THRESHOLD,
    ) -> None:
        """``tracing`` is a SQLAlchemy URL for execution traces; ``metrics_port`` serves
        Prometheus metrics; ``dump_port`` serves ``dump@{job}``. All stay local to this
        process: nothing about them is written to the registry. ``strategies``,
        ``listener_types`` and ``error_handlers`` register the names jobs may use for
        them (see :mod:`shardcron.config.plugins`): registry values never name other code.
        ``gc_threshold``: from :meth:`start` on, the youngest generation of the process's
        cyclic garbage collector has room for 10 allocations per job started, up to this
        many (see ``gc.set_threshold``: below 71 jobs the interpreter's 700 stays, and a
        higher setting is kept), and the collector waits while the items of a second
        start (see :mod:`shardcron.scheduler.startsfirst`); None leaves the collector as it is."""
        if gc_threshold is not None and gc_threshold < 1:
            raise ConfigError(
                "gc_threshold",
                f"{gc_threshold} is not a number of allocations; pass a positive number, or "
                "None to leave the garbage collector as it is",
            )
        plugins.register_all(plugins.Kind.STRATEGY, strategies)
        plugins.register_all(plugins.Kind.LISTENER, listener_types)
        plugins.register_all(plugins.Kind.ERROR_HANDLER, error_handlers)
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
        self._pool = WorkerPool(max_workers, "shardcron-worker")
        self.card = WorkerCard(  # the worker page
            self.registry, self.instance_id, max_workers, lambda: self._pool.busy
        )
        self._coordinator: EventThread | None = None
        self._commits = GroupCommit(self.registry, self)
        self._departures = deregistration.Departures(self.registry, self)
        # Shared by the process's jobs, as their claims are: see claimlead.
        self._lead = ClaimLead(lambda: len(self.runtimes), self)
        self._relead_due = False
        self._missed = MissedFires()
        self._repeated = RepeatedLines()
        self._joins = sharding.Joins()
        self._loop = AsyncLoop()
        self._timers = Timers(self.coordinate, stepped=self._clock_stepped)
        self._handovers = HandOvers(
            StartsFirst(self.coordinate, self.call_later, gc_threshold is not None),
            lambda when, fn: self._timers.push(when, fn, on_timer=True),
            self._pool.submit,
        )
        self._started = False
        self._stopping = threading.Event()
        self._dump_port = dump_port
        self._dump: DumpServer | None = None
        self._gc_threshold = gc_threshold

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
        declare(config, with_callable=target is None)  # the local declaration's code
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
        if "sharding_total_count" not in settings:  # required, as in a config file and Java
            raise ConfigError("shardingTotalCount", "required: pass e.g. sharding_total_count=3")

        def register(fn: F) -> F:
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
        if self._gc_threshold is not None:
            _raise_gc_threshold(min(self._gc_threshold, GC_YOUNG_PER_JOB * len(self._jobs)))
        self.card.start()
        if self._dump_port is not None:
            self._dump = DumpServer(self.registry, self._dump_port).start()
        if self.metrics is not None:
            host, port = self._metrics_address
            self.metrics.serve(port, host)
        self._coordinator = EventThread("shardcron-coordinator")
        self.registry.add_session_listener(self._on_session)
        self._timers.start()
        self._started = True
        # Groups of jobs register together (see shardcron.coordination.registration); a few groups
        # at a time, so one group's round trips overlap another's work.
        runtimes = [r for job in list(self._jobs.values()) if (r := self._new_runtime(*job))]
        groups = [runtimes[i : i + GROUP_SIZE] for i in range(0, len(runtimes), GROUP_SIZE)]
        with ThreadPoolExecutor(max_workers=4, thread_name_prefix="shardcron-start") as starter:
            for group in groups:
                starter.submit(
                    logged,
                    functools.partial(start_together, self.registry, group, self._failed_to_start),
                )

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

    def _new_runtime(
        self, config: JobConfig, target: object | None, listeners: list[JobListener]
    ) -> JobRuntime | None:
        try:
            runner = make_runner(config, target, self._loop)
            listeners = listeners + load_listeners(config.job_listener_types)
            error_handler = make_error_handler(config, self.instance_id) or self._error_handler
            lanes = lanes_for(
                config.job_name,
                self.instance_id,
                self.ip,
                self,
                runner,
                observers=self.observers,
                listeners=listeners,
                error_handler=error_handler,
            )
            runtime = JobRuntime(
                config,
                lanes,
                self.registry,
                self.instance_id,
                self.ip,
                self,
                workers=workers_for(config),
                lead=self._lead,
                claim_took=self._claim_took,
                heal_every=self._heal_every,
                on_detach=self._detached,
                observers=self.observers,
                commits=self._commits,
                departures=self._departures,
                missed=self._missed,
                repeated=self._repeated,
                joins=self._joins,
            )
        except ShardcronError as exc:
            log.error("%s", exc)
            self.failed[config.job_name] = exc
            return None
        self.runtimes[config.job_name] = runtime  # sees session events from now on
        return runtime

    def _start_job(
        self, config: JobConfig, target: object | None, listeners: list[JobListener]
    ) -> None:
        runtime = self._new_runtime(config, target, listeners)
        if runtime is not None:
            try:
                runtime.start()
            except ShardcronError as exc:
                self._failed_to_start(runtime, exc)

    def _failed_to_start(self, runtime: Registering, exc: ShardcronError) -> None:
        self.runtimes.pop(runtime.name, None)
        log.error("%s", exc)
        self.failed[runtime.name] = exc

    def stop(self, grace: float = 30.0) -> dict[str, list[int]]:
        """Stop firing, let running items finish (up to ``grace`` seconds), deregister.

        Returns the items still running after ``grace``, by job. Their claims and this
        process's registry session are kept until they return (then the jobs deregister
        and the session closes): a claim is never released while its code may still run,
        so no other instance starts the same item meanwhile. Calling it again (a signal
        handler and an exit hook both stopping) returns at once: the first call does it.
        """
        if self._stopping.is_set():
            return {}
        self._stopping.set()
        if not self.registry.connected:
            log.warning(
                "stopping while the registry is unreachable: this instance's nodes go when "
                "its session expires, and its jobs will not show a clean stop"
            )
        # The timer keeps running until the close: completions still go out through it.
        runtimes = list(self.runtimes.values())
        stopping = threading.Event()
        self.coordinate(lambda: self._departures.stop(runtimes))
        self.coordinate(stopping.set)  # gone means something only once no fire can start
        deadline = time.monotonic() + grace
        stopping.wait(grace)
        for runtime in runtimes:
            runtime.gone.wait(max(0.0, deadline - time.monotonic()))
        leaving = [rt for rt in runtimes if not rt.gone.is_set()]
        still = {rt.name: items for rt in leaving if (items := rt.running_items)}
        if still:
            log.warning(
                "items still running after %.0fs: %s; their claims stay until they return",
                grace,
                some([f"{job} {items}" for job, items in sorted(still.items())], "; "),
            )
            threading.Thread(
                target=self._close_when_gone, args=(runtimes,), name="shardcron-stop", daemon=True
            ).start()
            return still
        # Nothing runs: what is left is deregistering (a request away), or stuck on a
        # registry that stopped answering, whose session's end does the same.
        deadline = time.monotonic() + DEREGISTER_SECONDS
        for runtime in leaving:
            runtime.gone.wait(max(0.0, deadline - time.monotonic()))
        self._close()
        return still

    def _close_when_gone(self, runtimes: list[JobRuntime]) -> None:
        for runtime in runtimes:
            runtime.gone.wait()
        self._close()

    def _close(self) -> None:
        self.runtimes.clear()
        self._timers.close()
        if self._coordinator is not None:
            done = threading.Event()
            self._coordinator.submit(done.set)  # let queued deregistrations finish first
            done.wait(5)
            self._coordinator.stop()
        if self._dump is not None:
            self._dump.stop()
        if self.metrics is not None:
            self.metrics.stop()
        if self.tracer is not None:
            self.tracer.close(timeout=5)
        self.card.stop()
        self.registry.close()
        self._pool.shutdown()
        self._loop.stop()

    def run_forever(self, grace: float = 30.0) -> None:
        """Start, then run until SIGINT or SIGTERM, then stop gracefully.

        Items still running after ``grace`` end with the process, before their claims are
        released (exit status 3): their jobs fail them over once the session times out.
        """
        with StopSignals() as signals:  # a second signal during the grace changes nothing
            if not self._started:
                self.start()
            received = signals.wait()
            log.info("stopping on %s: waiting up to %.0fs for running items", received.name, grace)
            if self.stop(grace):
                log.error("exiting with items still running; they fail over when the session ends")
                logging.shutdown()
                os._exit(3)

    def trigger(self, job: str) -> None:
        """Run ``job``'s items on this instance now, outside its schedule."""
        runtime = self.runtimes[job]
        self.coordinate(lambda: runtime.firing.fire(ExecutionSource.NORMAL_TRIGGER))

    # -- Host, for the runtimes -----------------------------------------------------------

    def now(self) -> float:
        return time.time()

    def released(self) -> float:
        return self._timers.released()

    def monotonic(self) -> float:
        return time.monotonic()

    def released_monotonic(self) -> float:
        return self._timers.released_monotonic()

    @property
    def chains_items(self) -> bool:
        return True

    def execute(
        self,
        work: Callable[[], T],
        then: Callable[[T], None],
        returned: Callable[[T], None] | None = None,
    ) -> None:
        # A partial, not a closure: the collector scans every late fire's work in flight.
        self._pool.submit(functools.partial(_run_work, self.coordinate, work, then, returned))

    def execute_at(
        self,
        when: float,
        works: Sequence[Callable[[], T]],
        then: Callable[[T], None],
        next_claim: float | None,
        returned: Callable[[T], None] | None = None,
    ) -> None:
        self._handovers.stage(when, works, then, next_claim, returned)

    def coordinate(self, fn: Callable[[], None]) -> None:
        if self._coordinator is not None:
            self._coordinator.submit(fn)

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        self._timers.push_in(delay, fn)

    def call_at(self, when: float, fn: Callable[[], None]) -> None:
        self._timers.push(when, fn)

    def _claim_took(self, asked: float) -> None:
        """A grown lead applies to the fires armed already, once the claims answered in
        the same batch are through (one pass over the jobs, not one per answer)."""
        if self._lead.took(asked) and not self._relead_due:
            self._relead_due = True
            self.coordinate(self._relead)

    def _relead(self) -> None:
        self._relead_due = False
        for runtime in list(self.runtimes.values()):
            runtime.guarded(runtime.firing.timer.relead, "claim lead")

    def _clock_stepped(self) -> None:
        """The wall clock stepped: each job's next fire measures its skew again."""
        for runtime in list(self.runtimes.values()):
            runtime.guarded(runtime.firing.clock.forget, "clock step")

    def _heal_every(self) -> float:
        return healing.heal_seconds(len(self.runtimes))

    def _detached(self, runtime: JobRuntime) -> None:
        """An operator shut the job down here, or removed it: it may be added again."""
        if self.runtimes.get(runtime.name) is runtime:
            del self.runtimes[runtime.name]
            self._jobs.pop(runtime.name, None)
        if not self.runtimes and not self._stopping.is_set():
            log.warning("every job of this worker was shut down; it stays idle until restarted")

    # -- internals ------------------------------------------------------------------------

    def _on_session(self, state: SessionState) -> None:
        if self._stopping.is_set():
            return  # our own stop closes the session: nothing was lost
        self.coordinate(lambda: self._lead.session(state))  # the lead is the coordinator's
        quiet = state in (SessionState.CONNECTED, SessionState.LOST)
        log.log(logging.INFO if quiet else logging.WARNING, "registry session %s", state)
        for runtime in list(self.runtimes.values()):
            self.coordinate(lambda rt=runtime: rt.on_session(state))  # type: ignore[misc]


def _raise_gc_threshold(young: int) -> None:
    """Process-wide, for the rest of the process; a collector the program disabled or set
    higher is left alone (0 disables it)."""
    current, *older = gc.get_threshold()
    if 0 < current < young:
        gc.set_threshold(young, *older)


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


def _run_work(
    coordinate: Callable[[Callable[[], None]], None],
    work: Callable[[], T],
    then: Callable[[T], None],
    returned: Callable[[T], None] | None,
) -> None:
    """On a worker: ``work``, then ``returned`` there and ``then`` on the coordinator."""
    result = work()
    if returned is not None:
        returned(result)
    coordinate(functools.partial(then, result))
