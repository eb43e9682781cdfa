"""Job listeners: code that runs before and after each fire of a job on an instance.

A listener comes from code (``Scheduler.add_job(..., listeners=[...])``) or from the
config (``jobListenerTypes: [AUDIT]``, instantiated without arguments, one object per
job). A listener type name resolves only to a class the worker registered
(``Scheduler(listener_types={"AUDIT": AuditListener})``, the ``worker.listenerTypes``
block, or a ``module:qualname`` the job's local declaration names), never to code a
registry value names. Listeners run in ascending ``order``.

:class:`DistributeOnceListener` turns the per-instance calls into cluster-wide ones: its
``before_all_started`` runs once per fire when every item of the fire has started on
whichever instance owns it, ``after_all_completed`` once when they have all completed.

The protocol uses ElasticJob 3.x's nodes ``guarantee/{phase}/{item}`` (phase ``started``
or ``completed``) under a parent whose value is a round number. An instance *arrives* by
creating its items' nodes in one transaction that also rewrites the parent at the version
it read, so every arrival and every clearing is serialized by the parent's version: the
arrival whose transaction completes the set of the fire's items is the only one that
sees the set go from incomplete to complete. That instance runs the hook, then deletes the
round's nodes and bumps the round number in one transaction; the others wait (on a watch,
with a deadline) for the round number to move past the round they joined. A waiter that
times out clears the round itself, so one lost instance costs one round, not every round
after it. ElasticJob instead counts children and then takes a latch, and lets a waiter
leave before it knows whether the hook ran: the hook can run twice (issues #631, #2142).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from enum import StrEnum
from typing import Protocol, cast

from shardcron.config import plugins
from shardcron.coordination.paths import JobPaths
from shardcron.errors import (
    BadVersionError,
    ConfigError,
    NodeExistsError,
    NoNodeError,
    RegistryError,
    ShardcronError,
    TransactionError,
)
from shardcron.model import ExecutionSource, FireContext
from shardcron.registry import (
    Create,
    Delete,
    NodeEvent,
    Op,
    Registry,
    SessionState,
    SetData,
    TreeCache,
)

log = logging.getLogger(__name__)

DEFAULT_ORDER = 2**31 - 1


class JobListener(Protocol):
    """``before_job_executed`` runs before a fire's items start, ``after_job_executed``
    once they have all finished; listeners run in ascending ``order`` (attribute, optional).
    An exception is reported to the job's error handler and never stops the fire."""

    def before_job_executed(self, fire: FireContext) -> None: ...
    def after_job_executed(self, fire: FireContext) -> None: ...


def ordered(listeners: list[JobListener]) -> list[JobListener]:
    return sorted(listeners, key=lambda listener: getattr(listener, "order", DEFAULT_ORDER))


def load_listeners(type_refs: tuple[str, ...]) -> list[JobListener]:
    """Instantiate the listeners named in ``jobListenerTypes`` (registered names only)."""
    listeners: list[JobListener] = []
    for ref in type_refs:
        found = plugins.lookup(plugins.Kind.LISTENER, ref)
        if found is None:
            problem = plugins.name_problem(plugins.Kind.LISTENER, ref, (), registered_only=True)
            raise ConfigError("jobListenerTypes", problem or f"unknown listener {ref!r}")
        try:
            listener = found()
        except Exception as exc:
            raise ConfigError(
                "jobListenerTypes",
                f"cannot create {ref!r} without arguments: {type(exc).__name__}: {exc}",
            ) from exc
        missing = [
            hook
            for hook in ("before_job_executed", "after_job_executed")
            if not callable(getattr(listener, hook, None))
        ]
        if missing:
            raise ConfigError(
                "jobListenerTypes", f"{ref!r} has no {' or '.join(missing)}; it is not a listener"
            )
        listeners.append(cast(JobListener, listener))
    return listeners


class Phase(StrEnum):
    STARTED = "started"
    COMPLETED = "completed"


class DistributeOnceTimeoutError(ShardcronError):
    """A distributed-once round did not complete in time; its hook did not run."""


class DistributeOnceListener:
    """Base class for listeners whose hooks run once per fire across the whole cluster.

    Override :meth:`before_all_started` and :meth:`after_all_completed`. Each instance's
    fire waits in ``before_job_executed`` until the before-hook has run (so no item runs
    before it) and in ``after_job_executed`` until the after-hook has run. The hook runs
    on the instance that arrived last and gets that instance's :class:`FireContext`.

    ``started_timeout`` and ``completed_timeout`` (seconds; None waits forever) bound the
    waits; the completed wait includes other instances' item runs, so set it above your
    longest item. A timed-out round raises :class:`DistributeOnceTimeoutError` (reported to
    the error handler) and its hook does not run.

    Failover runs take part in the completed phase only (their item started in the
    original fire). Items that never run (a lost instance without failover, or disabled
    between arrivals) make that round time out. One object serves one job.
    """

    order: int = DEFAULT_ORDER

    def __init__(
        self, started_timeout: float | None = 60.0, completed_timeout: float | None = 3600.0
    ) -> None:
        self.started_timeout = started_timeout
        self.completed_timeout = completed_timeout
        self._registry: Registry | None = None
        self._paths: JobPaths | None = None
        self._cache: TreeCache | None = None
        self._changed = threading.Condition()
        self._closed = False

    def before_all_started(self, fire: FireContext) -> None:
        """Runs once per fire, cluster-wide, before any item of the fire runs."""

    def after_all_completed(self, fire: FireContext) -> None:
        """Runs once per fire, cluster-wide, after every item of the fire has completed."""

    # -- wiring (called by the runtime at job start) ---------------------------------------

    def bind(self, registry: Registry, paths: JobPaths, instance: str) -> None:
        if self._cache is not None:
            self._cache.close()
        parents = {paths.guarantee(phase) for phase in Phase}
        self._registry, self._paths, self._closed = registry, paths, False
        registry.add_session_listener(self._on_session)
        # Existence of every node (disabled items) plus the two round numbers.
        self._cache = registry.tree_cache(paths.root, self._on_change, lambda p: p not in parents)

    def unbind(self) -> None:
        """Drop the watch; fires still waiting give up. For the runtime, when the job stops."""
        if self._cache is not None:
            self._cache.close()
        self._cache = None
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def _on_change(self, _event: NodeEvent) -> None:
        with self._changed:
            self._changed.notify_all()

    def _on_session(self, state: SessionState) -> None:
        if state is SessionState.LOST:
            with self._changed:
                self._closed = True
                self._changed.notify_all()

    # -- the listener hooks ----------------------------------------------------------------

    def before_job_executed(self, fire: FireContext) -> None:
        if fire.source is ExecutionSource.FAILOVER:
            return  # the item joined the started round of its original fire
        self._meet(Phase.STARTED, fire, self.before_all_started, self.started_timeout)

    def after_job_executed(self, fire: FireContext) -> None:
        self._meet(Phase.COMPLETED, fire, self.after_all_completed, self.completed_timeout)

    def _meet(
        self,
        phase: Phase,
        fire: FireContext,
        hook: _Hook,
        timeout: float | None,
    ) -> None:
        joined, last = self._arrive(phase, fire)
        if last:
            try:
                hook(fire)
            finally:
                self._clear(phase, joined)
            return
        if not self._await_round(phase, joined, timeout):
            self._clear(phase, joined)
            raise DistributeOnceTimeoutError(
                f"job {fire.job_name}: not every item {phase} within {timeout:g}s; "
                f"the {type(self).__name__} {phase} hook did not run this fire"
            )

    # -- the protocol ----------------------------------------------------------------------

    def _bound(self) -> tuple[Registry, JobPaths, TreeCache]:
        if self._registry is None or self._paths is None or self._cache is None:
            raise ShardcronError(
                f"{type(self).__name__} is not bound to a job; the runtime binds it at start"
            )
        return self._registry, self._paths, self._cache

    def _arrive(self, phase: Phase, fire: FireContext) -> tuple[int, bool]:
        """Register ``fire``'s items; return the round joined and whether this completed it."""
        registry, paths, _ = self._bound()
        parent = paths.guarantee(phase)
        while True:
            stat = registry.stat(parent)
            if stat is None:
                with contextlib.suppress(NodeExistsError):
                    registry.create(parent, b"0")
                continue
            joined = _round(registry.get(parent))
            present = _items(registry.children(parent))
            new = sorted(set(fire.items) - present)
            ops: list[Op] = [SetData(parent, str(joined).encode(), stat.version)]
            ops += [Create(paths.guarantee_item(phase, item)) for item in new]
            try:
                registry.transaction(ops)
            except TransactionError as exc:
                if isinstance(exc.cause, BadVersionError | NodeExistsError | NoNodeError):
                    continue  # someone arrived or cleared since our read: read again
                raise
            expected = self._expected(fire)
            after = present | set(new)
            return joined, bool(new) and expected <= after and not expected <= present

    def _expected(self, fire: FireContext) -> set[int]:
        _, paths, cache = self._bound()
        return {
            item
            for item in range(fire.sharding_total_count)
            if not cache.exists(paths.disabled(item))
        }

    def _clear(self, phase: Phase, joined: int) -> None:
        """Delete round ``joined``'s nodes and start the next round, unless already done."""
        registry, paths, _ = self._bound()
        parent = paths.guarantee(phase)
        try:
            while True:
                stat = registry.stat(parent)
                if stat is None or _round(registry.get(parent)) != joined:
                    return
                doomed = sorted(_items(registry.children(parent)))
                ops: list[Op] = [SetData(parent, str(joined + 1).encode(), stat.version)]
                ops += [Delete(paths.guarantee_item(phase, item)) for item in doomed]
                try:
                    registry.transaction(ops)
                    return
                except TransactionError as exc:
                    if not isinstance(exc.cause, BadVersionError | NoNodeError):
                        raise
        except RegistryError as exc:
            log.warning("job %s: could not clear the %s round: %s", paths.job, phase, exc)

    def _await_round(self, phase: Phase, joined: int, timeout: float | None) -> bool:
        _, paths, cache = self._bound()
        parent = paths.guarantee(phase)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            # The cache may lag behind our own arrival, but never shows a round number
            # larger than the real one: "past the round we joined" is safe to trust.
            while _round(cache.get(parent)) <= joined:
                if self._closed:
                    raise ShardcronError(f"job {paths.job}: stopped while waiting for a round")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._changed.wait(left)
        return True


class _Hook(Protocol):
    def __call__(self, fire: FireContext, /) -> None: ...


def _round(value: bytes | None) -> int:
    """The round number a phase node holds; -1 when absent or not ours (ElasticJob: empty)."""
    try:
        return int(value or b"-1")
    except ValueError:
        return -1


def _items(names: list[str]) -> set[int]:
    return {int(name) for name in names if name.isdigit()}
