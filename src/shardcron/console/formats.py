"""How the console's templates show times, durations and task ids (Jinja filters)."""

from __future__ import annotations

from datetime import datetime


def when(moment: datetime | None) -> str:
    """Local time of the console's host, with its zone; naive times (trace rows) are local."""
    if moment is None:
        return "-"
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def duration(seconds: float) -> str:
    """An uptime: ``3d 4h``, ``2h 5m``, ``4m 10s``."""
    total = int(seconds)
    days, hours, minutes = total // 86400, total // 3600 % 24, total // 60 % 60
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {total % 60}s"


def epoch(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds).astimezone()


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 1:
        return f"{value * 1000:.1f} ms" if value < 0.01 else f"{value * 1000:.0f} ms"
    return f"{value:.2f} s" if value < 10 else f"{value:.1f} s"


def instance_of(task_id: str) -> str:
    """The ``ip@-@pid`` that ends a task id: the process that ran the fire."""
    parts = task_id.split("@-@")
    return "@-@".join(parts[-2:]) if len(parts) >= 2 else task_id


def local_zone_name() -> str:
    """The zone the console shows times in (the host's), for labels of time inputs."""
    return datetime.now().astimezone().tzname() or "local time"
