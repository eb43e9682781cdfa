"""The ``shardcron`` command. Thin: every command calls the public API.

Operations commands (``status``, ``trigger``, ``disable``, ...) work on a registry named by
``--registry`` or ``$SHARDCRON_REGISTRY`` through :class:`shardcron.admin.Admin`; they print
tables (or ``--json``), and on any error one ``error: ...`` line and exit status 1.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, NoReturn, ParamSpec, TypeVar

import click

from shardcron import __version__
from shardcron import demo as demo_module
from shardcron.admin import Admin, JobOverview, Write
from shardcron.config import JobConfig, check_file, parse_registry_url, read_config_file
from shardcron.dump import request_dump
from shardcron.errors import (
    ConfigError,
    ConnectionLostError,
    NoNodeError,
    RegistryError,
    ShardcronError,
)
from shardcron.explain import Notes, explain_cron, explain_drift
from shardcron.launch import REGISTRY_ENV, build_scheduler, choose_registry, describe_registry
from shardcron.localzk import zookeeper as zookeeper_command
from shardcron.model import some
from shardcron.registry import Registry
from shardcron.secrecy import RedactingFilter, redact_props, redact_text
from shardcron.snakeyaml import RegistryLoader, load

CONNECT_TIMEOUT_SECONDS = 5.0

P = ParamSpec("P")
R = TypeVar("R")


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Log at DEBUG level.")
@click.version_option(__version__, "-V", "--version", prog_name="shardcron")
def main(verbose: bool) -> None:
    """shardcron: distributed, sharded, fault-tolerant scheduled jobs."""
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # job callables are imported from the working directory
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(RedactingFilter())  # no secret in a worker's or operator's log


main.add_command(zookeeper_command)


@main.command()
@click.argument("config", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--registry",
    metavar="zk://HOST:PORT/NAMESPACE",
    help="Also compare each job with the config stored in this registry.",
)
@click.option("--strict", is_flag=True, help="Exit with status 1 on warnings too.")
def check(config: str, registry: str | None, strict: bool) -> None:
    """Validate a config file; print every problem, one per line, then explain each job."""
    problems = check_file(config)
    for problem in problems:
        click.echo(problem)
    if problems:
        sys.exit(1)
    app, _ = read_config_file(config)
    jobs = app.jobs if app is not None else ()
    notes = [explain_cron(job, datetime.now(UTC)) for job in jobs]
    if registry:
        try:
            notes += _drift_notes(registry, jobs)
        except (ShardcronError, OSError) as exc:
            _fail(_one_line(str(exc)))
    warnings = [w for n in notes for w in n.warnings]
    for line in [line for n in notes for line in n.lines]:
        click.echo(line)
    for warning in warnings:
        click.echo(f"warning: {warning}")
    if warnings and strict:
        sys.exit(1)
    counted = f" ({len(warnings)} warning{'s' if len(warnings) > 1 else ''})" if warnings else ""
    click.echo(f"{config}: OK{counted}")


def _drift_notes(registry: str, jobs: Sequence[JobConfig]) -> list[Notes]:
    with _admin(registry) as admin:
        stored = set(admin.job_names())
        return [
            explain_drift(admin.config(job.job_name) if job.job_name in stored else None, job)
            for job in jobs
        ]


@main.command()
@click.argument("config", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--registry",
    envvar=REGISTRY_ENV,
    help=f"zk://HOST:PORT[,HOST:PORT]/NAMESPACE or memory:// (default: ${REGISTRY_ENV}, "
    "else the file's registry, else embedded: this process only).",
)
@click.option("--instance-id", help="Explicit instance id (default IP@-@PID).")
@click.option("--grace", type=float, help="Seconds running items get to finish on stop [30].")
@click.option("--tracing", metavar="DB_URL", help="SQLAlchemy URL for execution traces.")
@click.option("--metrics-port", type=int, help="Serve Prometheus metrics on this port.")
@click.option("--dump-port", type=int, help="Serve the dump@JOB protocol on this port.")
def run(
    config: str,
    registry: str | None,
    instance_id: str | None,
    grace: float | None,
    tracing: str | None,
    metrics_port: int | None,
    dump_port: int | None,
) -> None:
    """Run a worker with the jobs of CONFIG until SIGINT/SIGTERM.

    A job with a bad setting is reported on one line and left out; the others run.
    """
    app, problems = read_config_file(config)
    if app is None or any(p.job is None for p in problems):
        _fail(str(next(p for p in problems if p.job is None)))
    assert app is not None
    for problem in problems:
        click.echo(f"error: {problem} (job not started)", err=True)
    bad = {p.job for p in problems}
    worker = app.worker  # command-line options win over the file's worker block
    if tracing is not None:
        worker = dataclasses.replace(worker, tracing=tracing)
    if metrics_port is not None:
        worker = dataclasses.replace(worker, metrics_port=metrics_port)
    if dump_port is not None:
        worker = dataclasses.replace(worker, dump_port=dump_port)
    try:
        target = choose_registry(registry, app.registry)
        scheduler = build_scheduler(target, worker, instance_id)
        for job in app.jobs:
            if job.job_name not in bad:
                scheduler.add_job(job)
        scheduler.start()
    except ShardcronError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:  # while connecting: nothing runs yet
        _interrupted()
    for name, error in scheduler.failed.items():
        click.echo(f"error: {error} (job {name!r} not started)", err=True)
    if not scheduler.runtimes:
        _fail("no job could start")
    click.echo(
        f"shardcron worker {scheduler.instance_id}: running {some(sorted(scheduler.runtimes))}"
        f" on {describe_registry(target)}",
        err=True,
    )
    scheduler.run_forever(grace if grace is not None else worker.grace_seconds)


@main.command()
@click.option(
    "--seconds",
    default=12,
    show_default=True,
    help="How long the demo runs; one instance stops halfway through.",
)
def demo(seconds: int) -> None:
    """Embedded quick start: 3 instances share a 6-item job, then one stops."""
    logging.getLogger().setLevel(logging.WARNING)
    demo_module.run(seconds, click.echo)


# --- operations ----------------------------------------------------------------------------


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


def _interrupted() -> NoReturn:
    """Ctrl-C before anything started: one line, no traceback, no waiting for threads."""
    # The registry client's thread may still be logging its retries: "interrupted" is last.
    logging.disable(logging.CRITICAL)
    for handler in logging.getLogger().handlers:
        handler.acquire()  # a line being written finishes first; never released: we exit
    click.echo("interrupted", err=True)
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(130)


def _one_line(text: str) -> str:
    return " ".join(text.split())


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


def _to_json(value: object) -> Any:
    if isinstance(value, JobConfig):
        return load(value.to_yaml(), RegistryLoader)  # !!binary strings come back as text
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_json(each) for each in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    return value


def _echo_json(value: object) -> None:
    click.echo(json.dumps(_to_json(value), indent=2))


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [list(headers)] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def _cell(value: object) -> str:
    if value is None or value is False or value == "":
        return "-"
    if value is True:
        return "yes"
    if isinstance(value, datetime):
        return value.astimezone().isoformat(sep=" ", timespec="seconds")
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value) or "-"
    text = str(value).replace("\n", " ")
    # A control character (Java may store one, as !!binary) would act on the terminal.
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode() for ch in text)


def _echo_writes(writes: list[Write], as_json: bool, nothing: str) -> None:
    if as_json:
        _echo_json(writes)
        return
    for write in writes:
        click.echo(
            f"{write.path} deleted" if write.value is None else f"{write.path} = {write.value!r}"
        )
    if not writes:
        click.echo(nothing, err=True)


@main.command()
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
                    j.next_fire,
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


def _overview_text(view: JobOverview) -> str:
    brief, cfg = view.brief, view.config
    cron = "- (one-off: runs when triggered)" if not cfg.cron else cfg.cron
    if cfg.cron and cfg.time_zone:
        cron += f" ({cfg.time_zone})"
    facts = [
        ("job", brief.job_name),
        ("status", brief.status),
        ("description", brief.description or "-"),
        ("cron", cron),
        ("next fire", _cell(brief.next_fire)),
        ("items", brief.sharding_total_count),
        ("leader", view.leader or "-"),
        ("resharding", "pending (next fire)" if view.resharding else "no"),
        ("failover queue", _cell(view.failover_queue)),
    ]
    lines = [f"{name + ':':<16}{value}" for name, value in facts]
    owned: dict[str, list[int]] = {}
    for item in view.items:
        if item.instance_id:
            owned.setdefault(item.instance_id, []).append(item.item)
    instance_rows = [
        (
            i.instance_id,
            i.server_ip,
            i.server_status,
            i.leader,
            owned.get(i.instance_id),
        )
        for i in view.instances
    ]
    item_rows = [
        (i.item, i.status, i.instance_id, i.server_ip, i.failover_instance or i.failover, i.misfire)
        for i in view.items
    ]
    return "\n".join(
        [
            *lines,
            "",
            _table(("INSTANCE", "SERVER", "SERVER STATUS", "LEADER", "ITEMS"), instance_rows),
            "",
            _table(("ITEM", "STATUS", "INSTANCE", "SERVER", "FAILOVER", "MISFIRE"), item_rows),
        ]
    )


@main.command()
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


@main.command()
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


@main.command()
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


@main.command("disable-item")
@click.argument("job")
@click.argument("item")
@_registry_option
@_json_option
@_operation
def disable_item(job: str, item: str, registry: str | None, as_json: bool) -> None:
    """Skip one item of JOB from the next fire on (no resharding)."""
    with _admin(registry) as admin:
        _echo_writes(admin.disable_item(job, _item(item)), as_json, "")


@main.command("enable-item")
@click.argument("job")
@click.argument("item")
@_registry_option
@_json_option
@_operation
def enable_item(job: str, item: str, registry: str | None, as_json: bool) -> None:
    """Run a disabled item of JOB again."""
    with _admin(registry) as admin:
        _echo_writes(admin.enable_item(job, _item(item)), as_json, "")


@main.command()
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


@main.command()
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


@main.command()
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


@main.command()
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


@main.command()
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


# --- web console ---------------------------------------------------------------------------

CONSOLE_ADMIN_ENV = "SHARDCRON_CONSOLE_ADMIN"
CONSOLE_GUEST_ENV = "SHARDCRON_CONSOLE_GUEST"
CONSOLE_SECRET_ENV = "SHARDCRON_CONSOLE_SECRET"
CONSOLE_MIN_SECRET = 16
LOOPBACK = ("127.0.0.1", "::1", "localhost")


@main.command()
@_registry_option
@click.option("--tracing", metavar="DB_URL", help="The trace database the workers write to.")
@click.option(
    "--host", default="127.0.0.1", show_default=True, metavar="ADDRESS", help="Listen address."
)
@click.option(
    "--port", default=8899, show_default=True, type=click.IntRange(0, 65535), help="Listen port."
)
@click.option(
    "--admin",
    "admins",
    multiple=True,
    envvar=CONSOLE_ADMIN_ENV,
    metavar="USER:PASSWORD",
    help=f"An account that may act; repeatable (default: ${CONSOLE_ADMIN_ENV}). Required.",
)
@click.option(
    "--guest",
    "guests",
    multiple=True,
    envvar=CONSOLE_GUEST_ENV,
    metavar="USER:PASSWORD",
    help=f"A read-only account; repeatable (default: ${CONSOLE_GUEST_ENV}).",
)
@click.option(
    "--secret",
    envvar=CONSOLE_SECRET_ENV,
    help=f"Key that signs session cookies (default: ${CONSOLE_SECRET_ENV}, else random "
    "per start, so a restart logs everyone out).",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="A Host name the console answers to, e.g. the proxy's; repeatable "
    "(default: the listen address and localhost; '*' for any).",
)
@click.option(
    "--secure-cookies/--no-secure-cookies",
    default=None,
    help="Mark cookies Secure (default: on unless listening on loopback; always on for "
    "requests a trusted proxy says came over HTTPS).",
)
@click.option(
    "--trusted-proxy",
    "trusted_proxies",
    multiple=True,
    metavar="ADDRESS",
    help="A proxy whose X-Forwarded-For/-Proto are believed; repeatable [127.0.0.1].",
)
@_operation
def console(
    registry: str | None,
    tracing: str | None,
    host: str,
    port: int,
    admins: tuple[str, ...],
    guests: tuple[str, ...],
    secret: str | None,
    allowed_hosts: tuple[str, ...],
    secure_cookies: bool | None,
    trusted_proxies: tuple[str, ...],
) -> None:
    """Serve the web console: jobs, sharding, servers, history, and every operation."""
    try:
        import uvicorn

        from shardcron.console.app import create_app
        from shardcron.console.auth import Accounts, Role, account
    except ImportError as exc:
        raise ShardcronError(
            f"the console needs its extra ({exc.name} is missing): pip install 'shardcron[console]'"
        ) from None
    from shardcron.tracing.sql import open_engine

    accounts = Accounts(
        [account(text, Role.ADMIN, source="--admin") for text in admins]
        + [account(text, Role.GUEST, source="--guest") for text in guests]
    )
    if secret is not None and len(secret) < CONSOLE_MIN_SECRET:
        raise ConfigError("--secret", f"too short; use at least {CONSOLE_MIN_SECRET} characters")
    engine = open_engine(tracing) if tracing else None
    # The console reads from a watched copy of the namespace: a refresh costs no round trip.
    with _admin(registry) as direct, Admin(direct.registry, cached=True) as admin:
        app = create_app(
            admin,
            accounts,
            tracing=engine,
            secret=secret,
            allowed_hosts=[*LOOPBACK, host, *allowed_hosts],
            secure_cookies=host not in LOOPBACK if secure_cookies is None else secure_cookies,
        )
        where = f"http://{f'[{host}]' if ':' in host else host}:{port}/"
        click.echo(
            f"shardcron console on {where} (namespace {direct.registry.namespace!r}"
            f"{', history from ' + engine.url.render_as_string() if engine else ''})",
            err=True,
        )
        if host not in LOOPBACK:
            click.echo(
                f"warning: listening on {host} over plain HTTP; put it behind HTTPS "
                "before anyone logs in over a network, and name every Host it is reached "
                "by with --allowed-host",
                err=True,
            )
        try:
            uvicorn.run(
                app,
                host=host,
                port=port,
                log_level="warning",
                proxy_headers=True,
                forwarded_allow_ips=list(trusted_proxies) or "127.0.0.1",
            )
        finally:
            if engine is not None:
                engine.dispose()


if __name__ == "__main__":
    main()
