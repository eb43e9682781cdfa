"""Seeded fault exploration on virtual time: random clusters, faults and operator actions.

Many instances of :class:`shardcron.coordination.runtime.JobRuntime` run on one embedded registry,
on a virtual clock, single-threaded, with faults injected at the registry boundary and
operators acting, all drawn from one seed; :mod:`shardcron.simulation.checks` states and
checks the invariants. ``python -m shardcron.simulation --seeds N`` explores seeds;
``--seed S --verbose`` replays one with its timeline.
"""

from shardcron.simulation.scenario import Result, run_seed

__all__ = ["Result", "run_seed"]
