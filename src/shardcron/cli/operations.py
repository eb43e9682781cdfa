"""The operations commands of ``shardcron``: ``status``, ``trigger``, ``disable``, ``enable``,
``disable-item``, ``enable-item``, ``shutdown``, ``remove``, ``config``, ``dump``, ``acl``.

They work on a registry named by ``--registry`` or ``$SHARDCRON_REGISTRY`` through
:class:`shardcron.operations.admin.Admin`; they print tables (or ``--json``), and on any error one
``error: ...`` line and exit status 1. This module also owns what they share: connecting to
that registry (:func:`_admin`), the options, and turning a failure into that one line.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

import click

from shardcron.cli.output import (
    _echo_json,
    _echo_writes,
    _fail,
    _interrupted,
    _next_fire,
    _one_line,
    _overview_text,
    _table,
)
from shardcron.config.registry import parse_registry_url
from shardcron.config.secrecy import redact_props, redact_text
from shardcron.errors import (
    ConfigError,
    ConnectionLostError,
    NoNodeError,
    RegistryError,
    ShardcronError,
)
from shardcron.observability.dump import request_dump
from shardcron.operations.admin import Admin
from shardcron.registry import Registry
from shardcron.scheduler.launch import REGISTRY_ENV

CONNECT_TIMEOUT_SECONDS = 5.0

P = ParamSpec("P")
R = TypeVar("R")


def _operation(fn: Callable[P, None]) -> Callable[P, None]:
    """Turn every expected failure into one ``error:`` line and exit status 1."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            fn(*args, **kwargs)
        except KeyboardInterrupt:
            _interrupted()
        except ShardcronError as exc:
            _fail(_one_line(str(exc)))
        except OSError as exc:  # the dump port of a worker
            _fail(_one_line(f"{type(exc).__name__}: {exc}"))

    return wrapper


def _registry_option(fn: Callable[P, R]) -> Callable[P, R]:
    return click.option(
        "--registry",
        envvar=REGISTRY_ENV,
        metavar="zk://HOST:PORT/NAMESPACE",
        help=f"The registry to operate on (default: ${REGISTRY_ENV}).",
    )(fn)


def _json_option(fn: Callable[P, R]) -> Callable[P, R]:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")(fn)


def _server_option(what: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    return click.option("--server", metavar="IP", help=what)


@contextmanager
def _admin(url: str | None) -> Iterator[Admin]:
    if not url:
        raise ConfigError(
            "registry", f"not given; pass --registry zk://HOST:PORT/NAMESPACE or set {REGISTRY_ENV}"
        )
    config = parse_registry_url(url)
    if config.is_memory:
        raise ConfigError(
            "registry", "memory:// lives inside one process; operate on zk://HOST:PORT/NAMESPACE"
        )
    if not logging.getLogger().isEnabledFor(logging.DEBUG):
        # kazoo logs every failed connection attempt; the one error line says it all.
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    from shardcron.registry.zookeeper import ZooKeeperRegistry

    registry = ZooKeeperRegistry(config, create_namespace=False)
    connected = False
    try:
        try:
            _start_within(registry, CONNECT_TIMEOUT_SECONDS)
            connected = True
        except NoNodeError:
            raise ShardcronError(
                f"namespace {config.namespace!r} not found at {config.servers}; check --registry"
            ) from None
        except RegistryError:
            raise ShardcronError(
                f"registry unreachable: no ZooKeeper answered at {config.servers} "
                f"within {CONNECT_TIMEOUT_SECONDS:.0f}s"
            ) from None
        yield Admin(registry)
    finally:
        if connected:  # else _start_within has closed it, or will once kazoo gives up
            registry.close()


def _start_within(registry: Registry, timeout: float) -> None:
    """Connect, or fail once ``timeout`` has passed; on failure the registry gets closed.

    kazoo alone may take twice as long (it finishes a pending read or retry pause before it
    gives up), so the attempt runs on a thread of its own and is abandoned at the deadline;
    that thread closes the registry when kazoo is done. Ctrl-C ends the wait at once.
    """
    outcome: list[ShardcronError | None] = []
    done = threading.Event()
    lock = threading.Lock()
    abandoned = False

    def connect() -> None:
        try:
            registry.start(timeout=timeout)
            outcome.append(None)
        except ShardcronError as exc:  # handed to the waiting thread
            outcome.append(exc)
        finally:
            with lock:
                done.set()
                close_here = abandoned
            if close_here:
                registry.close()

    threading.Thread(target=connect, name="shardcron-connect", daemon=True).start()
    finished = done.wait(timeout)
    with lock:
        abandoned = not done.is_set()
    if not finished and abandoned:
        raise ConnectionLostError(f"no answer within {timeout:.0f}s")
    if not outcome or outcome[0] is not None:
        registry.close()
        raise outcome[0] if outcome and outcome[0] else ConnectionLostError("connection failed")


def _targets(job: str | None, server: str | None) -> None:
    if job is None and server is None:
        raise ConfigError("JOB", "name a job, --server IP, or both")


def _item(text: str) -> int:
    if not text.strip().isdigit():
        raise ConfigError("ITEM", f"{text!r} is not an item number (0, 1, ...)")
    return int(text)


def _settings(pairs: Sequence[str]) -> dict[str, str]:
    settings: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError("--set", f"{pair!r} is not KEY=VALUE (e.g. shardingTotalCount=4)")
        settings[key.strip()] = value
    return settings


@click.command()
@click.argument("job", required=False)
@_server_option("Show the jobs of this server IP instead.")
@_registry_option
@_json_option
@_operation
def status(job: str | None, server: str | None, registry: str | None, as_json: bool) -> None:
    """Show all jobs and servers, one job in detail, or the jobs of one server."""
    with _admin(registry) as admin:
        if job is not None:
            overview = admin.overview(job)
            if as_json:
                _echo_json(overview)
            else:
                click.echo(_overview_text(overview))
        elif server is not None:
            server_jobs = admin.server_jobs(server)
            if as_json:
                _echo_json(server_jobs)
                return
            rows = [(j.job_name, j.status, j.instance_count) for j in server_jobs]
            click.echo(_table(("JOB", "STATUS", "INSTANCES ON " + server), rows))
        else:
            jobs, servers = admin.jobs(), admin.servers()
            if as_json:
                _echo_json({"jobs": jobs, "servers": servers})
                return
            job_rows = [
                (
                    j.job_name,
                    j.status,
                    j.instance_count,
                    j.sharding_total_count,
                    j.cron,
                    _next_fire(j),
                    j.description,
                )
                for j in jobs
            ]
            click.echo(
                _table(
                    ("JOB", "STATUS", "INSTANCES", "ITEMS", "CRON", "NEXT FIRE", "DESCRIPTION"),
                    job_rows,
                )
            )
            server_rows = [
                (s.server_ip, s.instances_num, s.jobs_num, s.disabled_jobs_num) for s in servers
            ]
            click.echo()
            click.echo(_table(("SERVER", "INSTANCES", "JOBS", "DISABLED JOBS"), server_rows))


@click.command()
@click.argument("job")
@_registry_option
@_json_option
@_operation
def trigger(job: str, registry: str | None, as_json: bool) -> None:
    """Run JOB now on every online instance (each runs its own items)."""
    with _admin(registry) as admin:
        writes = admin.trigger(job)
        if not writes:
            raise ShardcronError(f"job {job!r} has no online instance; nothing was triggered")
        if as_json:
            _echo_json(writes)
            return
        for write in writes:  # an operator wants who will run it, not the znode
            click.echo(f"triggered {job} on {write.path.rsplit('/', 1)[1]}")


@click.command()
@click.argument("job", required=False)
@_server_option("Only this server IP (alone: this server in every job).")
@_registry_option
@_json_option
@_operation
def disable(job: str | None, server: str | None, registry: str | None, as_json: bool) -> None:
    """Stop JOB from running on its servers (its items move to enabled ones)."""
    _targets(job, server)
    with _admin(registry) as admin:
        _echo_writes(admin.disable(job, server), as_json, "no server to disable")


@click.command()
@click.argument("job", required=False)
@_server_option("Only this server IP (alone: this server in every job).")
@_registry_option
@_json_option
@_operation
def enable(job: str | None, server: str | None, registry: str | None, as_json: bool) -> None:
    """Let JOB run on its servers again."""
    _targets(job, server)
    with _admin(registry) as admin:
        _echo_writes(admin.enable(job, server), as_json, "no server to enable")


@click.command("disable-item")
@click.argument("job")
@click.argument("item")
@_registry_option
@_json_option
@_operation
def disable_item(job: str, item: str, registry: str | None, as_json: bool) -> None:
    """Skip one item of JOB from the next fire on (no resharding)."""
    with _admin(registry) as admin:
        _echo_writes(admin.disable_item(job, _item(item)), as_json, "")


@click.command("enable-item")
@click.argument("job")
@click.argument("item")
@_registry_option
@_json_option
@_operation
def enable_item(job: str, item: str, registry: str | None, as_json: bool) -> None:
    """Run a disabled item of JOB again."""
    with _admin(registry) as admin:
        _echo_writes(admin.enable_item(job, _item(item)), as_json, "")


@click.command()
@click.argument("job", required=False)
@_server_option("Only the instances on this server IP (alone: in every job).")
@_registry_option
@_json_option
@_operation
def shutdown(job: str | None, server: str | None, registry: str | None, as_json: bool) -> None:
    """Stop JOB on its instances until their workers restart (items move to the others)."""
    _targets(job, server)
    with _admin(registry) as admin:
        _echo_writes(admin.shutdown(job, server), as_json, "no instance to shut down")


@click.command()
@click.argument("job", required=False)
@_server_option("Remove this server IP from JOB (alone: from every job) instead.")
@_registry_option
@_json_option
@_operation
def remove(job: str | None, server: str | None, registry: str | None, as_json: bool) -> None:
    """Delete JOB from the registry (its instances stop it), or a server's nodes."""
    _targets(job, server)
    with _admin(registry) as admin:
        if server is not None:
            _echo_writes(admin.remove_server(server, job), as_json, "")
        elif job is not None:
            _echo_writes(admin.remove_job(job), as_json, "")


@click.command()
@click.argument("job")
@click.option(
    "--set",
    "pairs",
    multiple=True,
    metavar="KEY=VALUE",
    help="Change a key (camelCase, props.NAME for a property); repeatable.",
)
@_registry_option
@_json_option
@_operation
def config(job: str, pairs: tuple[str, ...], registry: str | None, as_json: bool) -> None:
    """Show JOB's registry config, or change keys of it (validated before writing)."""
    settings = _settings(pairs)
    with _admin(registry) as admin:
        if settings:
            admin.update_config(job, settings)
            click.echo(f"updated job {job!r}: {', '.join(settings)}", err=True)
        if as_json:
            config = admin.config(job)
            _echo_json(config.with_changes(props=redact_props(config.props)))
        else:
            click.echo(redact_text(admin.config_yaml(job)), nl=False)


@click.command()
@click.argument("job")
@click.option(
    "--from",
    "source",
    metavar="HOST:PORT",
    help="Ask a worker's dump port instead of reading the registry.",
)
@click.option("--no-mask", is_flag=True, help="Show IP addresses instead of ip1, ip2, ...")
@_registry_option
@_operation
def dump(job: str, source: str | None, no_mask: bool, registry: str | None) -> None:
    """Print every node of JOB's registry subtree as 'path | value' lines."""
    if source is not None:
        host, sep, port = source.rpartition(":")
        if not sep or not port.isdigit():
            raise ConfigError("--from", f"{source!r} is not HOST:PORT")
        text = request_dump(host or "127.0.0.1", int(port), job)
        click.echo(text, nl=False)
        return
    with _admin(registry) as admin:
        click.echo(admin.dump(job, mask=not no_mask), nl=False)


@click.command()
@_registry_option
@_operation
def acl(registry: str | None) -> None:
    """Apply the registry URL's digest ACL to every node of its namespace.

    Nodes created before the digest was configured stay open to anonymous clients; run
    this once (with zk://USER:PASSWORD@HOST:PORT/NAMESPACE) to close them.
    """
    from shardcron.registry.zookeeper import ZooKeeperRegistry

    with _admin(registry) as admin:
        if not isinstance(admin.registry, ZooKeeperRegistry):
            raise ConfigError("registry", "ACLs exist on ZooKeeper only; give a zk:// URL")
        count = admin.registry.apply_digest_acl()
        click.echo(f"digest ACL applied to {count} nodes of /{admin.registry.namespace}")


OPERATIONS: tuple[click.Command, ...] = (
    status,
    trigger,
    disable,
    enable,
    disable_item,
    enable_item,
    shutdown,
    remove,
    config,
    dump,
    acl,
)
