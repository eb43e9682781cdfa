"""The ``shardcron`` command. Thin: every command calls the public API.

This module owns the click group and the commands that run or check jobs (``run``, ``check``,
``demo``). The operations commands (``status``, ``trigger``, ...) are in
:mod:`shardcron.cli.operations`, ``console`` in :mod:`shardcron.cli.console`, ``zookeeper`` in
:mod:`shardcron.cli.zookeeper`, and what the commands print in :mod:`shardcron.cli.output`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime

import click

from shardcron._version import __version__
from shardcron.cli import arenas
from shardcron.cli import demo as demo_module
from shardcron.cli.console import console as console_command
from shardcron.cli.operations import OPERATIONS, _admin
from shardcron.cli.output import _fail, _interrupted, _one_line
from shardcron.cli.zookeeper import zookeeper as zookeeper_command
from shardcron.config.explain import Notes, explain_cron, explain_drift
from shardcron.config.file import check_file, read_config_file
from shardcron.config.job import JobConfig
from shardcron.config.secrecy import RedactingFilter
from shardcron.errors import ShardcronError
from shardcron.model import some
from shardcron.scheduler.launch import (
    REGISTRY_ENV,
    build_scheduler,
    choose_registry,
    describe_registry,
)


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
for operation in OPERATIONS:
    main.add_command(operation)
main.add_command(console_command)


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
    arenas.cap()  # before any thread starts: see shardcron.cli.arenas
    app, problems = read_config_file(config)
    if app is None or any(p.job is None for p in problems):
        _fail(str(next(p for p in problems if p.job is None)))
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
