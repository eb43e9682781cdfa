"""``python -m shardcron.simulation``: explore seeds, or replay one with its timeline.

python -m shardcron.simulation --seeds 10000 --jobs 2
python -m shardcron.simulation --seed 4711 --verbose
"""

from __future__ import annotations

import sys

import click

from shardcron.simulation.explore import by_fault, explore, from_result, summary
from shardcron.simulation.scenario import run_seed


@click.command()
@click.option("--seeds", default=1000, show_default=True, help="How many seeds to explore.")
@click.option("--start", default=0, show_default=True, help="The first seed.")
@click.option("--jobs", default=2, show_default=True, help="Worker processes.")
@click.option("--seed", type=int, default=None, help="Run this one seed only.")
@click.option("--verbose", is_flag=True, help="With --seed: print the seed's timeline.")
def main(seeds: int, start: int, jobs: int, seed: int | None, verbose: bool) -> None:
    if seed is not None:
        result = run_seed(seed, verbose=verbose)
        for at, text in result.timeline:
            click.echo(f"{at - result.epoch:9.3f}  {text}")
        for violation in result.violations:
            click.echo(f"VIOLATION {violation}")
        click.echo(summary(from_result(result)))
        sys.exit(1 if result.violations else 0)
    report = explore(range(start, start + seeds), jobs)
    click.echo(summary(report))
    click.echo(by_fault(report))
    for line in report.failures():
        click.echo(line)
    sys.exit(1 if report.violations else 0)


if __name__ == "__main__":
    main()
