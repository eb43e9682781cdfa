"""Cron triggers: when a job fires next.

A trigger is a cron expression plus a time zone. ``CronTrigger.parse`` checks the
expression once (:mod:`shardcron.schedule.cron` owns the dialects and the field-by-field search
in wall-clock time; :mod:`shardcron.schedule.timezones` owns the zone names and their offsets);
this module turns the wall times into instants.

The time zone is an IANA name (``Asia/Shanghai``), a fixed offset in the Java style
ElasticJob uses (``GMT+08:00``, ``GMT-5``, ``GMT``, ``UTC``), or nothing for the
machine's local zone. ``next_fire`` looks at most a century ahead: an expression that
cannot match in that time (a year field in the past, say) gives None.

**Daylight saving time.** Fields are matched against the wall clock of the zone. When
the clocks jump, we follow Debian's cron, which splits jobs in two kinds: a job whose
minute or hour field starts with ``*`` (or with ``0/``, Quartz's spelling of ``*/``) is
an *interval* job; any other job is a *fixed-time* job.

* Spring forward (a wall time does not exist): a fixed-time job due in the gap fires
  once, at the first instant after the gap (``0 30 2 * * ?`` in New York on
  2026-03-08 fires at 03:00 EDT). An interval job simply has no fires in the gap.
* Fall back (a wall time happens twice): a fixed-time job fires once, at the first
  occurrence (``0 30 1 * * ?`` fires at 01:30 EDT, not again at 01:30 EST). An interval
  job keeps its rhythm in real time and fires in both passes (``0 0 * * * ?`` fires
  at 01:00 EDT and again at 01:00 EST).

So no instant is ever produced twice, and results are strictly increasing.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone, tzinfo

from shardcron.errors import ConfigError
from shardcron.schedule.cron import _Invalid, _parse, _Schedule, dialect
from shardcron.schedule.timezones import _offsets, _transition, parse_time_zone

__all__ = ["CronTrigger", "dialect", "parse_time_zone"]

_SECOND = timedelta(seconds=1)
# How far ahead next_fire looks for an expression with no year field before giving up.
_HORIZON_YEARS = 100
_LAST_SEARCH_YEAR = 9998
_MAX_ANSWERS = 64
_UNKNOWN = datetime(1, 1, 1, tzinfo=UTC)  # compared by identity: never an answer

_QUARTZ_HINT = "use a Quartz expression like '0/5 * * * * ?'"
_UNIX_HINT = "use a Unix expression like '*/5 * * * *'"


@dataclass(frozen=True, slots=True)
class CronTrigger:
    """A parsed cron expression in a time zone. Build it with ``CronTrigger.parse``."""

    expression: str
    time_zone: tzinfo
    _schedule: _Schedule = field(init=False, repr=False, compare=False)
    _fixed_offset: timedelta | None = field(init=False, repr=False, compare=False)
    # next_fire's recent answers, by whole second (see next_fire): the jobs sharing this
    # trigger (see parse) ask the same few questions in a tick, thousands of times in a
    # busy second, and more when it runs late (each late job also counts the fires it
    # dropped, one question per second it walks).
    _answers: dict[datetime, datetime | None] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        if not isinstance(self.expression, str):
            raise ConfigError("cron", f"{self.expression!r} is not a string; {_QUARTZ_HINT}")
        try:
            schedule = _parse(self.expression.strip())
        except _Invalid as problem:
            fields = len(self.expression.split())
            hint = problem.hint or (_UNIX_HINT if fields == 5 else _QUARTZ_HINT)
            raise ConfigError("cron", f"{self.expression!r} {problem.detail}; {hint}") from None
        fixed = self.time_zone.utcoffset(None) if isinstance(self.time_zone, timezone) else None
        object.__setattr__(self, "_schedule", schedule)
        object.__setattr__(self, "_fixed_offset", fixed)

    @classmethod
    def parse(cls, expression: str, time_zone: str | None = None) -> CronTrigger:
        """Raises ConfigError naming ``cron`` or ``timeZone``. Jobs on the same schedule
        share one trigger (immutable): thousands of jobs parse their cron once, when
        validated and when run, and each holds 1 KiB less."""
        if isinstance(expression, str) and (time_zone is None or isinstance(time_zone, str)):
            local = None if time_zone and time_zone.strip() else os.environ.get("TZ", "")
            return _shared_trigger(expression.strip(), time_zone, local)
        return cls(expression, parse_time_zone(time_zone))  # garbage: its error, uncached

    def next_fire(self, after: datetime) -> datetime | None:
        """The first fire instant strictly after ``after`` (aware), in UTC; None if none."""
        if after.tzinfo is not UTC:  # equal local times may differ in fold: not kept
            return self._next_fire(after)
        # Fires fall on whole seconds, so any instant of a second has the same next fire
        # as the second itself; the jobs of a late tick each ask from a different instant.
        second = after.replace(microsecond=0)
        answers = self._answers
        known = answers.get(second, _UNKNOWN)  # one read: another thread may clear it
        if known is not _UNKNOWN:
            return known
        found = self._next_fire(second)
        if len(answers) >= _MAX_ANSWERS:
            answers.clear()  # the seconds asked about move on with the clock
        answers[second] = found
        return found

    def _next_fire(self, after: datetime) -> datetime | None:
        if after.utcoffset() is None:
            raise ValueError(f"next_fire needs an aware datetime, got {after!r}")
        moment = after.astimezone(UTC).replace(tzinfo=None)
        last_year = min(moment.year + _HORIZON_YEARS, _LAST_SEARCH_YEAR)
        offset = self._fixed_offset
        if offset is not None:
            wall = self._schedule.next_wall(_next_second(moment + offset), last_year)
            return None if wall is None else (wall - offset).replace(tzinfo=UTC)
        found = self._next_in_zone(moment, last_year)
        return None if found is None else found.replace(tzinfo=UTC)

    def _next_in_zone(self, moment: datetime, last_year: int) -> datetime | None:
        zone = self.time_zone
        local = moment.replace(tzinfo=UTC).astimezone(zone)
        wall = local.replace(tzinfo=None, fold=0)
        found = self._scan(_next_second(wall), moment, last_year)
        first, second = _offsets(zone, wall)
        if first > second and local.fold == 0 and self._schedule.interval:
            # `moment` is in the first pass of a repeated hour; the second pass replays
            # earlier wall times, so its first fire may come before `found`.
            change = _transition(zone, wall - first, wall - second)
            again = self._schedule.next_wall(change + second, last_year)
            if again is not None and again < change + first:
                again -= second
                return again if found is None else min(found, again)
        return found

    def _scan(self, start: datetime, moment: datetime, last_year: int) -> datetime | None:
        """The first instant after ``moment`` among wall times from ``start`` on."""
        zone, interval = self.time_zone, self._schedule.interval
        while True:
            wall = self._schedule.next_wall(start, last_year)
            if wall is None:
                return None
            first, second = _offsets(zone, wall)
            if first == second:
                return wall - first
            if first > second:  # repeated: first pass, then (interval jobs only) second
                if wall - first > moment:
                    return wall - first
                if interval:
                    return wall - second
                start = wall + _SECOND
                continue
            # Skipped by spring-forward: fixed-time jobs fire when the gap ends.
            change = _transition(zone, wall - second, wall - first)
            if not interval:
                return change
            start = change + second


def _next_second(wall: datetime) -> datetime:
    return wall.replace(microsecond=0) + _SECOND


@functools.lru_cache(maxsize=1024)
def _shared_trigger(expression: str, time_zone: str | None, local_tz: str | None) -> CronTrigger:
    """``local_tz`` is only part of the key: the ``TZ`` variable when ``time_zone`` names
    no zone, so that a process that changes ``TZ`` gets the new local zone."""
    return CronTrigger(expression, parse_time_zone(time_zone))
