"""One job on one instance: start-up, reactions to registry changes, and each fire.

Three kinds of thread touch a runtime, each with one job:

* the registry's event thread applies cache updates and only *enqueues* reactions;
* the scheduler's coordinator thread runs those reactions in order (election, flags,
  failover claims, operator requests): every decision about cluster state is made there;
* worker-pool threads run fires and items.

A fire reads only the local tree cache. It costs two round trips when the instance has
items (claim, complete) and none when it has not; resharding, misfire and failover add
round trips only when they actually happen.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from shardcron import election, execution, failover, membership, sharding
from shardcron.config import JobConfig
from shardcron.errors import (
    ClockSkewError,
    JobConflictError,
    RegistryError,
    ShardcronError,
    TransactionError,
)
from shardcron.events import (
    Event,
    FailoverClaimed,
    FireState,
    FireStatus,
    ItemFinished,
    ItemsSkipped,
    ItemStarted,
    LeaderChanged,
    Observer,
    Resharded,
)
from shardcron.jobs import ItemRunner
from shardcron.listeners import JobListener, ordered
from shardcron.model import ExecutionSource, FireContext, ServerStatus, ShardingContext, task_id
from shardcron.paths import INSTANCE_DELIMITER, JobPaths
from shardcron.registry import (
    Delete,
    EventType,
    NodeEvent,
    Op,
    Registry,
    SessionState,
    TreeCache,
)
from shardcron.strategies import resolve_strategy
from shardcron.trigger import CronTrigger

log = logging.getLogger(__name__)

SHARDING_WAIT_SECONDS = 10.0
CLOCK_REFRESH_SECONDS = 60.0
# How long a busy instance leaves queued failover items to idle ones before it takes them.
FAILOVER_GRACE_SECONDS = 0.1


class Host(Protocol):
    """What the process-wide scheduler offers its job runtimes."""

    def submit(self, fn: Callable[[], None]) -> None: ...
    def coordinate(self, fn: Callable[[], None]) -> None: ...
    def call_later(self, delay: float, fn: Callable[[], None]) -> None: ...
    def reschedule(self, runtime: JobRuntime) -> None: ...
    def detach(self, runtime: JobRuntime) -> None: ...


ErrorHandler = Callable[[str, ShardingContext | None, BaseException], None]


def _log_error(job: str, ctx: ShardingContext | None, error: BaseException) -> None:
    item = "" if ctx is None else f" item {ctx.sharding_item}"
    log.error("job %s%s failed: %s", job, item, error, exc_info=error)


def needs_value(paths: JobPaths, path: str) -> bool:
    """Whether the cache must fetch ``path``'s value. Flags (``running``, ``misfire``, ...)
    are tracked for existence only, so watching others' claims costs no reads at all."""
    rel = path[len(paths.root) :]
    return (
        rel == ""
        or rel == "/config"
        or rel.startswith("/servers/")
        or path == paths.election_instance
        or (rel.startswith("/sharding/") and rel.endswith("/instance"))
    )


@dataclass
class _Fire:
    """The items of one dispatch, counted down as lanes finish them."""

    items: list[int]
    claim: execution.Claim
    source: ExecutionSource
    session: int
    context: FireContext | None = None
    errors: dict[int, BaseException] = field(default_factory=dict)
    pending: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class JobRuntime:
    def __init__(
        self,
        config: JobConfig,
        runner: ItemRunner,
        registry: Registry,
        instance: str,
        ip: str,
        host: Host,
        *,
        workers: int,
        observers: list[Observer] | None = None,
        listeners: list[JobListener] | None = None,
        error_handler: ErrorHandler | None = None,
    ) -> None:
        self.config = config
        self.paths = JobPaths(config.job_name)
        self.registry = registry
        self.instance = instance
        self.ip = ip
        self.host = host
        self.runner = runner
        self.workers = workers
        self.observers = observers or []
        self.listeners = ordered(listeners or [])
        self.error_handler = error_handler or _log_error
        self.trigger = _trigger(config)
        self.stopped = False
        self._cache: TreeCache | None = None
        self._changed = threading.Condition()
        self._events_seen = 0  # cache events so far; lets waiters skip a wakeup already past
        self._running: set[int] = set()  # items running in this process
        self._misfired: set[int] = set()  # local record, ahead of the cache
        self._suspended = False
        self._session_lost = False
        self._idle = threading.Event()
        self._idle.set()
        self._ready = False  # set once start() registered; earlier events describe the start
        self._clock_offset = 0.0
        self._clock_checked_at = 0.0

    @property
    def name(self) -> str:
        return self.config.job_name

    @property
    def cache(self) -> TreeCache:
        assert self._cache is not None, "runtime not started"
        return self._cache

    def _emit(self, event: Event) -> None:
        for observer in self.observers:
            try:
                observer(event)
            except Exception:
                log.exception("job %s: observer failed on %s", self.name, type(event).__name__)

    # -- start and stop -----------------------------------------------------------------

    def start(self) -> None:
        """Register in the 3.x order: config, server, instance, election."""
        paths = self.paths
        self._cache = self.registry.tree_cache(
            paths.root, self._on_node_event, lambda p: not needs_value(paths, p)
        )
        self._setup_config()
        for listener in self.listeners:
            bind = getattr(listener, "bind", None)
            if bind is not None:  # distributed listeners coordinate through the registry
                bind(self.registry, paths, self.instance)
        status = ServerStatus.DISABLED if self.config.disabled else ServerStatus.ENABLED
        if self.cache.get(paths.server(self.ip)) != status.encode():
            membership.register_server(self.registry, paths, self.ip, not self.config.disabled)
        membership.register_instance(self.registry, paths, self.instance, self.ip)
        self._elect()
        self._ready = True
        self._schedule_reconcile()
        if self.config.failover:
            self.host.coordinate(lambda: self._failover_pass(phase=0))
        log.info("job %s started on %s", self.name, self.instance)

    def _setup_config(self) -> None:
        local = self.config
        # The cache was loaded a moment ago: reading from it saves two round trips per job.
        stored_ref = self.cache.get(self.paths.root)
        if stored_ref and stored_ref.decode() != local.node_value:
            raise JobConflictError(
                f"job {self.name!r}: the registry already holds a different job under this name "
                f"({stored_ref.decode()!r}, not {local.node_value!r}); rename the job or remove it "
                "with 'shardcron remove'"
            )
        stored = self.cache.get(self.paths.config)
        if stored is None or local.overwrite:
            self.registry.put(self.paths.root, local.node_value.encode())
            self.registry.put(self.paths.config, local.to_yaml().encode())
            return
        effective = JobConfig.from_yaml(stored.decode(), self.name).with_changes(
            type=local.type, callable=local.callable
        )
        problems = [p for p in effective.validate_all() if p.field != "callable"]
        if problems:
            raise problems[0]
        self.config = effective
        self.trigger = _trigger(effective)

    def stop(self, grace: float) -> None:
        """No new fires; wait up to ``grace`` for running items, then deregister."""
        self.stopped = True
        if not self._idle.wait(grace):
            log.warning(
                "job %s: items %s still running after %.0fs", self.name, self._running, grace
            )
        try:
            self.registry.delete(self.paths.instance(self.instance))
            if self._cache is not None and self._is_leader():
                self._emit(LeaderChanged(job_name=self.name, instance=self.instance, leader=False))
            election.abdicate(self.registry, self.paths)
        except RegistryError as exc:
            log.warning("job %s: could not deregister cleanly: %s", self.name, exc)
        for listener in self.listeners:
            unbind = getattr(listener, "unbind", None)
            if unbind is not None:
                unbind()
        if self._cache is not None:
            self._cache.close()

    # -- reacting to the registry (coordinator thread) ----------------------------------

    def _on_node_event(self, event: NodeEvent) -> None:
        with self._changed:
            self._events_seen += 1
            self._changed.notify_all()
        self.host.coordinate(
            lambda: self._guarded(lambda: self._handle(event), f"{event.type} {event.path}")
        )

    def _guarded(self, fn: Callable[[], object], what: str) -> None:
        """Run a reaction on the coordinator; a failure (registry down, an operator's
        malformed config) is logged, never fatal."""
        if self.stopped or not self._ready:
            return
        try:
            fn()
        except ShardcronError as exc:
            log.warning("job %s: could not react to %s: %s", self.name, what, exc)

    def _handle(self, event: NodeEvent) -> None:
        paths, path = self.paths, event.path
        if paths.child_name(paths.instances, path) is not None:
            self._on_instance_event(event, paths.child_name(paths.instances, path) or "")
        elif paths.child_name(paths.servers, path) is not None:
            self._on_server_event(event, paths.child_name(paths.servers, path) or "")
        elif path == paths.election_instance and event.type is EventType.REMOVED:
            self._elect()
        elif path == paths.config and event.type is EventType.REMOVED:
            log.warning("job %s: removed from the registry; stopping here", self.name)
            self.host.detach(self)
        elif path == paths.config and event.type is EventType.UPDATED:
            self._on_config_changed(JobConfig.from_yaml(event.data.decode(), self.name))
        elif path == paths.trigger(self.instance) and event.type is EventType.ADDED:
            self._on_trigger()
        elif paths.child_name(paths.failover_items, path) and event.type is EventType.ADDED:
            self._failover_pass(phase=0)
        else:
            parsed = paths.parse_item(path)
            if parsed and parsed[1] == "running" and event.type is EventType.REMOVED:
                self._maybe_rerun_misfire([parsed[0]])

    def _on_instance_event(self, event: NodeEvent, instance: str) -> None:
        if event.type is EventType.UPDATED:
            return
        if instance == self.instance and event.type is EventType.REMOVED:
            if not self._session_lost and not self.stopped:
                log.warning(
                    "job %s: instance node removed by an operator; stopping here", self.name
                )
                self.host.detach(self)
            return
        if self._is_leader():
            self._flag_resharding()
            if event.type is EventType.REMOVED and self.config.failover:
                live = set(membership.live_instances(self.cache, self.paths))
                self._queue_orphans(live)

    def _on_server_event(self, event: NodeEvent, ip: str) -> None:
        if ip == self.ip:
            enabled = membership.server_enabled(self.cache, self.paths, self.ip)
            if not enabled and self._is_leader():
                log.info("job %s: server %s disabled; giving up leadership", self.name, ip)
                election.abdicate(self.registry, self.paths)
                self._emit(LeaderChanged(job_name=self.name, instance=self.instance, leader=False))
                return
            if enabled:
                self._elect()
        if self._is_leader():
            self._flag_resharding()

    def _on_config_changed(self, new: JobConfig) -> None:
        old = self.config
        new = new.with_changes(type=old.type, callable=old.callable)
        problems = [p for p in new.validate_all() if p.field != "callable"]
        if problems:
            log.error("job %s: ignoring invalid config update: %s", self.name, problems[0])
            return
        self.config = new
        if (new.cron, new.time_zone) != (old.cron, old.time_zone):
            self.trigger = _trigger(new)
            self.host.reschedule(self)
        if new.sharding_total_count != old.sharding_total_count and self._is_leader():
            self._flag_resharding(force=True)
        if old.failover and not new.failover and self._is_leader():
            failover.clear_all(self.registry, self.cache, self.paths)
        if old.monitor_execution and not new.monitor_execution and self._is_leader():
            # Claims are no longer made, so the ones left would block nothing but mislead.
            for item in range(old.sharding_total_count):
                if self.cache.exists(self.paths.running(item)):
                    self.registry.delete(self.paths.running(item))

    def _on_trigger(self) -> None:
        self.registry.delete(self.paths.trigger(self.instance))
        if self._running:
            log.info("job %s: trigger ignored, items %s still running", self.name, self._running)
            return
        self.host.submit(lambda: self.fire(ExecutionSource.NORMAL_TRIGGER))

    def on_session(self, state: SessionState) -> None:
        """Registry connection changes, on the coordinator thread."""
        if state is SessionState.SUSPENDED:
            self._suspended = True
        elif state is SessionState.EXPIRED:
            self._suspended = self._session_lost = True
            if self._is_leader():  # the ephemeral leader node went with the session
                self._emit(LeaderChanged(job_name=self.name, instance=self.instance, leader=False))
        elif state in (SessionState.RECONNECTED, SessionState.CONNECTED) and not self.stopped:
            lost, self._session_lost = self._session_lost, False
            try:
                self._rebuild()
            except RegistryError as exc:
                log.error(
                    "job %s: could not re-register after %s (retrying): %s", self.name, state, exc
                )
                self._session_lost = lost
                self.host.call_later(
                    1.0, lambda: self.host.coordinate(lambda: self.on_session(state))
                )
                return
            self._suspended = False

    def _rebuild(self) -> None:
        """Put back what this instance owns in the registry, and drop its stale claims."""
        paths = self.paths
        if self.registry.get(paths.server(self.ip)) is None:
            membership.register_server(self.registry, paths, self.ip, not self.config.disabled)
        membership.register_instance(self.registry, paths, self.instance, self.ip)
        total = self.config.sharding_total_count
        for item in sharding.local_items(self.cache, paths, self.instance, total):
            if (
                item not in self._running
                and self.registry.get(paths.running(item)) == self.instance.encode()
            ):
                self.registry.delete(paths.running(item))
        self._elect()
        log.info("job %s: re-registered %s", self.name, self.instance)

    # -- leadership ---------------------------------------------------------------------

    def _is_leader(self) -> bool:
        return election.leader(self.cache, self.paths) == self.instance

    def _elect(self) -> None:
        if self.stopped or self._session_lost:
            return
        if not membership.server_enabled(self.cache, self.paths, self.ip):
            return
        current = election.leader(self.cache, self.paths)
        if current is not None and current != self.instance:
            return
        if election.try_elect(self.registry, self.paths, self.instance):
            log.info("job %s: %s is the leader", self.name, self.instance)
            self._emit(LeaderChanged(job_name=self.name, instance=self.instance, leader=True))
            self._flag_resharding(force=True)
            if self.config.failover:
                live = set(membership.live_instances(self.cache, self.paths)) | {self.instance}
                self._queue_orphans(live)

    def _queue_orphans(self, live: set[str]) -> None:
        with self._changed:
            running_here = set(self._running)
        failover.queue_orphans(
            self.registry, self.cache, self.paths, live, self.instance, running_here
        )

    def _flag_resharding(self, force: bool = False) -> None:
        if not self.cache.exists(self.paths.config):
            return  # the job is being removed: do not re-create its nodes
        if (
            not force
            and self.config.static_sharding
            and sharding.has_sharding(self.cache, self.paths)
        ):
            return
        if not sharding.is_necessary(self.cache, self.paths):
            sharding.set_flag(self.registry, self.paths)

    # -- one fire (worker thread) -------------------------------------------------------

    def fire(
        self,
        source: ExecutionSource = ExecutionSource.NORMAL_TRIGGER,
        only: list[int] | None = None,
        start_at: float | None = None,
    ) -> None:
        """Run this instance's items now, or at ``start_at`` (epoch seconds) once claimed."""
        if self.stopped or self._suspended:
            log.debug("job %s: fire skipped (stopped or registry unavailable)", self.name)
            return
        try:
            if not self._clock_ok():
                return
            if not self._await_sharding():
                return
            free, busy = self._reserve(self._fire_items(only))
            if busy:
                self._skip(busy, "still running from an earlier fire")
            if free:
                self._claim_and_run(free, source, start_at)
        except ShardcronError as exc:  # registry faults, a broken custom strategy
            if self.stopped:
                log.debug("job %s: fire cut short by stop: %s", self.name, exc)
            else:
                self._report(None, exc)

    def _clock_ok(self) -> bool:
        """The time-diff check: compare with the registry's clock, measured once a minute."""
        limit = self.config.max_time_diff_seconds
        if limit < 0:
            return True
        now = time.time()
        if now - self._clock_checked_at > CLOCK_REFRESH_SECONDS:
            self._clock_offset = self.registry.server_time(self.paths.system_time) - time.time()
            self._clock_checked_at = now
        if abs(self._clock_offset) <= limit:
            return True
        error = ClockSkewError(
            f"job {self.name!r}: local clock differs from the registry's by "
            f"{self._clock_offset:+.1f}s, more than maxTimeDiffSeconds={limit}; sync this host's "
            "clock (NTP) or raise maxTimeDiffSeconds"
        )
        return self._report(None, error)  # a THROW handler aborts this fire, as in ElasticJob

    def reconcile(self) -> bool:
        """Leader: flag resharding if an item is assigned to an instance that is gone."""
        cache, paths, cfg = self.cache, self.paths, self.config
        if self.stopped or not self._is_leader() or sharding.is_necessary(cache, paths):
            return False
        if cfg.static_sharding and sharding.has_sharding(cache, paths):
            return False
        live = set(membership.live_instances(cache, paths))
        owners = {sharding.owner(cache, paths, i) for i in range(cfg.sharding_total_count)}
        gone = sorted(o for o in owners if o is not None and o not in live)
        if not gone:
            return False
        log.warning("job %s: items assigned to gone instances %s; resharding", self.name, gone)
        sharding.set_flag(self.registry, paths)
        return True

    def _schedule_reconcile(self) -> None:
        minutes = self.config.reconcile_interval_minutes
        if minutes < 1 or self.stopped:
            return

        def tick() -> None:
            self._guarded(self.reconcile, "reconcile")
            self._schedule_reconcile()

        self.host.call_later(minutes * 60, lambda: self.host.coordinate(tick))

    def _await_sharding(self) -> bool:
        cache, paths = self.cache, self.paths
        deadline = time.monotonic() + SHARDING_WAIT_SECONDS
        resharded = False
        while True:
            with self._changed:
                seen = self._events_seen
            if not sharding.is_necessary(cache, paths):
                return True
            available = membership.available_instances(cache, paths)
            if not available:
                return True
            if not resharded and self._is_leader() and not sharding.is_processing(cache, paths):
                strategy = resolve_strategy(self.config.job_sharding_strategy_type)
                total = self.config.sharding_total_count
                plan = sharding.reshard(self.registry, cache, paths, total, available, strategy)
                resharded = plan is not None  # done: wait for the cache to show the result
                if plan is not None:
                    self._emit(
                        Resharded(job_name=self.name, instance=self.instance, assignment=plan)
                    )
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning(
                    "job %s: resharding did not finish in %.0fs; fire skipped",
                    self.name,
                    SHARDING_WAIT_SECONDS,
                )
                return False
            with self._changed:
                if self._events_seen == seen:
                    self._changed.wait(min(left, 0.5))

    def _fire_items(self, only: list[int] | None) -> list[int]:
        cache, paths, cfg = self.cache, self.paths, self.config
        if not membership.server_enabled(cache, paths, self.ip):
            return []
        if not cache.exists(paths.instance(self.instance)):
            return []
        items = sharding.local_items(cache, paths, self.instance, cfg.sharding_total_count)
        if only is not None:
            items = [i for i in items if i in only]
        items = [i for i in items if not cache.exists(paths.disabled(i))]
        if cfg.failover:
            taken = failover.items_failed_over_elsewhere(cache, paths, items)
            taken |= set(failover.queued(cache, paths))
            items = [i for i in items if i not in taken]
        return items

    def _reserve(self, items: list[int]) -> tuple[list[int], list[int]]:
        """Mark items as running here *before* claiming them, so that no registry scan can
        mistake a claim in flight for a stale one; returns (reserved, already running)."""
        with self._changed:
            busy = [i for i in items if i in self._running]
            free = [i for i in items if i not in self._running]
            self._running.update(free)
            if free:
                self._idle.clear()
        return free, busy

    def _release(self, items: list[int]) -> None:
        with self._changed:
            self._running.difference_update(items)
            if not self._running:
                self._idle.set()

    def _claim_and_run(
        self, items: list[int], source: ExecutionSource, start_at: float | None = None
    ) -> None:
        cfg = self.config
        session = self.registry.session_id
        claim = execution.Claim(items=[] if cfg.monitor_execution else list(items))
        try:
            if cfg.monitor_execution:
                claim = execution.claim(
                    self.registry,
                    self.cache,
                    self.paths,
                    items,
                    self.instance,
                    persistent=cfg.failover,
                )
        finally:  # on failure nothing was claimed: free everything
            self._release([i for i in items if i not in claim.items])
        if claim.contended:
            self._skip(claim.contended, "still running on another instance")
        if claim.items:
            fire = _Fire(claim.items, claim, source, session)
            wait = 0.0 if start_at is None else start_at - time.time()
            if wait > 0:  # claimed ahead of time: start the items on schedule
                self.host.call_later(wait, lambda: self.host.submit(lambda: self._dispatch(fire)))
            else:
                self._dispatch(fire)

    def _skip(self, items: list[int], reason: str) -> None:
        log.info("job %s: items %s skipped: %s", self.name, items, reason)
        self._emit(
            ItemsSkipped(
                job_name=self.name,
                instance=self.instance,
                items=tuple(items),
                reason=reason,
                misfire=self.config.misfire,
            )
        )
        if self.config.misfire:
            self._misfired.update(items)
            if self.config.monitor_execution:
                execution.mark_misfire(self.registry, self.cache, self.paths, items)

    def _dispatch(self, fire: _Fire) -> None:
        cfg = self.config
        params = cfg.sharding_parameters()
        tid = task_id(self.name, fire.items, self.ip, self.instance.split(INSTANCE_DELIMITER)[-1])
        contexts: deque[ShardingContext] = deque(
            ShardingContext(
                job_name=self.name,
                task_id=tid,
                sharding_total_count=cfg.sharding_total_count,
                job_parameter=cfg.job_parameter,
                sharding_item=item,
                sharding_parameter=params.get(item),
                fencing_token=fire.claim.token,
                source=fire.source,
                _claim_check=self._claim_check(item, fire.claim.token),
                _keep_going=self._keep_going,
            )
            for item in fire.items
        )
        fire.context = FireContext(
            job_name=self.name,
            task_id=tid,
            instance=self.instance,
            sharding_total_count=cfg.sharding_total_count,
            job_parameter=cfg.job_parameter,
            items={item: params.get(item) for item in fire.items},
            source=fire.source,
        )
        self._fire_status(fire, FireState.TASK_STAGING)
        for listener in self.listeners:
            self._call_listener(listener.before_job_executed, fire.context)
        self._fire_status(fire, FireState.TASK_RUNNING)
        lanes = min(len(contexts), self.workers)
        fire.pending = lanes

        def lane() -> None:
            while True:
                try:
                    ctx = contexts.popleft()
                except IndexError:
                    break
                error = self._run_item(ctx)
                if error is not None:
                    with fire.lock:
                        fire.errors[ctx.sharding_item] = error
            with fire.lock:
                fire.pending -= 1
                last = fire.pending == 0
            if last:
                self._finish(fire)

        for _ in range(lanes - 1):
            self.host.submit(lane)
        lane()

    def _keep_going(self) -> bool:
        return not self.stopped and not sharding.is_necessary(self.cache, self.paths)

    def _claim_check(self, item: int, token: int) -> Callable[[], bool]:
        if not self.config.monitor_execution:
            return lambda: not self.stopped
        return lambda: execution.is_current(self.registry, self.paths, item, token)

    def _fire_status(self, fire: _Fire, state: FireState, message: str = "") -> None:
        assert fire.context is not None
        self._emit(
            FireStatus(
                job_name=self.name,
                instance=self.instance,
                task_id=fire.context.task_id,
                items=tuple(fire.items),
                source=fire.source,
                state=state,
                message=message,
            )
        )

    def _report(self, ctx: ShardingContext | None, error: BaseException) -> bool:
        """Hand ``error`` to the job's error handler; False if the handler raised (THROW).

        Nothing a handler does may leave the runtime half-way: it is always caught here.
        """
        try:
            self.error_handler(self.name, ctx, error)
        except Exception as raised:  # handlers are user code
            if raised is not error:
                log.exception("job %s: the error handler itself failed", self.name)
            return False
        return True

    def _call_listener(self, hook: Callable[[FireContext], None], context: FireContext) -> None:
        try:
            hook(context)
        except Exception as exc:  # noqa: BLE001 - a listener's failure must not stop the fire
            self._report(None, exc)

    def _run_item(self, ctx: ShardingContext) -> BaseException | None:
        self._emit(ItemStarted(job_name=self.name, instance=self.instance, context=ctx, ip=self.ip))
        started = time.time()
        error: BaseException | None = None
        try:
            self.runner(ctx)
        except Exception as exc:  # noqa: BLE001 - a user's failure fails its item only
            error = exc
            self._report(ctx, exc)
        self._emit(
            ItemFinished(
                job_name=self.name,
                instance=self.instance,
                context=ctx,
                ip=self.ip,
                started_at=started,
                error=error,
            )
        )
        return error

    def _finish(self, fire: _Fire) -> None:
        paths = self.paths
        try:
            extra: list[Op] = []
            if fire.source is ExecutionSource.FAILOVER:
                for item in fire.items:
                    extra.extend(failover.complete_ops(self.cache, paths, item))
            if self.config.monitor_execution:
                mine = fire.claim.items
                if self.registry.session_id != fire.session:
                    # Our session expired mid-run: the items may belong to someone else now.
                    mine = [
                        i
                        for i in mine
                        if execution.is_current(self.registry, paths, i, fire.claim.token)
                    ]
                    extra = extra if mine else []
                execution.complete(self.registry, paths, mine, extra)
        except RegistryError as exc:
            self._report(None, exc)
        finally:
            self._release(fire.items)
        if fire.context is not None:
            for listener in self.listeners:
                self._call_listener(listener.after_job_executed, fire.context)
            if fire.errors:
                failed = "; ".join(f"item {i}: {e}" for i, e in sorted(fire.errors.items()))
                self._fire_status(fire, FireState.TASK_ERROR, failed)
            else:
                self._fire_status(fire, FireState.TASK_FINISHED)
        if fire.source is not ExecutionSource.FAILOVER:
            self._maybe_rerun_misfire(fire.items)
        if self.config.failover and failover.queued(self.cache, paths):
            self.host.coordinate(lambda: self._failover_pass(phase=1))

    # -- misfire --------------------------------------------------------------------------

    def _maybe_rerun_misfire(self, items: list[int]) -> None:
        if not self.config.misfire or self.stopped:
            return
        cache, paths = self.cache, self.paths
        flagged = set(execution.misfired(cache, paths, items)) | (self._misfired & set(items))
        if not flagged or sharding.is_necessary(cache, paths):
            return
        mine = set(
            sharding.local_items(cache, paths, self.instance, self.config.sharding_total_count)
        )
        with self._changed:  # called from two threads: only one may take an item
            ready = sorted(
                i
                for i in flagged & mine
                if i not in self._running and not cache.exists(paths.running(i))
            )
            self._misfired.difference_update(ready)
        if not ready:
            return

        def rerun() -> None:
            try:
                taken = self._take_misfire_flags(ready)
            except RegistryError as exc:
                self._report(None, exc)
                return
            if taken:
                log.info("job %s: running misfired items %s", self.name, taken)
                self.fire(ExecutionSource.MISFIRE, only=taken)

        self.host.submit(rerun)

    def _take_misfire_flags(self, items: list[int]) -> list[int]:
        """Delete the items' misfire flags; only items whose flag *we* deleted re-run, so
        two paths noticing the same misfire cannot both run it."""
        if not self.config.monitor_execution:
            return items  # flags live only in this process
        taken = []
        for item in items:
            try:
                self.registry.transaction([Delete(self.paths.misfire(item))])
                taken.append(item)
            except TransactionError:
                log.debug("job %s: misfire of item %d already handled", self.name, item)
        return taken

    # -- failover (coordinator thread) -----------------------------------------------------

    def _failover_pass(self, phase: int) -> None:
        """Claim queued failover items: own share first, then, after a grace, the rest."""
        cache, paths, cfg = self.cache, self.paths, self.config
        if not cfg.failover or self.stopped or self._suspended:
            return
        if not membership.server_enabled(cache, paths, self.ip):
            return
        queue = failover.queued(cache, paths)
        if not queue:
            return
        available = membership.available_instances(cache, paths)
        mine = failover.share(queue, available, self.instance)
        idle = not self._running
        if phase == 0:
            # Leave this instance's share to idle ones only if there are any to take it.
            todo = mine if idle or not self._anyone_idle(available) else []
        elif phase == 1:
            todo = queue if idle else mine
        else:
            todo = queue
        for item in todo:
            if item in failover.queued(cache, paths):
                self._claim_failover(item)
        if phase < 2 and failover.queued(cache, paths):
            self.host.call_later(
                FAILOVER_GRACE_SECONDS,
                lambda: self.host.coordinate(lambda: self._failover_pass(phase + 1)),
            )

    def _anyone_idle(self, instances: list[str]) -> bool:
        """Whether some instance runs none of its items (as far as the cache shows)."""
        cache, paths, total = self.cache, self.paths, self.config.sharding_total_count
        busy = {
            sharding.owner(cache, paths, i) for i in range(total) if cache.exists(paths.running(i))
        }
        return any(instance not in busy for instance in instances if instance != self.instance)

    def _claim_failover(self, item: int) -> None:
        reserved, _ = self._reserve([item])
        if not reserved:
            return  # running here already; its completion re-checks the queue
        extra = failover.claim_ops(self.paths, item, self.instance)
        try:
            claim = execution.claim(
                self.registry,
                self.cache,
                self.paths,
                [item],
                self.instance,
                persistent=True,
                extra=extra,
                trust_cache=False,
            )
        except TransactionError:
            self._release([item])
            return  # another instance took it first
        except RegistryError:
            self._release([item])
            raise
        if not claim.items:
            self._release([item])
            # Running again already (its owner claimed it): the queue entry is satisfied.
            self.registry.delete(self.paths.failover_item(item))
            return
        log.warning("job %s: took over item %d from a lost instance", self.name, item)
        self._emit(FailoverClaimed(job_name=self.name, instance=self.instance, item=item))
        fire = _Fire([item], claim, ExecutionSource.FAILOVER, self.registry.session_id)
        self.host.submit(lambda: self._dispatch(fire))


def _trigger(config: JobConfig) -> CronTrigger | None:
    return CronTrigger.parse(config.cron, config.time_zone) if config.cron else None
