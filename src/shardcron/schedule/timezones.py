"""Time zones of triggers: reading their names, and UTC offsets around DST changes.

The time zone is an IANA name (``Asia/Shanghai``), a fixed offset in the Java style
ElasticJob uses (``GMT+08:00``, ``GMT-5``, ``GMT``, ``UTC``), or nothing for the
machine's local zone. The offset helpers tell :mod:`shardcron.schedule.trigger` whether a wall
time is ordinary, repeated (fall back) or skipped (spring forward), and find the instant
the clocks change.
"""

from __future__ import annotations

import functools
import os
import re
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from shardcron.errors import ConfigError

_GMT_OFFSET = re.compile(r"(?:GMT|UTC)(?:([+-])(\d{1,2})(?::?(\d{2}))?)?", re.IGNORECASE)


def parse_time_zone(name: str | None) -> tzinfo:
    """An IANA zone, a ``GMT+08:00``-style fixed offset, or the local zone for None/empty."""
    if name is None or (isinstance(name, str) and not name.strip()):
        return _local_zone()
    if not isinstance(name, str):
        raise ConfigError("timeZone", f"{name!r} is not a string; use a name like 'Asia/Shanghai'")
    text = name.strip()
    match = _GMT_OFFSET.fullmatch(text)
    if match:
        sign, hours, minutes = match.groups()
        if sign is None:
            return UTC
        h, m = int(hours), int(minutes or 0)
        if h > 23 or m > 59:
            raise ConfigError(
                "timeZone",
                f"{name!r} is not a valid offset; use GMT+hh:mm with hours 0-23, like 'GMT+08:00'",
            )
        offset = timedelta(hours=h, minutes=m)
        return timezone(-offset if sign == "-" else offset, f"GMT{sign}{h:02d}:{m:02d}")
    try:
        return ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ConfigError(
            "timeZone",
            f"{name!r} is not a known time zone;"
            " use an IANA name like 'Asia/Shanghai' or an offset like 'GMT+08:00'",
        ) from None


def _local_zone() -> tzinfo:
    """The machine's zone with its DST rules, found the way the C library finds it."""
    return _zone_of_machine(os.environ.get("TZ", ""))


@functools.cache
def _zone_of_machine(tz_variable: str) -> tzinfo:
    # Cached: resolving /etc/localtime walks the file system, and a worker starting
    # thousands of jobs without a timeZone asked once per job.
    keys = [tz_variable.removeprefix(":")]
    target = os.path.realpath("/etc/localtime")
    if "/zoneinfo/" in target:
        keys.append(target.split("/zoneinfo/", 1)[1])
    for key in keys:
        if key:
            try:
                return ZoneInfo(key)
            except (ZoneInfoNotFoundError, ValueError, OSError):
                continue
    try:
        with open("/etc/localtime", "rb") as source:
            return ZoneInfo.from_file(source, key="localtime")
    except (OSError, ValueError):
        # Only the current offset is known here, so DST changes will be missed.
        return datetime.now().astimezone().tzinfo or UTC


def _offset(zone: tzinfo, moment: datetime) -> timedelta:
    offset = zone.utcoffset(moment)
    if offset is None:
        raise ValueError(f"time zone {zone!r} gives no UTC offset for {moment}")
    return offset


def _offsets(zone: tzinfo, wall: datetime) -> tuple[timedelta, timedelta]:
    """UTC offsets of a naive wall time read as its first and as its second occurrence.

    Equal for an ordinary time; first > second in a fall-back overlap; first < second
    in a spring-forward gap (PEP 495).
    """
    return _offset(zone, wall), _offset(zone, wall.replace(fold=1))


def _offset_at(zone: tzinfo, utc: datetime) -> timedelta:
    return _offset(zone, zone.fromutc(utc.replace(tzinfo=zone)))


def _transition(zone: tzinfo, lo: datetime, hi: datetime) -> datetime:
    """The instant (naive UTC, whole seconds) in ``(lo, hi]`` where the offset changes."""
    before = _offset_at(zone, lo)
    low, high = 0, int((hi - lo).total_seconds())
    while high - low > 1:
        mid = (low + high) // 2
        if _offset_at(zone, lo + timedelta(seconds=mid)) == before:
            low = mid
        else:
            high = mid
    return lo + timedelta(seconds=high)
