"""The fire path: one claimed fire's contexts, lanes, listeners, error reports, events.

The runtime claims items and hands a :class:`Fire` to :meth:`FirePath.begin`. From there
every step is decided on the coordinator thread, and every piece of user code (listeners,
the item itself, error handlers, observers of item events) runs as *work* on a worker
through :meth:`Host.execute`, whose result comes back to the coordinator. At most
``workers`` items of a fire run at once (the job's lanes). When the last item returns,
``on_done(fire)`` tells the runtime to complete the fire in the registry, and the
``after`` listeners run.

A fire claimed ahead of its second is *staged* (:meth:`FirePath.begin` with ``at``): its
lanes go to the host's timer, which hands them to workers on the second without a pass
through the coordinator, so a herd's items start while the coordinator would still be
dispatching them one by one. The first lane to start decides, under the fire's
:class:`Gate`, whether the fire starts (its claim still holds); a stop before the second
decides it will not. A fire with ``before`` listeners is not staged: they run first.

Anything an item raises, :class:`BaseException` included (``SystemExit``,
``KeyboardInterrupt``, a cancelled coroutine), fails that item only: the fire completes.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from shardcron.coordination.events import (
    Event,
    FireState,
    FireStatus,
    ItemFinished,
    ItemStarted,
    Observer,
)
from shardcron.coordination.host import Host
from shardcron.coordination.inflight import Fire, Gate, LaneHooks, LanesFactory
from shardcron.coordination.paths import JobPaths
from shardcron.execution.jobs import ItemRunner
from shardcron.execution.listeners import JobListener, ordered
from shardcron.model import FireContext, ShardingContext
from shardcron.registry import Registry

log = logging.getLogger(__name__)

ErrorHandler = Callable[[str, ShardingContext | None, BaseException], None]
Ran = list[tuple[ShardingContext, BaseException | None]]  # what a lane ran, and how it ended


def log_error(job: str, ctx: ShardingContext | None, error: BaseException) -> None:
    """The error handler of a job that names none: a log line with the traceback."""
    item = "" if ctx is None else f" item {ctx.sharding_item}"
    log.error("job %s%s failed: %s", job, item, error, exc_info=error)


def lanes_for(
    job: str,
    instance: str,
    ip: str,
    host: Host,
    runner: ItemRunner,
    *,
    observers: Sequence[Observer],
    listeners: Sequence[JobListener] = (),
    error_handler: ErrorHandler | None = None,
) -> LanesFactory:
    """The lanes of one job on one instance, for
    :class:`shardcron.coordination.runtime.JobRuntime`."""
    ordered_listeners = ordered(list(listeners))

    def build(hooks: LaneHooks) -> FirePath:
        return FirePath(
            job,
            instance,
            ip,
            host,
            runner,
            ordered_listeners,
            error_handler or log_error,
            hooks.emit,
            observers,
            hooks.on_done,
            hooks.may_start,
            hooks.on_refused,
        )

    return build


@dataclass
class FirePath:
    job: str
    instance: str
    ip: str
    host: Host
    runner: ItemRunner
    listeners: list[JobListener]
    error_handler: ErrorHandler
    emit: Callable[[Event], None]
    # Who ``emit`` hands events to (the scheduler's list): an event nobody observes is not
    # built, which saves a worker of thousands of jobs five objects a fire.
    observers: Sequence[Observer]
    on_done: Callable[[Fire], None]
    # Whether the fire's claim still holds; items refused are handed to ``on_refused``.
    may_start: Callable[[Fire], bool]
    on_refused: Callable[[Fire, list[int]], None]

    @property
    def stages(self) -> bool:
        """Whether a fire claimed ahead is staged: not when ``before`` listeners must run
        on the second, before its items."""
        return not self.listeners

    def bind(self, registry: Registry, paths: JobPaths, instance: str) -> None:
        for listener in self.listeners:
            bind = getattr(listener, "bind", None)
            if bind is not None:  # distributed listeners coordinate through the registry
                bind(registry, paths, instance)

    def unbind(self) -> None:
        for listener in self.listeners:
            unbind = getattr(listener, "unbind", None)
            if unbind is not None:
                unbind()

    def begin(
        self,
        fire: Fire,
        contexts: list[ShardingContext],
        total: int,
        parameter: str,
        lanes: int,
        at: float | None = None,
    ) -> None:
        """Start ``fire`` now, or stage it to start at ``at`` (only where :attr:`stages`)."""
        fire.context = FireContext(
            job_name=self.job,
            task_id=contexts[0].task_id,
            instance=self.instance,
            sharding_total_count=total,
            job_parameter=parameter,
            items={c.sharding_item: c.sharding_parameter for c in contexts},
            source=fire.source,
        )
        fire.waiting.extend(contexts)
        if at is not None:
            fire.gate = Gate()
            self._stage_lanes(fire, lanes, at)
            return
        self._status(fire, FireState.TASK_STAGING)

        def before() -> None:
            assert fire.context is not None
            for listener in self.listeners:
                self.call_listener(listener.before_job_executed, fire.context)
            self._status(fire, FireState.TASK_RUNNING)

        if self.listeners:  # user code: on a worker
            self.host.execute(before, lambda _: self._fill_lanes(fire, lanes))
        else:
            before()
            self._fill_lanes(fire, lanes)

    def _fill_lanes(self, fire: Fire, lanes: int) -> None:
        if fire.waiting and not self.may_start(fire):
            self._refuse(fire, [ctx.sharding_item for ctx in fire.waiting])
            return
        while fire.waiting and fire.active < lanes:
            ctx = fire.waiting.popleft()
            fire.active += 1
            self.host.execute(
                functools.partial(self._run_lane, fire, ctx),
                functools.partial(self._lane_done, fire, lanes=lanes),
                functools.partial(_returned, fire),
            )

    def _stage_lanes(self, fire: Fire, lanes: int, at: float) -> None:
        # Partials, not lambdas: a herd stages thousands of fires, and each of these runs
        # once per item on the worker as it starts (a C call, not a Python frame).
        start = functools.partial(self._start_lane, fire)
        starts: list[Callable[[], Ran | None]] = []
        while fire.waiting and len(starts) < lanes:
            starts.append(functools.partial(start, fire.waiting.popleft()))
        fire.active = len(starts)
        self.host.execute_at(
            at,
            starts,
            functools.partial(self._staged_lane_done, fire, lanes=lanes),
            fire.next_claim,
            functools.partial(_returned, fire),
        )

    def _start_lane(self, fire: Fire, ctx: ShardingContext) -> Ran | None:
        """Work, on the second: the staged fire's first lane decides whether it starts
        (and sends its first statuses); None when it does not."""
        assert fire.gate is not None
        started, decided = fire.gate.decide(self.may_start, fire)
        if not started:
            return None
        if decided and self.observers:
            self._status(fire, FireState.TASK_STAGING)
            self._status(fire, FireState.TASK_RUNNING)
        return self._run_lane(fire, ctx)

    def _staged_lane_done(self, fire: Fire, done: Ran | None, lanes: int) -> None:
        if done is not None:
            self._lane_done(fire, done, lanes)
            return
        fire.active -= 1
        if fire.active == 0 and not fire.ended:  # else: handed back by a stop already
            self._refuse(fire, list(fire.items))  # the last lane back: none of them ran

    def _refuse(self, fire: Fire, items: list[int]) -> None:
        """``items`` do not start: the claim no longer holds."""
        fire.waiting.clear()
        self.on_refused(fire, items)
        if fire.active == 0:
            self.on_done(fire)

    def _run_lane(self, fire: Fire, ctx: ShardingContext) -> Ran:
        """Work: run ``ctx``, then (where the host chains) the fire's next waiting items
        while the claim holds. ``popleft`` is atomic, so lanes never take the same item."""
        fire.started[ctx.sharding_item] = None
        done = [(ctx, self.run_item(ctx))]
        while fire.waiting and self.host.chains_items and self.may_start(fire):
            try:
                ctx = fire.waiting.popleft()
            except IndexError:
                break
            fire.started[ctx.sharding_item] = None
            done.append((ctx, self.run_item(ctx)))
        return done

    def _lane_done(self, fire: Fire, done: Ran, lanes: int) -> None:
        fire.active -= 1
        for ctx, error in done:
            if error is not None:
                fire.errors[ctx.sharding_item] = error
        if fire.waiting:
            self._fill_lanes(fire, lanes)
        elif fire.active == 0:
            self.on_done(fire)

    def end(self, fire: Fire) -> None:
        """After the registry completion: the ``after`` listeners and the fire's status."""
        if fire.context is None or (fire.gate is not None and not fire.gate.started):
            return  # never started

        def after() -> None:
            assert fire.context is not None
            for listener in self.listeners:
                self.call_listener(listener.after_job_executed, fire.context)
            if fire.errors:
                failed = "; ".join(f"item {i}: {e!r}" for i, e in sorted(fire.errors.items()))
                self._status(fire, FireState.TASK_ERROR, failed)
            else:
                self._status(fire, FireState.TASK_FINISHED)

        if self.listeners:  # user code: on a worker
            self.host.execute(after, lambda _: None)
        else:
            after()

    # -- work (worker threads) ------------------------------------------------------------

    def run_item(self, ctx: ShardingContext) -> BaseException | None:
        observed = bool(self.observers)
        if observed:
            self.emit(
                ItemStarted(job_name=self.job, instance=self.instance, context=ctx, ip=self.ip)
            )
        started = time.time()
        error: BaseException | None = None
        try:
            self.runner(ctx)
        except BaseException as exc:  # noqa: BLE001 - user code fails its item only, whatever it raises
            error = exc
            self.report(ctx, exc)
        if not observed:
            return error
        self.emit(
            ItemFinished(
                job_name=self.job,
                instance=self.instance,
                context=ctx,
                ip=self.ip,
                started_at=started,
                error=error,
            )
        )
        return error

    def report(self, ctx: ShardingContext | None, error: BaseException) -> bool:
        """Hand ``error`` to the job's error handler; False if the handler raised (THROW).

        Nothing a handler does may leave the fire half-way: it is always caught here.
        """
        try:
            self.error_handler(self.job, ctx, error)
        except BaseException as raised:
            if raised is not error:
                log.exception("job %s: the error handler itself failed", self.job)
            return False
        return True

    def call_listener(self, hook: Callable[[FireContext], None], context: FireContext) -> None:
        try:
            hook(context)
        except Exception as exc:  # noqa: BLE001 - a listener's failure must not stop the fire
            self.report(None, exc)

    def _status(self, fire: Fire, state: FireState, message: str = "") -> None:
        assert fire.context is not None
        if not self.observers:
            return
        self.emit(
            FireStatus(
                job_name=self.job,
                instance=self.instance,
                task_id=fire.context.task_id,
                items=tuple(fire.items),
                source=fire.source,
                state=state,
                message=message,
            )
        )


def _returned(fire: Fire, done: Ran | None) -> None:
    """On the worker: the items of a lane returned (one C call: lanes may end together)."""
    if done:
        fire.returned.update(dict.fromkeys([ctx.sharding_item for ctx, _ in done]))
