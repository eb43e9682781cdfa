"""The module paths of releases before the move into subpackages, kept importable.

``import shardcron.admin`` still works and gives :mod:`shardcron.operations.admin` itself
(the same module object, so its classes and module state are shared), with a
DeprecationWarning naming the new path. Nothing else imports from here.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

# old name under ``shardcron.`` -> new name under ``shardcron.``. Old names that a new
# package took (config, testing, scheduler, cli, execution) are that package now.
MOVED = {
    "admin": "operations.admin",
    "arenas": "cli.arenas",
    "claimlead": "coordination.claimlead",
    "cli_console": "cli.console",
    "cli_operations": "cli.operations",
    "cli_output": "cli.output",
    "clockskew": "coordination.clockskew",
    "conversion": "config.conversion",
    "cron": "schedule.cron",
    "demo": "cli.demo",
    "deregistration": "coordination.deregistration",
    "drift": "config.drift",
    "dump": "observability.dump",
    "election": "coordination.election",
    "errorhandlers": "execution.errorhandlers",
    "events": "coordination.events",
    "explain": "config.explain",
    "failover": "coordination.failover",
    "firetimer": "coordination.firetimer",
    "firing": "coordination.firing",
    "groupcommit": "coordination.groupcommit",
    "healing": "coordination.healing",
    "idleflag": "coordination.idleflag",
    "instancerecord": "config.instancerecord",
    "jobconfig": "config.job",
    "jobs": "execution.jobs",
    "jobstats": "operations.jobstats",
    "jobtesting": "testing.jobs",
    "jobtypes": "config.jobtypes",
    "launch": "scheduler.launch",
    "listeners": "execution.listeners",
    "localitems": "coordination.localitems",
    "localzk": "cli.zookeeper",
    "membership": "coordination.membership",
    "metrics": "observability.metrics",
    "misfires": "coordination.misfires",
    "paths": "coordination.paths",
    "plugins": "config.plugins",
    "registration": "coordination.registration",
    "registryconfig": "config.registry",
    "runtime": "coordination.runtime",
    "secrecy": "config.secrecy",
    "sharding": "coordination.sharding",
    "snakeyaml": "config.snakeyaml",
    "startsfirst": "scheduler.startsfirst",
    "stopmark": "coordination.stopmark",
    "stopsignals": "scheduler.stopsignals",
    "strategies": "coordination.strategies",
    "testing_ensemble": "testing.ensemble",
    "testing_proxy": "testing.proxy",
    "timers": "scheduler.timers",
    "timezones": "schedule.timezones",
    "trigger": "schedule.trigger",
    "validation": "config.job",
    "workercard": "observability.workercard",
    "workerpool": "execution.workerpool",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        prefix, _, old = fullname.partition(".")
        if prefix != "shardcron" or old not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default module, replaced by the real one in exec_module

    def exec_module(self, module: ModuleType) -> None:
        new = "shardcron." + MOVED[module.__name__.partition(".")[2]]
        warnings.warn(
            f"{module.__name__} has moved to {new}; import it from there",
            DeprecationWarning,
            stacklevel=2,
        )
        # The import system returns what sys.modules holds under the old name once this
        # returns: the real module, not a copy.
        sys.modules[module.__name__] = importlib.import_module(new)


def install() -> None:
    if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
        sys.meta_path.append(_Alias())
