"""Job statistics: what a namespace's znodes say about its jobs, servers and items.

It owns the read model of the lifecycle API: the view rows (:class:`JobBrief`,
:class:`JobOverview`, :class:`ServerBrief`, ...), the statuses, and the ``read_*``
functions that build them from anything with ``get`` and ``children`` (a registry, or a
tree cache for a long-lived reader). :class:`shardcron.operations.admin.Admin` serves them.

Statistics follow the Java definitions (reference §1.14): a job is CRASHED with no
instance (STOPPED instead when its instances stopped on purpose:
:mod:`shardcron.coordination.stopmark`), DISABLED when every ``servers/*`` is DISABLED,
SHARDING_FLAG when no item has an owner or an owner is not a live instance, else OK; an item is
DISABLED, RUNNING, SHARDING_FLAG (its owner is gone) or PENDING, in that order of precedence.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Protocol

from shardcron.config.instancerecord import parse_instance_yaml
from shardcron.config.job import JobConfig
from shardcron.coordination.paths import JobPaths
from shardcron.coordination.stopmark import parse_stopped, stopped_cleanly
from shardcron.errors import ConfigError
from shardcron.model import ServerStatus, instance_ip
from shardcron.schedule.trigger import CronTrigger


class JobStatus(StrEnum):
    OK = "OK"
    CRASHED = "CRASHED"
    STOPPED = "STOPPED"  # no instance, and every item owner stopped on purpose
    DISABLED = "DISABLED"
    SHARDING_FLAG = "SHARDING_FLAG"


class ItemStatus(StrEnum):
    RUNNING = "RUNNING"
    DISABLED = "DISABLED"
    PENDING = "PENDING"
    SHARDING_FLAG = "SHARDING_FLAG"


@dataclass(frozen=True, slots=True, kw_only=True)
class JobBrief:
    """One row of the job list (Java's ``JobBriefInfo``, plus the time zone and next fire)."""

    job_name: str
    description: str
    cron: str | None
    time_zone: str | None
    instance_count: int
    sharding_total_count: int
    status: JobStatus
    next_fire: datetime | None  # UTC; None for a one-off job (no cron)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerJob:
    """A job as seen from one server (Java's ``getJobsBriefInfo(ip)``)."""

    job_name: str
    status: JobStatus  # DISABLED or OK: this server's ``servers/{ip}`` value
    instance_count: int  # instances of the job on this IP


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerBrief:
    """One server IP across all jobs (Java's ``ServerBriefInfo``)."""

    server_ip: str
    instances: tuple[str, ...]  # distinct instance ids on this IP, over all jobs
    job_names: tuple[str, ...]  # jobs with a ``servers/{ip}`` node for it
    disabled_jobs_num: int

    @property
    def instances_num(self) -> int:
        return len(self.instances)

    @property
    def jobs_num(self) -> int:
        return len(self.job_names)


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceInfo:
    """One live instance of a job."""

    instance_id: str
    server_ip: str
    labels: str | None
    server_status: ServerStatus | None  # None when its ``servers/{ip}`` node is missing
    leader: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ItemInfo:
    """One sharding item (Java's ``ShardingInfo``, plus the misfire flag and failover runner)."""

    item: int
    instance_id: str | None  # the owner in ``sharding/{item}/instance``
    server_ip: str | None
    status: ItemStatus
    failover: bool  # another instance runs it as failover now
    failover_instance: str | None
    misfire: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class JobOverview:
    """Everything about one job, read in one pass (what ``shardcron status JOB`` shows)."""

    brief: JobBrief
    config: JobConfig
    leader: str | None
    instances: tuple[InstanceInfo, ...]
    items: tuple[ItemInfo, ...]
    resharding: bool  # ``leader/sharding/necessary`` is set: the next fire reshards
    failover_queue: tuple[int, ...]  # crashed items waiting to be claimed


class Reader(Protocol):
    """What statistics read: satisfied by a Registry and by a TreeCache."""

    def get(self, path: str) -> bytes | None: ...
    def children(self, path: str) -> list[str]: ...


def read_brief(
    reader: Reader,
    job: str,
    config: JobConfig,
    live: list[str] | None = None,
    servers: dict[str, str] | None = None,
    items: Iterable[ItemInfo] | None = None,
) -> JobBrief:
    paths = JobPaths(job)
    live = reader.children(paths.instances) if live is None else live
    if items is None:
        owners = {_owner(reader, paths, n) for n in reader.children(paths.sharding)}
    else:
        owners = {i.instance_id for i in items}
    servers = read_server_values(reader, paths) if servers is None else servers
    stopped = parse_stopped(reader.get(paths.stopped))
    status = job_status(live, list(servers.values()), {o for o in owners if o}, stopped)
    # A job that will not fire here has no next fire to show.
    runs = status in (JobStatus.OK, JobStatus.SHARDING_FLAG)
    return JobBrief(
        job_name=job,
        description=config.description,
        cron=config.cron,
        time_zone=config.time_zone,
        instance_count=len(live),
        sharding_total_count=config.sharding_total_count,
        status=status,
        next_fire=next_fire_of(config, None) if runs else None,
    )


def _owner(reader: Reader, paths: JobPaths, name: str) -> str | None:
    if not name.isdigit():
        return None
    return node_text(reader.get(paths.item_instance(int(name)))) or None


def read_server_values(reader: Reader, paths: JobPaths) -> dict[str, str]:
    return {ip: node_text(reader.get(paths.server(ip))) for ip in reader.children(paths.servers)}


def read_instance_record(reader: Reader, paths: JobPaths, instance: str) -> tuple[str, str | None]:
    """``(serverIp, labels)`` from the instance YAML; the id's IP part if it has none."""
    value = reader.get(paths.instance(instance))
    try:
        record = parse_instance_yaml(node_text(value))
    except ConfigError:  # gone meanwhile, or written by a 2.x-era Java instance ("")
        return instance_ip(instance), None
    return record.server_ip, record.labels


def read_leader(reader: Reader, paths: JobPaths) -> str | None:
    return node_text(reader.get(paths.election_instance)) or None


def read_instances(
    reader: Reader, paths: JobPaths, live: list[str], servers: dict[str, str], leader: str | None
) -> list[InstanceInfo]:
    result = []
    for instance in live:
        ip, labels = read_instance_record(reader, paths, instance)
        result.append(
            InstanceInfo(
                instance_id=instance,
                server_ip=ip,
                labels=labels,
                server_status=_server_status(servers.get(ip)),
                leader=instance == leader,
            )
        )
    return result


def read_items(
    reader: Reader, paths: JobPaths, live: list[str], ips: dict[str, str]
) -> list[ItemInfo]:
    alive = set(live)
    result = []
    for name in sorted((n for n in reader.children(paths.sharding) if n.isdigit()), key=int):
        item = int(name)
        leaves = set(reader.children(paths.item(item)))
        owner = node_text(reader.get(paths.item_instance(item))) or None
        if owner is not None and owner in alive and owner not in ips:
            ips[owner] = read_instance_record(reader, paths, owner)[0]
        failover_instance = (
            node_text(reader.get(paths.failover(item))) or None if "failover" in leaves else None
        )
        result.append(
            ItemInfo(
                item=item,
                instance_id=owner,
                server_ip=None if owner is None else ips.get(owner, instance_ip(owner)),
                status=item_status(
                    disabled="disabled" in leaves,
                    running="running" in leaves,
                    orphaned=owner not in alive,
                ),
                failover="failover" in leaves,
                failover_instance=failover_instance,
                misfire="misfire" in leaves,
            )
        )
    return result


def job_status(
    instances: list[str],
    server_values: list[str],
    owners: set[str],
    stopped: set[str] | None = None,
) -> JobStatus:
    """Java's job status: CRASHED > DISABLED > SHARDING_FLAG > OK.

    As in Java, a job whose ``servers`` node has no child counts as DISABLED (every one of
    its zero servers is disabled) once it has an instance. Unlike Java, a job without
    instances whose item owners all stopped on purpose (``stopped``) is STOPPED.
    """
    if not instances:
        return JobStatus.STOPPED if stopped_cleanly(owners, stopped or set()) else JobStatus.CRASHED
    if all(value == ServerStatus.DISABLED for value in server_values):
        return JobStatus.DISABLED
    if not owners or not owners <= set(instances):
        return JobStatus.SHARDING_FLAG
    return JobStatus.OK


def item_status(*, disabled: bool, running: bool, orphaned: bool) -> ItemStatus:
    if disabled:
        return ItemStatus.DISABLED
    if running:
        return ItemStatus.RUNNING
    if orphaned:
        return ItemStatus.SHARDING_FLAG
    return ItemStatus.PENDING


def node_text(value: bytes | None) -> str:
    return "" if value is None else value.decode("utf-8", errors="replace")


def _server_status(value: str | None) -> ServerStatus | None:
    if value is None:
        return None
    return ServerStatus.DISABLED if value.upper() == ServerStatus.DISABLED else ServerStatus.ENABLED


def next_fire_of(config: JobConfig, after: datetime | None) -> datetime | None:
    if not config.cron:
        return None
    try:
        trigger = CronTrigger.parse(config.cron, config.time_zone)
    except ConfigError:
        return None  # a Java cron we cannot read: the job list still shows the job
    return trigger.next_fire(after or datetime.now(UTC))
