"""What the ``shardcron`` command prints: tables and JSON, a job's overview, the registry
writes an operation made, and the one line a command ends with when it fails or is interrupted.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import os
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NoReturn

import click

from shardcron.config.job import JobConfig
from shardcron.config.snakeyaml import RegistryLoader, load
from shardcron.errors import ConfigError
from shardcron.operations.admin import Write
from shardcron.operations.jobstats import JobBrief, JobOverview
from shardcron.schedule.timezones import parse_time_zone


def _fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


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


def _next_fire(brief: JobBrief) -> str:
    """A job's next fire in the job's own zone, as ``check`` prints it (this machine's when
    the job names none), so a fire at 09:00 Tokyo time reads ``09:00:00+09:00``."""
    if brief.next_fire is None:
        return "-"
    try:
        zone = parse_time_zone(brief.time_zone)
    except ConfigError:  # a zone this machine does not know: its own zone, still exact
        return _cell(brief.next_fire)
    return brief.next_fire.astimezone(zone).isoformat(sep=" ", timespec="seconds")


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
        ("next fire", _next_fire(brief)),
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
