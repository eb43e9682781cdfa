"""The console's buttons: what each one calls on :class:`~shardcron.operations.admin.Admin`, the
message once done, and the question a destructive one asks first."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from shardcron.operations.admin import Write


@dataclass(frozen=True, slots=True)
class Action:
    """One button: the Admin call, the message once done, and a question if destructive."""

    run: Callable[..., list[Write]]
    done: str  # "{target}" is replaced by what was acted on
    confirm: str | None = None


JOB_ACTIONS = {
    "trigger": Action(lambda a, job: a.trigger(job), "Triggered {target}"),
    "disable": Action(lambda a, job: a.disable(job), "Disabled {target} on every server"),
    "enable": Action(lambda a, job: a.enable(job), "Enabled {target} on every server"),
    "shutdown": Action(
        lambda a, job: a.shutdown(job),
        "Shut down {target} on every instance",
        "Shut down {target} on every instance? It stays stopped until its workers restart.",
    ),
    "remove": Action(
        lambda a, job: a.remove_job(job),
        "Removed {target}",
        "Remove {target}? Its instances stop it and its whole registry tree is deleted.",
    ),
}
JOB_SERVER_ACTIONS = {
    "disable": Action(lambda a, job, ip: a.disable(job, ip), "Disabled {target}"),
    "enable": Action(lambda a, job, ip: a.enable(job, ip), "Enabled {target}"),
    "shutdown": Action(
        lambda a, job, ip: a.shutdown(job, ip),
        "Shut down {target}",
        "Shut down {target}? It stays stopped there until the workers restart.",
    ),
    "remove": Action(
        lambda a, job, ip: a.remove_server(ip, job),
        "Removed {target}",
        "Remove {target}? Its instances stop the job and the server's node is deleted.",
    ),
}
ITEM_ACTIONS = {
    "disable": Action(lambda a, job, item: a.disable_item(job, item), "Disabled {target}"),
    "enable": Action(lambda a, job, item: a.enable_item(job, item), "Enabled {target}"),
}
SERVER_ACTIONS = {
    "disable": Action(lambda a, ip: a.disable(server=ip), "Disabled {target} in every job"),
    "enable": Action(lambda a, ip: a.enable(server=ip), "Enabled {target} in every job"),
    "shutdown": Action(
        lambda a, ip: a.shutdown(server=ip),
        "Shut down every job on {target}",
        "Shut down every job on {target}? They stay stopped until the workers restart.",
    ),
    "remove": Action(
        lambda a, ip: a.remove_server(ip),
        "Removed {target} from every job",
        "Remove {target} from every job? Its instances stop and its server nodes are deleted.",
    ),
}


class Target(StrEnum):
    """What a button acts on: its path is /jobs/JOB/..., /jobs/JOB/servers/IP/..., ..."""

    JOB = "job"
    JOB_SERVER = "job_server"
    ITEM = "item"
    SERVER = "server"


ACTIONS: dict[Target, Mapping[str, Action]] = {
    Target.JOB: JOB_ACTIONS,
    Target.JOB_SERVER: JOB_SERVER_ACTIONS,
    Target.ITEM: ITEM_ACTIONS,
    Target.SERVER: SERVER_ACTIONS,
}


def named(target: Target, *args: object) -> str:
    """What a button acts on, in words (for messages and questions)."""
    match target:
        case Target.JOB:
            return f"job {args[0]!r}"
        case Target.JOB_SERVER:
            return f"job {args[0]!r} on server {args[1]}"
        case Target.ITEM:
            return f"item {args[1]} of job {args[0]!r}"
        case Target.SERVER:
            return f"server {args[0]}"


def question(target: Target, action: str, *args: object) -> str | None:
    """The confirmation a destructive action asks for, None for the others."""
    confirm = ACTIONS[target][action].confirm
    return None if confirm is None else confirm.format(target=named(target, *args))
