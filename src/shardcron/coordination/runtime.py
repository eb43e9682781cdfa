"""One job on one instance: a state machine fed by events, deciding on one thread.

Inputs, all handled on the coordinator thread: registry cache events, session changes,
timer ticks, item completions (from :mod:`shardcron.execution.lanes`) and the periodic heal tick.
Registry requests are made from there too, so no two decisions race. Kazoo, the worker
pool and the clock stay at the edges (:class:`shardcron.coordination.host.Host`), which is what lets
:mod:`shardcron.simulation` run many instances on a virtual clock with injected faults.

Coordination is level-triggered: whatever a fault left behind is found again by the
sweep of :mod:`shardcron.coordination.healing`, run on election, after every reconnect, on
membership changes and every ``healing.HEAL_SECONDS``. A request whose answer was lost is never
forgotten: the claim or completion stays pending and is resolved from what the registry holds once
the connection is back (:meth:`shardcron.coordination.firing.Firing.resolve`).

A fire reads only the local cache. It costs two round trips when the instance has items
(claim, complete) and none when it has not.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from shardcron.config.job import JobConfig
from shardcron.coordination import (
    deregistration,
    election,
    healing,
    membership,
    registration,
    sharding,
)
from shardcron.coordination.events import Event, LeaderChanged, Observer
from shardcron.coordination.firing import Firing
from shardcron.coordination.groupcommit import GroupCommit
from shardcron.coordination.host import Host
from shardcron.coordination.idleflag import IdleFlag
from shardcron.coordination.inflight import LaneHooks, LanesFactory
from shardcron.coordination.misfires import MissedFires, RepeatedLines
from shardcron.coordination.paths import JobPaths
from shardcron.errors import (
    ShardcronError,
    TransactionError,
)
from shardcron.model import ExecutionSource, item_ranges
from shardcron.registry import (
    CacheSpec,
    Create,
    EventType,
    NodeEvent,
    Op,
    Registry,
    SessionState,
    SetData,
    TreeCache,
)
from shardcron.schedule.trigger import CronTrigger

log = logging.getLogger(__name__)


# Leaves whose changes need no reaction: claims, flags, failover marks, owners, versions.
_QUIET_LEAVES = frozenset({"running", "misfire", "failover", "failovering", "instance"})


def needs_value(paths: JobPaths, path: str) -> bool:
    """Whether the cache must fetch ``path``'s value. Flags (``running``, ``misfire``, ...)
    are tracked for existence only, so watching others' claims costs no reads at all."""
    if path.endswith("/instance"):  # the leader's and the items' owners
        return True
    # Called for every node loaded and every notification: one slice, no path built.
    rel = path[len(paths.job) + 1 :]
    return rel == "" or rel == "/config" or rel.startswith("/servers/")


class JobRuntime:
    def __init__(
        self,
        config: JobConfig,
        lanes: LanesFactory,
        registry: Registry,
        instance: str,
        ip: str,
        host: Host,
        *,
        workers: int,
        lead: Callable[[], float] = lambda: 0.0,
        claim_took: Callable[[float], None] = lambda _asked: None,
        heal_every: Callable[[], float] = lambda: healing.HEAL_SECONDS,
        on_detach: Callable[[JobRuntime], None] = lambda _rt: None,
        observers: list[Observer] | None = None,
        commits: GroupCommit | None = None,
        missed: MissedFires | None = None,
        repeated: RepeatedLines | None = None,
        joins: sharding.Joins | None = None,
        departures: deregistration.Departures | None = None,
    ) -> None:
        self.config = config
        self.paths = JobPaths(config.job_name)
        self.registry = registry
        self.instance = instance
        self.ip = ip
        self.host = host
        self.workers = workers
        self.lead = lead  # how long before a fire its items are claimed
        self.claim_took = claim_took  # a fire is ready: when its claim was asked (monotonic)
        self.heal_every = heal_every  # seconds between two heal ticks
        # Shared by the process's jobs, so those due in one tick claim in one multi-op.
        self.commits = commits or GroupCommit(registry, host)
        self.missed = missed or MissedFires()  # shared by the process's jobs, as commits
        self.repeated = repeated or RepeatedLines()  # likewise
        self.joins = joins or sharding.Joins()  # likewise
        self.departures = departures or deregistration.Departures(registry, host)  # likewise
        self.on_detach = on_detach
        self.observers = observers if observers is not None else []  # the scheduler's list
        self.lanes = lanes(
            LaneHooks(
                self.emit,
                lambda fire: self.guarded(lambda: self.firing.complete(fire), "completion"),
                lambda fire: self.firing.claim_holds(fire),
                lambda fire, items: self.firing.misfires.skip(
                    items,
                    "registry connection or session lost meanwhile",
                    fire.when,
                    source=fire.source,
                ),
            )
        )
        self.firing: Firing = Firing(self, self.lanes)
        self.trigger = _trigger(config)
        self.stopped = False
        self._cache: TreeCache | None = None
        self._ready = False  # set once start() registered; earlier events describe the start
        self.registered_session = 0
        self._operator_stop = False
        self.healer = healing.Healer(self)
        self.reshard_due = False
        self.resharder = sharding.Resharder(self)
        self._deregistered = False
        # Set once deregistered (or given up on): what a stop waits for.
        self.gone = IdleFlag(is_set=False)
        self.suspended = False
        # The registry lost its data (SessionState.RESET): the job registers as a new one,
        # and its config's removal is the loss, not an operator's.
        self.registry_reset = False

    @property
    def name(self) -> str:
        return self.config.job_name

    @property
    def cache(self) -> TreeCache:
        assert self._cache is not None, "runtime not started"
        return self._cache

    @property
    def running_items(self) -> list[int]:
        return self.firing.running_items

    @property
    def idle(self) -> IdleFlag:
        return self.firing.idle

    def emit(self, event: Event) -> None:
        for observer in self.observers:
            try:
                observer(event)
            except Exception:
                log.exception("job %s: observer failed on %s", self.name, type(event).__name__)

    # -- start and stop -----------------------------------------------------------------

    def start(self) -> None:
        """Register in the 3.x order: config, server, instance, election; then run.

        Config, server and instance are written in one transaction planned from the cache
        just loaded (one round trip where ElasticJob makes a chain of them); the election
        follows on the coordinator thread. :mod:`shardcron.coordination.registration` does the same
        for many jobs at once, with these steps."""
        self.load(self.registry.tree_cache(*self.cache_spec()))
        self.register_alone()

    def register_alone(self) -> None:
        """After :meth:`load`: the first registration in its own transaction; run."""
        self.register(first=True, config_ops=self._setup_config())
        self.begin()

    def cache_spec(self) -> CacheSpec:
        """The arguments of this job's tree cache."""
        paths = self.paths
        return paths.root, self._on_node_event, lambda p: not needs_value(paths, p)

    def load(self, cache: TreeCache) -> None:
        """Take ``cache`` (loaded)."""
        self._cache = cache

    def first_registration(self) -> tuple[list[Op], bool]:
        """The ops of the first registration, planned from the cache (the config adopted
        or written), and whether they elect this instance; :meth:`registered` once they
        went through. Planned again, it follows what the cache has learnt since."""
        return self._registration_ops(first=True, config_ops=self._setup_config())

    def begin(self) -> None:
        """Registered: run."""
        self.lanes.bind(self.registry, self.paths, self.instance)
        self._ready = True
        self.host.coordinate(self._begin)
        log.info("job %s started on %s", self.name, self.instance)

    def _begin(self) -> None:
        # A registry error in this first heal must not leave the job without its timer
        # and heal tick: the tick retries what the heal left undone.
        self.guarded(lambda: self.healer.heal(full=True), "its start")
        self.firing.timer.arm()
        self.healer.arm()

    def _setup_config(self) -> list[Op]:
        """Adopt the registry's config, or return the ops that write the local one."""
        ops, effective = registration.config_to_run(self.cache, self.paths, self.config)
        if effective is not self.config:
            self.config = effective
            self.trigger = _trigger(effective)
        return ops

    def register(self, first: bool, config_ops: list[Op] | None = None) -> None:
        """Server and instance nodes (after ``config_ops``), in one transaction planned
        from the cache; after a new session the server node (persistent, maybe DISABLED
        by an operator) is written only if it is missing. If the cache was behind a
        concurrent change (another instance registering the job), one write at a time."""
        session = self.registry.session_id
        if self.registry_reset:
            first, config_ops = True, self._setup_config()
        ops, elect = self._registration_ops(first, config_ops)
        try:
            self.registry.transaction(ops)
        except TransactionError as exc:
            log.debug("job %s: registration raced (%s); one write at a time", self.name, exc)
            self._register_one_by_one(ops, not self.config.disabled)
            elect = False  # left to the first heal, as for any job that has a leader
        self.registered(session, elect)
        self.registry_reset = False

    def _registration_ops(self, first: bool, config_ops: list[Op] | None) -> tuple[list[Op], bool]:
        paths, enabled = self.paths, not self.config.disabled
        ops = list(config_ops or [])
        if first or not self.cache.exists(paths.server(self.ip)):
            ops += membership.server_ops(self.cache, paths, self.ip, enabled)
        ops += membership.instance_ops(self.cache, paths, self.instance, self.ip)
        # A job nobody leads yet (a new one): the election and the resharding flag its
        # leader sets go last in the same transaction, the 3.x order kept.
        elect = first and enabled and election.leader(self.cache, paths) is None
        return ops + (self._election_ops() if elect else []), elect

    def registered(self, session: int, elect: bool) -> None:
        """The registration sent in ``session`` went through (``elect``: it made this
        instance the leader)."""
        self.registered_session = session
        if elect:
            log.info("job %s: %s is the leader", self.name, self.instance)
            self.reshard_due = True
            leader = LeaderChanged(job_name=self.name, instance=self.instance, leader=True)
            self.host.coordinate(lambda: self.emit(leader))

    def _election_ops(self) -> list[Op]:
        """Create ``leader/election/instance`` and ``leader/sharding/necessary`` (what
        :meth:`elect` and :meth:`flag_resharding` write), with the parents missing."""
        paths, cache = self.paths, self.cache
        flags = (paths.election_instance, paths.sharding_necessary)
        parents = [paths.leader, *(flag.rsplit("/", 1)[0] for flag in flags)]
        ops: list[Op] = [Create(node) for node in parents if not cache.exists(node)]
        ops.append(Create(paths.election_instance, self.instance.encode(), ephemeral=True))
        if not cache.exists(paths.sharding_necessary):
            ops.append(Create(paths.sharding_necessary))
        return ops

    def _register_one_by_one(self, ops: list[Op], enabled: bool) -> None:
        paths = self.paths
        for op in ops:
            if op.path == paths.server(self.ip):
                membership.register_server(self.registry, paths, self.ip, enabled)
            elif op.path == paths.instance(self.instance):
                membership.register_instance(self.registry, paths, self.instance, self.ip)
            elif isinstance(op, Create | SetData) and op.path in (paths.root, paths.config):
                self.registry.put(op.path, op.data)

    def begin_stop(self, operator: bool = False) -> None:
        """No new fires, no new claims; deregister once the items running here return."""
        if self.stop_firing(operator):
            self.deregister()

    def stop_firing(self, operator: bool = False) -> bool:
        """No new fires, no new claims; True if it stopped now with no item running here
        (deregister it: alone, or with others, :mod:`shardcron.coordination.deregistration`)."""
        if self.stopped:
            return False
        self.stopped = True
        self._operator_stop = operator
        self.firing.stop()
        return not self.firing.busy

    def deregister(self) -> None:
        deregistration.deregister(self.registry, [self])

    def leave(self) -> deregistration.Leaving | None:
        """Deregistration begins: what to remove, or None if it has begun already."""
        if self._deregistered:
            return None
        self._deregistered = True
        if self._cache is not None and self.registry.connected and self.is_leader():
            self.emit(LeaderChanged(job_name=self.name, instance=self.instance, leader=False))
        return deregistration.Leaving(self.paths, self.instance, self._cache, self._operator_stop)

    def left(self) -> None:
        """Deregistration is over (done, or given up on): let go of everything."""
        self.lanes.unbind()
        if self._cache is not None:
            self._cache.close()
        self.idle.set()
        self.gone.set()
        if self._operator_stop:
            self.on_detach(self)

    # -- reacting to the registry -------------------------------------------------------

    def _on_node_event(self, event: NodeEvent) -> None:
        """On the registry's event thread: only events that call for a reaction reach the
        coordinator. A fire's own claims and completions push several events per item;
        queueing them would delay the coordinator's next fire for nothing."""
        if self._reacts_to(event):
            self.host.coordinate(lambda: self.guarded(lambda: self._handle(event), event.path))

    def _reacts_to(self, event: NodeEvent) -> bool:
        path, kind = event.path, event.type
        leaf = path.rsplit("/", 1)[-1]
        if leaf == "running" and kind is EventType.REMOVED:
            parsed = self.paths.parse_item(path)  # a misfire waiting for this run to end?
            return parsed is not None and (
                self.firing.misfires.has(parsed[0])
                or self.cache.exists(self.paths.misfire(parsed[0]))
            )
        if leaf in _QUIET_LEAVES and (leaf != "instance" or path != self.paths.election_instance):
            return False  # claims, flags, owners: nothing to do
        if leaf.isdigit() and (kind is EventType.UPDATED or path.endswith(f"/sharding/{leaf}")):
            # An item node's version bump (a claim), or a layout creating or dropping it
            # (thousands at once, on every instance): nothing in it to react to.
            return False
        if self.paths.child_name(self.paths.leases, path) is not None:
            return kind is EventType.REMOVED  # a session ended (or someone removed a lease)
        return True

    def guarded(self, fn: Callable[[], object], what: str) -> None:
        """Run a reaction; a failure (registry down, an operator's malformed config) is
        logged, never fatal: the heal tick finds whatever it left undone."""
        if not self._ready or (self.stopped and not self.firing.busy):
            return
        try:
            fn()
        except ShardcronError as exc:
            log.warning("job %s: could not react to %s: %s", self.name, what, exc)

    def _handle(self, event: NodeEvent) -> None:
        paths, path, kind = self.paths, event.path, event.type
        if path == paths.config and kind is EventType.REMOVED and self.registry_reset:
            return  # the registry lost it with everything else: registering writes it again
        if path == paths.config and kind is EventType.REMOVED:
            log.warning("job %s: removed from the registry; stopping here", self.name)
            self.begin_stop(operator=True)
        elif path == paths.config and kind is EventType.UPDATED:
            self._on_config_changed(JobConfig.from_yaml(event.data.decode(), self.name))
        elif self.stopped:
            return
        elif path == paths.instance(self.instance) and kind is EventType.REMOVED:
            self.healer.heal()  # an operator's shutdown, or the session's end: the sweep tells
        elif paths.child_name(paths.servers, path) or (
            paths.child_name(paths.instances, path) and kind is not EventType.UPDATED
        ):
            joined = kind is EventType.ADDED and paths.child_name(paths.instances, path) is not None
            if joined and path != paths.instance(self.instance):
                self.resharder.first_layout.joined_at = self.joins.last = self.host.now()
            self._on_membership()
        elif path == paths.election_instance:
            # Gone: elect. Shown: a fire that came before the cache showed this instance
            # elected may wait for its resharding.
            if kind is EventType.REMOVED:
                self.healer.heal()
            else:
                self.firing.run_pending()
        elif path == paths.trigger(self.instance) and kind is EventType.ADDED:
            self._on_trigger()
        elif paths.child_name(paths.failover_items, path) and kind is EventType.ADDED:
            self.firing.failovers.claim(phase=0)
        elif path == paths.sharding_necessary and kind is EventType.REMOVED:
            self.firing.run_pending()
        elif paths.child_name(paths.leases, path):
            self.healer.soon()  # its claims may have lost their holder (or it was ours)
        elif path.endswith("/running") and kind is EventType.REMOVED:
            parsed = paths.parse_item(path)
            if parsed:
                self.firing.misfires.rerun([parsed[0]])

    def _on_membership(self) -> None:
        enabled = membership.server_enabled(self.cache, self.paths, self.ip)
        if not enabled and self.is_leader():
            log.info("job %s: server %s disabled; giving up leadership", self.name, self.ip)
            election.abdicate(self.registry, self.paths)
            self.emit(LeaderChanged(job_name=self.name, instance=self.instance, leader=False))
            return
        if self.is_leader():
            self.flag_resharding()
        self.healer.heal()

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
            self.firing.timer.arm()
        if new.sharding_total_count < old.sharding_total_count:
            self.resharder.count_fell(self.host.now(), new.sharding_total_count)
        if new.sharding_total_count != old.sharding_total_count and self.is_leader():
            self.flag_resharding(force=True)
        self.healer.heal()

    def _on_trigger(self) -> None:
        self.registry.delete(self.paths.trigger(self.instance))
        if self.firing.running:
            log.info(
                "job %s: trigger ignored, items %s still running",
                self.name,
                item_ranges(self.running_items),
            )
            return
        self.firing.fire(ExecutionSource.NORMAL_TRIGGER)

    def on_session(self, state: SessionState) -> None:
        """Registry connection changes, on the coordinator thread."""
        if state is SessionState.RESET:
            self.registry_reset = True
            return
        if state in (SessionState.SUSPENDED, SessionState.EXPIRED):
            if state is SessionState.EXPIRED and self.is_leader():
                self.emit(LeaderChanged(job_name=self.name, instance=self.instance, leader=False))
            self.suspended = True
        elif state in (SessionState.RECONNECTED, SessionState.CONNECTED):
            self.suspended = False
            self.guarded(lambda: self.healer.heal(full=True), f"session {state}")

    def reconcile(self) -> bool:
        """Run the sweep now; True if it found something to repair (as leader: a follower
        sweeps only after a start or a new session)."""
        return self.healer.heal()

    # -- leadership and resharding ------------------------------------------------------

    def is_leader(self) -> bool:
        return election.leader(self.cache, self.paths) == self.instance

    def elect(self) -> None:
        if self.stopped or self.suspended:
            return
        if not membership.server_enabled(self.cache, self.paths, self.ip):
            return
        if election.leader(self.cache, self.paths) is not None:
            return
        if election.try_elect(self.registry, self.paths, self.instance):
            log.info("job %s: %s is the leader", self.name, self.instance)
            self.emit(LeaderChanged(job_name=self.name, instance=self.instance, leader=True))
            self.flag_resharding(force=True)

    def flag_resharding(self, force: bool = False) -> None:
        if not self.cache.exists(self.paths.config):
            return  # the job is being removed: do not re-create its nodes
        if (
            not force
            and self.config.static_sharding
            and sharding.has_sharding(self.cache, self.paths)
        ):
            return
        self.reshard_due = True  # ahead of the cache, which shows the flag a moment later
        if not sharding.is_necessary(self.cache, self.paths):
            sharding.set_flag(self.registry, self.paths)


def _trigger(config: JobConfig) -> CronTrigger | None:
    return CronTrigger.parse(config.cron, config.time_zone) if config.cron else None
