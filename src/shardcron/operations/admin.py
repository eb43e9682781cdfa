"""Operating jobs from outside: the Python twin of ElasticJob's lifecycle API.

An :class:`Admin` works on one registry namespace and needs no worker: it reads the
znodes workers write and steers them by writing the znodes they watch, exactly as the
Java lifecycle API and console do, so either tool can operate jobs run by either side:

* trigger: delete ``trigger``, then create ``trigger/{instance}`` for every online instance;
* disable / enable: ``servers/{ip}`` = ``DISABLED`` / ``ENABLED`` (one job or all jobs of an IP);
* shutdown: delete ``instances/{id}``; the instance stops the job when it sees that;
* item disable / enable: create / delete ``sharding/{item}/disabled``;
* config update: rewrite ``config`` (validated first), never the ``/{job}`` node value;
* remove: a job's whole subtree, or a server's instance and ``servers/{ip}`` nodes.

What the reads return, and how a job's status is worked out from its znodes, is
:mod:`shardcron.operations.jobstats` (the statistics); this module owns the operations and the
config update, and re-exports the view types, so ``from shardcron.operations.admin import
JobStatus`` works.

Reads go to the registry (like Java's lifecycle API), a handful of round trips per job;
``Admin(registry, cached=True)`` instead keeps a watched copy of the namespace, so a
long-lived reader such as the web console answers every read without a round trip.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Self

from shardcron.config.drift import apply_settings
from shardcron.config.job import JobConfig
from shardcron.coordination.paths import JobPaths
from shardcron.errors import (
    BadVersionError,
    ConfigError,
    JobNotFoundError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    ServerNotFoundError,
    ShardcronError,
    TransactionError,
)
from shardcron.model import ServerStatus
from shardcron.observability.dump import dump_job
from shardcron.operations.jobstats import (
    InstanceInfo,
    ItemInfo,
    ItemStatus,
    JobBrief,
    JobOverview,
    JobStatus,
    Reader,
    ServerBrief,
    ServerJob,
    item_status,
    job_status,
    next_fire_of,
    node_text,
    read_brief,
    read_instance_record,
    read_instances,
    read_items,
    read_leader,
    read_server_values,
)
from shardcron.registry import Registry, SetData, TreeCache

# The view types and errors are re-exported: operators import them from here.
__all__ = [
    "Admin",
    "InstanceInfo",
    "ItemInfo",
    "ItemStatus",
    "JobBrief",
    "JobNotFoundError",
    "JobOverview",
    "JobStatus",
    "ServerBrief",
    "ServerJob",
    "ServerNotFoundError",
    "Write",
    "item_status",
    "job_status",
]


# Workers still finishing a fire may add nodes while a job's tree is being deleted.
_REMOVE_ATTEMPTS = 10
# Keys the registry config may hold that JobConfig does not model; an update keeps them.
_CARRIED_KEYS = ("jobExtraConfigurations",)
# Settings that name the job's code or identity: changing them in place makes no sense.
_FIXED_SETTINGS = {
    "jobName": "cannot be changed; a renamed job is a new job",
    "type": "cannot be changed in the registry; it is part of the job's code",
    "callable": "cannot be changed in the registry; it is the job's code (the /{job} node)",
}


@dataclass(frozen=True, slots=True)
class Write:
    """One change an operation made: ``value`` None means the node was deleted."""

    path: str
    value: str | None


class Admin:
    """Lifecycle operations and statistics over one registry namespace."""

    def __init__(self, registry: Registry, *, cached: bool = False) -> None:
        self.registry = registry
        self._cache: TreeCache | None = registry.tree_cache("/") if cached else None
        self._read: Reader = self._cache if self._cache is not None else registry

    def close(self) -> None:
        """Drop the watched copy, if any; the registry stays open (it is the caller's)."""
        if self._cache is not None:
            self._cache.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- jobs -----------------------------------------------------------------------------

    def job_names(self) -> list[str]:
        """Every job with a config, sorted."""
        return [job for job in self._read.children("/") if self._stored(job) is not None]

    def jobs(self) -> list[JobBrief]:
        """Brief info of every job, sorted by name; namespace children without config are not jobs."""
        briefs = []
        for job in self._read.children("/"):
            text = self._stored(job)
            if text is not None:
                briefs.append(read_brief(self._read, job, self._parse(job, text)))
        return briefs

    def job(self, job: str) -> JobBrief:
        return read_brief(self._read, job, self.config(job))

    def config(self, job: str) -> JobConfig:
        return self._parse(job, self.config_yaml(job))

    def config_yaml(self, job: str) -> str:
        """The ``config`` node's text, exactly as stored."""
        text = self._stored(job)
        if text is None:
            raise self._not_found(job)
        return text

    def overview(self, job: str) -> JobOverview:
        config = self.config(job)
        paths = JobPaths(job)
        live = self._read.children(paths.instances)
        servers = read_server_values(self._read, paths)
        leader = read_leader(self._read, paths)
        instances = tuple(read_instances(self._read, paths, live, servers, leader))
        items = tuple(
            read_items(self._read, paths, live, {i.instance_id: i.server_ip for i in instances})
        )
        queue = (int(n) for n in self._read.children(paths.failover_items) if n.isdigit())
        return JobOverview(
            brief=read_brief(self._read, job, config, live, servers, items),
            config=config,
            leader=leader,
            instances=instances,
            items=items,
            resharding=self._read.get(paths.sharding_necessary) is not None,
            failover_queue=tuple(sorted(queue)),
        )

    def instances(self, job: str) -> list[InstanceInfo]:
        """The job's live instances, by id."""
        self.config_yaml(job)
        paths = JobPaths(job)
        live = self._read.children(paths.instances)
        return read_instances(
            self._read,
            paths,
            live,
            read_server_values(self._read, paths),
            read_leader(self._read, paths),
        )

    def sharding(self, job: str) -> list[ItemInfo]:
        """Every ``sharding/{item}`` of the job, by item number."""
        self.config_yaml(job)
        paths = JobPaths(job)
        return read_items(self._read, paths, self._read.children(paths.instances), {})

    def next_fire(self, job: str, after: datetime | None = None) -> datetime | None:
        """The job's next fire after ``after`` (default now), in UTC; None if it has no cron."""
        return next_fire_of(self.config(job), after)

    def leader(self, job: str) -> str | None:
        self.config_yaml(job)
        return read_leader(self._read, JobPaths(job))

    def dump(self, job: str, *, mask: bool = True) -> str:
        """The job's subtree as the dump service sends it (see :mod:`shardcron.observability.dump`)."""
        if self._read.get(JobPaths(job).root) is None:
            raise self._not_found(job)
        return dump_job(self._read, job, mask=mask)

    # -- servers --------------------------------------------------------------------------

    def servers(self) -> list[ServerBrief]:
        """Every server IP of every job, by IP (instances are grouped by their YAML ``serverIp``)."""
        jobs_of: dict[str, list[str]] = {}
        disabled: dict[str, int] = {}
        instances_of: dict[str, set[str]] = {}
        for job in self._read.children("/"):
            paths = JobPaths(job)
            for ip, value in read_server_values(self._read, paths).items():
                jobs_of.setdefault(ip, []).append(job)
                disabled[ip] = disabled.get(ip, 0) + (value.upper() == ServerStatus.DISABLED)
            for instance in self._read.children(paths.instances):
                ip, _ = read_instance_record(self._read, paths, instance)
                if ip in jobs_of:  # Java counts instances only of IPs that have a server node
                    instances_of.setdefault(ip, set()).add(instance)
        return [
            ServerBrief(
                server_ip=ip,
                instances=tuple(sorted(instances_of.get(ip, ()))),
                job_names=tuple(jobs_of[ip]),
                disabled_jobs_num=disabled[ip],
            )
            for ip in sorted(jobs_of)
        ]

    def server_jobs(self, ip: str) -> list[ServerJob]:
        """The jobs that have ``servers/{ip}``, by name."""
        result = []
        for job in self._read.children("/"):
            paths = JobPaths(job)
            value = self._read.get(paths.server(ip))
            if value is None:
                continue
            on_ip = [
                i
                for i in self._read.children(paths.instances)
                if read_instance_record(self._read, paths, i)[0] == ip
            ]
            disabled = node_text(value).upper() == ServerStatus.DISABLED
            status = JobStatus.DISABLED if disabled else JobStatus.OK
            result.append(ServerJob(job_name=job, status=status, instance_count=len(on_ip)))
        if not result:
            raise ServerNotFoundError(ip)
        return result

    # -- operations -----------------------------------------------------------------------

    def trigger(self, job: str) -> list[Write]:
        """Ask every online instance to run the job now; returns the trigger nodes made."""
        self.config_yaml(job)
        paths = JobPaths(job)
        self.registry.delete(paths.triggers, recursive=True)
        writes = []
        for instance in self.registry.children(paths.instances):
            # Already there if another operator triggered meanwhile: one request is enough.
            with contextlib.suppress(NodeExistsError):
                self.registry.create(paths.trigger(instance))
            writes.append(Write(paths.trigger(instance), ""))
        return writes

    def disable(self, job: str | None = None, server: str | None = None) -> list[Write]:
        """Disable a job on all its servers, on one server, or a server in every job."""
        return self._set_servers(job, server, ServerStatus.DISABLED)

    def enable(self, job: str | None = None, server: str | None = None) -> list[Write]:
        return self._set_servers(job, server, ServerStatus.ENABLED)

    def shutdown(self, job: str | None = None, server: str | None = None) -> list[Write]:
        """Stop a job on all its instances, on one server's, or a server's in every job.

        Each instance stops the job when its ``instances/{id}`` node is deleted; it does
        not come back until the worker is restarted.
        """
        writes = []
        for name in self._targets(job, server):
            paths = JobPaths(name)
            leader = self.registry.get(paths.election_instance)
            # The leader first: once it has stopped, nobody reshards for the others leaving.
            live = sorted(
                self.registry.children(paths.instances), key=lambda i: i.encode() != leader
            )
            for instance in live:
                if (
                    server is None
                    or read_instance_record(self.registry, paths, instance)[0] == server
                ):
                    self.registry.delete(paths.instance(instance))
                    writes.append(Write(paths.instance(instance), None))
        return writes

    def remove_server(self, server: str, job: str | None = None) -> list[Write]:
        """Shut down the server's instances and delete its ``servers/{ip}`` node, in one job
        or in every job (Java's ``JobOperateAPI.remove``)."""
        writes = self.shutdown(job, server)
        for name in self._targets(job, server):
            path = JobPaths(name).server(server)
            self.registry.delete(path)
            writes.append(Write(path, None))
        return writes

    def remove_job(self, job: str) -> list[Write]:
        """Delete the job's whole subtree; its instances stop it first, as on a shutdown."""
        paths = JobPaths(job)
        if self.registry.stat(paths.root) is None:
            raise self._not_found(job)
        writes = self.shutdown(job) if self._stored(job) is not None else []
        for attempt in range(_REMOVE_ATTEMPTS):
            try:
                self.registry.delete(paths.root, recursive=True)
                break
            except NotEmptyError:
                # A worker wrote below the tree while it was being deleted; delete again.
                if attempt == _REMOVE_ATTEMPTS - 1:
                    raise
        writes.append(Write(paths.root, None))
        return writes

    def disable_item(self, job: str, item: int) -> list[Write]:
        """Its owner skips the item from the next fire on; no resharding happens."""
        path = JobPaths(job).disabled(self._check_item(job, item))
        self.registry.put(path, b"")
        return [Write(path, "")]

    def enable_item(self, job: str, item: int) -> list[Write]:
        path = JobPaths(job).disabled(self._check_item(job, item))
        self.registry.delete(path)
        return [Write(path, None)]

    # -- config ---------------------------------------------------------------------------

    def update_config(self, job: str, settings: Mapping[str, str]) -> JobConfig:
        """Set camelCase keys from strings (``props.NAME`` for one property), validate, write.

        Raises ConfigError naming the key for a bad value; nothing is written then.
        """
        for key in settings:
            if key in _FIXED_SETTINGS:
                raise ConfigError(key, _FIXED_SETTINGS[key], job=job)
        return self._write_config(job, lambda old: apply_settings(old, settings))

    def save_config(self, config: JobConfig) -> JobConfig:
        """Replace a job's config as a whole (a console's edit form), validated first."""

        def replace(old: JobConfig) -> JobConfig:
            for key in ("type", "callable"):
                if getattr(config, key) != getattr(old, key):
                    raise ConfigError(key, _FIXED_SETTINGS[key], job=old.job_name)
            return config.with_changes(executor_key=old.executor_key)

        return self._write_config(config.job_name, replace)

    def _write_config(self, job: str, change: Callable[[JobConfig], JobConfig]) -> JobConfig:
        paths = JobPaths(job)
        stat = self.registry.stat(paths.config)
        text = node_text(self.registry.get(paths.config)) if stat else None
        if stat is None or text is None:
            raise self._not_found(job)
        old = self._parse(job, text)
        new = change(old)
        # Only new problems count: a Java-written job need not pass Python-only checks
        # (e.g. a callable), and the code it names need not import on the operator's host.
        # The operator's host cannot see the names workers registered: any plain name passes
        # here, and nothing is imported (each worker rejects a name it does not know).
        known = {(p.field, p.problem) for p in old.validate_all(registered_only=False)}
        for problem in new.validate_all(registered_only=False):
            if problem.field != "callable" and (problem.field, problem.problem) not in known:
                raise problem
        written = _carry_keys(text, new.to_yaml())
        try:
            self.registry.transaction([SetData(paths.config, written.encode(), stat.version)])
        except TransactionError as exc:
            if isinstance(exc.cause, NoNodeError):
                raise self._not_found(job) from None
            if isinstance(exc.cause, BadVersionError):
                raise ShardcronError(
                    f"job {job!r}: the config changed while it was being updated; try again"
                ) from None
            raise
        return new

    # -- internals ------------------------------------------------------------------------

    def _stored(self, job: str) -> str | None:
        if not job or "/" in job:
            return None
        value = self._read.get(JobPaths(job).config)
        return None if value is None else node_text(value)

    def _parse(self, job: str, text: str) -> JobConfig:
        try:
            return JobConfig.from_yaml(text, job)
        except ConfigError as err:
            raise ConfigError(f"config.{err.field}", err.problem, job=job) from None

    def _not_found(self, job: str) -> JobNotFoundError:
        return JobNotFoundError(job, self.registry.namespace, self.job_names())

    def _targets(self, job: str | None, server: str | None) -> list[str]:
        """The jobs an operation on (job, server) touches; raises for unknown names."""
        if job is None and server is None:
            raise ConfigError("target", "name a job, a server IP, or both")
        if job is not None:
            self.config_yaml(job)
            if server is not None and self.registry.get(JobPaths(job).server(server)) is None:
                known = self.registry.children(JobPaths(job).servers)
                raise ServerNotFoundError(server, job, known)
            return [job]
        assert server is not None
        jobs = [
            name
            for name in self.registry.children("/")
            if self.registry.get(JobPaths(name).server(server)) is not None
        ]
        if not jobs:
            raise ServerNotFoundError(server)
        return jobs

    def _set_servers(
        self, job: str | None, server: str | None, status: ServerStatus
    ) -> list[Write]:
        writes = []
        for name in self._targets(job, server):
            paths = JobPaths(name)
            ips = [server] if server is not None else self.registry.children(paths.servers)
            for ip in ips:
                self.registry.put(paths.server(ip), status.encode())
                writes.append(Write(paths.server(ip), str(status)))
        return writes

    def _check_item(self, job: str, item: int) -> int:
        total = self.config(job).sharding_total_count
        if not 0 <= item < total:
            raise ConfigError(
                "item",
                f"{item} is out of range 0..{total - 1} (shardingTotalCount is {total})",
                job=job,
            )
        return item


def _top_level_blocks(text: str) -> list[tuple[str, str]]:
    """``(key, text)`` per top-level key of a block-style YAML mapping, in order.

    SnakeYAML writes a list under a key with its ``- `` at column 0, and continuation
    lines indented, so a block is a column-0 ``key:`` line and the lines up to the next one.
    """
    blocks: list[tuple[str, str]] = []
    for line in text.splitlines(keepends=True):
        starts_key = line[:1] not in ("", " ", "-", "#", "\n") and ":" in line
        if starts_key or not blocks:
            blocks.append((line.split(":", 1)[0], line))
        else:
            key, body = blocks[-1]
            blocks[-1] = (key, body + line)
    return blocks


def _carry_keys(stored: str, written: str) -> str:
    """``written`` plus the stored blocks of keys JobConfig does not model, in key order.

    Java's console writes back ``jobExtraConfigurations`` (e.g. the tracing data source)
    with every edit; an update from here must not silently drop it either.
    """
    carried = [(k, b) for k, b in _top_level_blocks(stored) if k in _CARRIED_KEYS]
    if not carried:
        return written
    blocks = _top_level_blocks(written) + carried
    return "".join(body for _, body in sorted(blocks, key=lambda kb: kb[0]))
