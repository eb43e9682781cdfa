"""The ``shardcron`` command. Thin: every command calls the public API."""

from __future__ import annotations

import logging
import sys

import click

from shardcron import demo as demo_module
from shardcron.config import check_file, load_config_file, parse_registry_url
from shardcron.errors import ShardcronError
from shardcron.scheduler import Scheduler


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", is_flag=True, help="Log at DEBUG level.")
def main(verbose: bool) -> None:
    """shardcron: distributed, sharded, fault-tolerant scheduled jobs."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


@main.command()
@click.argument("config", type=click.Path(exists=True, dir_okay=False))
def check(config: str) -> None:
    """Validate a config file; print every problem, one per line."""
    problems = check_file(config)
    for problem in problems:
        click.echo(problem)
    if problems:
        sys.exit(1)
    click.echo(f"{config}: OK")


@main.command()
@click.argument("config", type=click.Path(exists=True, dir_okay=False))
@click.option("--registry", help="zk://HOST:PORT[,HOST:PORT]/NAMESPACE or memory://")
@click.option("--instance-id", help="Explicit instance id (default IP@-@PID).")
@click.option(
    "--grace", default=30.0, show_default=True, help="Seconds running items get to finish on stop."
)
def run(config: str, registry: str | None, instance_id: str | None, grace: float) -> None:
    """Run a worker with the jobs of CONFIG until SIGINT/SIGTERM."""
    try:
        app = load_config_file(config)
        target = parse_registry_url(registry) if registry else app.registry
        scheduler = Scheduler(target, instance_id=instance_id)
        for job in app.jobs:
            scheduler.add_job(job)
        scheduler.start()
    except ShardcronError as exc:
        _fail(str(exc))
    if scheduler.failed and not scheduler.runtimes:
        _fail("no job could start")
    click.echo(
        f"shardcron worker {scheduler.instance_id}: running {', '.join(sorted(scheduler.runtimes))}",
        err=True,
    )
    scheduler.run_forever(grace)


@main.command()
@click.option(
    "--seconds", default=12, show_default=True, help="How long to run before stopping an instance."
)
def demo(seconds: int) -> None:
    """Embedded quick start: 3 instances share a 6-item job, then one stops."""
    logging.getLogger().setLevel(logging.WARNING)
    demo_module.run(seconds, click.echo)


if __name__ == "__main__":
    main()
