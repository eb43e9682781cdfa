"""What ``shardcron check`` says about a valid job: how its cron is read, and how the registry's
copy of its config differs from the file.

Both return ``Notes``: lines that inform, and warnings worth a look (``--strict`` fails on
them). A 5-field cron is Unix cron, minutes first, so a Quartz expression that lost a field
(``0/5 * * * ?``) still parses, as something else: the warning is the only place to catch it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from zoneinfo import ZoneInfo

import yaml

from shardcron.config.drift import drift
from shardcron.config.job import JobConfig
from shardcron.config.jobtypes import EXECUTOR_KEY, EXECUTOR_KEY_305
from shardcron.schedule.cron import dialect
from shardcron.schedule.trigger import CronTrigger

FIRES_SHOWN = 3
_FIELDS = {
    "Quartz": "second minute hour day-of-month month day-of-week [year]",
    "Unix": "minute hour day-of-month month day-of-week",
}
# Quartz spells a step from a start as `0/5`; Unix cron writes `*/5` or a range `0-59/5`.
_QUARTZ_STEP = re.compile(r"^\d+/\d+$")


@dataclass
class Notes:
    lines: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def explain_cron(cfg: JobConfig, now: datetime) -> Notes:
    """The dialect ``cfg.cron`` is read as, its next fires after ``now`` in the job's zone,
    and a warning when a 5-field expression looks like Quartz missing a field."""
    notes = Notes()
    job = f"job {cfg.job_name!r}"
    if not cfg.cron:
        notes.lines.append(f"{job}: no cron; runs only when triggered")
        return notes
    trigger = CronTrigger.parse(cfg.cron, cfg.time_zone)
    kind = dialect(cfg.cron)
    zone = cfg.time_zone or f"this machine's zone ({_zone_name(trigger)})"
    notes.lines.append(f"{job}: cron {cfg.cron!r} read as {kind} ({_FIELDS[kind]}) in {zone}")
    fires: list[str] = []
    moment: datetime | None = now
    while moment is not None and len(fires) < FIRES_SHOWN:
        moment = trigger.next_fire(moment)
        if moment is not None:
            fires.append(moment.astimezone(trigger.time_zone).isoformat(sep=" "))
    notes.lines.append(f"  next fires: {', '.join(fires) or 'none within a century'}")
    if kind == "Unix" and (traits := _quartz_traits(cfg.cron)):
        notes.warnings.append(
            f"{job}: cron {cfg.cron!r} has 5 fields, so it is Unix cron (minute first), but "
            f"{' and '.join(traits)}: a Quartz expression missing a field? Quartz needs "
            f"{_FIELDS['Quartz']}, like '0/5 * * * * ?' (every 5 seconds)"
        )
    return notes


def _quartz_traits(expression: str) -> list[str]:
    parts = expression.split()
    traits = []
    if any("?" in part for part in parts):
        traits.append("'?' is Quartz's")
    steps = [part for part in parts if _QUARTZ_STEP.match(part)]
    if steps:
        traits.append(f"{steps[0]!r} is Quartz's spelling of a step (Unix writes */N)")
    return traits


def _zone_name(trigger: CronTrigger) -> str:
    zone = trigger.time_zone
    return zone.key if isinstance(zone, ZoneInfo) else str(zone)


def explain_drift(stored: JobConfig | None, local: JobConfig) -> Notes:
    """How the registry's config of ``local``'s job (None: not stored yet) differs from it."""
    notes = Notes()
    job = f"job {local.job_name!r}"
    if stored is None:
        notes.lines.append(f"{job}: not in the registry yet; its first worker stores this file")
        return notes
    keys = drift(stored, local)
    if not keys:
        notes.lines.append(f"{job}: the registry holds the same config")
        return notes
    if local.overwrite:
        notes.lines.append(
            f"{job}: the registry differs in {', '.join(keys)}; the next worker to start "
            "replaces it with this file (overwrite: true)"
        )
        return notes
    ours, theirs = _values(local), _values(stored)
    details = "; ".join(f"{key}: registry {theirs(key)}, file {ours(key)}" for key in keys)
    notes.warnings.append(
        f"{job}: the registry keeps its own config (overwrite: false), which differs from this "
        f"file: {details}. To apply the file, start once with overwrite: true or run "
        f"'shardcron config {local.job_name} --set KEY=VALUE'"
    )
    return notes


def _values(cfg: JobConfig) -> _Lookup:
    doc = yaml.safe_load(cfg.to_yaml())
    props = doc.pop("props", {})
    if EXECUTOR_KEY_305 in doc:  # drift names the thread-pool key by its older name
        doc[EXECUTOR_KEY] = doc.pop(EXECUTOR_KEY_305)
    return _Lookup(doc, props)


@dataclass(frozen=True)
class _Lookup:
    doc: dict[str, object]
    props: dict[str, object]

    def __call__(self, key: str) -> str:
        source, name = (self.props, key[6:]) if key.startswith("props.") else (self.doc, key)
        value = source.get(name)
        if value is None:
            return "unset"
        if isinstance(value, bool):
            return "true" if value else "false"
        return repr(value) if isinstance(value, str) else str(value)
