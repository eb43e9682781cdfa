"""Cron expressions: the Quartz and Unix dialects, parsed into a schedule of wall times.

``_parse`` checks an expression once and turns every field into a sorted tuple (or, for
the day fields, a rule that yields the matching days of a given month);
``_Schedule.next_wall`` then walks those tuples field by field, so a call costs a few
bisections, not a second-by-second search. No time zone is involved here: the wall times
become instants in :mod:`shardcron.schedule.trigger`.

Two dialects are accepted, told apart by the number of fields:

* **Quartz** (what ElasticJob users bring), 6 or 7 fields, seconds first:
  ``second minute hour day-of-month month day-of-week [year]``. Days of the week are
  numbered 1=SUN .. 7=SAT. Exactly one of the two day fields must be ``?``. Besides
  ``*``, lists, ranges and steps (``0/5``, ``10-40/10``, ``*/15``; a range may wrap, as
  ``FRI-MON`` or ``22-2``) it knows ``L`` (last day of the month; ``L-3`` three days
  before it), ``15W`` (the weekday nearest the 15th, never leaving the month; a month
  too short for the day has no fire), ``LW`` (the last weekday), ``L-3W`` (the weekday
  nearest the third day before the last), ``5L`` (the last
  Thursday), ``6#3`` (the third Friday) and ``L`` alone in day-of-week (Saturday).
  The year field takes 1970-2099. As in Quartz 2.3.2, a step may not exceed 59 (seconds,
  minutes) or 23 (hours), and an ``L``, ``W`` or ``#`` term must stand alone in its field
  (Quartz rejects ``L,15`` and ``6#3,2#1``, and reads ``2#1,6`` as something else).
* **Unix** (Vixie cron), 5 fields: ``minute hour day-of-month month day-of-week``,
  firing at second 0. Days of the week are 0-7 with both 0 and 7 meaning Sunday. When
  both day fields are restricted (neither starts with ``*``) a day matches if *either*
  matches. ``?`` is read as ``*``, and the Quartz day extras are accepted too.
  ``@yearly``, ``@monthly``, ``@weekly``, ``@daily`` and ``@hourly`` are shorthands.

Names (``JAN``-``DEC``, ``SUN``-``SAT``) and letters are case-insensitive.
"""

from __future__ import annotations

import calendar
from bisect import bisect_left
from dataclasses import dataclass, field
from datetime import datetime

_COUNT_HINT = (
    "use 6 or 7 Quartz fields (second minute hour day-of-month month day-of-week [year])"
    " like '0/5 * * * * ?', or 5 Unix fields like '*/5 * * * *'"
)
_MACROS = {
    "@YEARLY": "0 0 1 1 *",
    "@ANNUALLY": "0 0 1 1 *",
    "@MONTHLY": "0 0 1 * *",
    "@WEEKLY": "0 0 * * 0",
    "@DAILY": "0 0 * * *",
    "@MIDNIGHT": "0 0 * * *",
    "@HOURLY": "0 * * * *",
}
# Spelled out rather than taken from `calendar`, whose names follow the locale.
_MONTH_NAMES = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_LONGEST_MONTH = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_SATURDAY, _SUNDAY = 5, 6  # date.weekday() numbering


class _Invalid(Exception):
    """A parse problem; ``CronTrigger`` turns it into a ConfigError naming the expression."""

    def __init__(self, detail: str, hint: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.hint = hint


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    lo: int
    hi: int
    names: dict[str, int] = field(default_factory=dict)
    max_step: int | None = None  # None: the width of the range

    @property
    def step_limit(self) -> int:
        return self.hi - self.lo + 1 if self.max_step is None else self.max_step


_SECONDS = _Field("second", 0, 59)
_MINUTES = _Field("minute", 0, 59)
_HOURS = _Field("hour", 0, 23)
_DOM = _Field("day-of-month", 1, 31)
_MONTHS = _Field("month", 1, 12, {name: n for n, name in enumerate(_MONTH_NAMES, 1)})
_QUARTZ_DOW = _Field("day-of-week", 1, 7, {name: n for n, name in enumerate(_DAY_NAMES, 1)})
_UNIX_DOW = _Field("day-of-week", 0, 7, {name: n for n, name in enumerate(_DAY_NAMES)})
_YEARS = _Field("year", 1970, 2099)
# Quartz refuses a step above 59 for seconds and minutes and above 23 for hours.
_QUARTZ_SECONDS = _Field("second", 0, 59, max_step=59)
_QUARTZ_MINUTES = _Field("minute", 0, 59, max_step=59)
_QUARTZ_HOURS = _Field("hour", 0, 23, max_step=23)
_QUARTZ_FIELDS = ("second", "minute", "hour", "day-of-month", "month", "day-of-week", "year")


@dataclass(frozen=True, slots=True)
class _DaysOfMonth:
    days: frozenset[int]
    before_last: frozenset[int]  # L-n gives n; a plain L gives 0
    nearest_weekday: frozenset[int]  # 15W gives 15
    before_last_weekday: frozenset[int]  # L-nW gives n; LW gives 0

    def select(self, first_weekday: int, length: int) -> set[int]:
        chosen = {day for day in self.days if day <= length}
        chosen.update(length - n for n in self.before_last if n < length)
        chosen.update(
            _nearest_weekday(day, first_weekday, length)
            for day in self.nearest_weekday
            if day <= length
        )
        chosen.update(
            _nearest_weekday(length - n, first_weekday, length)
            for n in self.before_last_weekday
            if n < length
        )
        return chosen


@dataclass(frozen=True, slots=True)
class _DaysOfWeek:
    weekdays: frozenset[int]  # date.weekday() numbering: 0=Monday .. 6=Sunday
    last: frozenset[int]  # 5L (Quartz) gives Thursday
    nth: frozenset[tuple[int, int]]  # 6#3 (Quartz) gives (Friday, 3)

    def select(self, first_weekday: int, length: int) -> set[int]:
        chosen: set[int] = set()
        for weekday in self.weekdays:
            chosen.update(range(_first(weekday, first_weekday), length + 1, 7))
        for weekday in self.last:
            first = _first(weekday, first_weekday)
            chosen.add(first + 7 * ((length - first) // 7))
        for weekday, n in self.nth:
            day = _first(weekday, first_weekday) + 7 * (n - 1)
            if day <= length:
                chosen.add(day)
        return chosen


def _first(weekday: int, first_weekday: int) -> int:
    """The first day of a month that falls on ``weekday``."""
    return 1 + (weekday - first_weekday) % 7


def _nearest_weekday(day: int, first_weekday: int, length: int) -> int:
    weekday = (first_weekday + day - 1) % 7
    if weekday == _SATURDAY:
        return day - 1 if day > 1 else day + 2
    if weekday == _SUNDAY:
        return day + 1 if day < length else day - 2
    return day


@dataclass(frozen=True, slots=True)
class _Schedule:
    """The parsed fields, matched against wall-clock time (no time zone involved)."""

    seconds: tuple[int, ...]
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    months: tuple[int, ...]
    years: tuple[int, ...] | None  # None: any year
    dom: _DaysOfMonth | None  # None: any day
    dow: _DaysOfWeek | None
    either_day: bool  # Vixie: both day fields restricted, so a day needs to match only one
    interval: (
        bool  # minute or hour starts with '*': see the DST policy in shardcron.schedule.trigger
    )
    # Matching days per (year, month); computing them is the costly part of a search.
    _month_days: dict[int, tuple[int, ...]] = field(default_factory=dict, compare=False, repr=False)

    def next_wall(self, start: datetime, last_year: int) -> datetime | None:
        """The first matching wall time at or after ``start`` (whole seconds, naive)."""
        y, mo, d = start.year, start.month, start.day
        h, mi, s = start.hour, start.minute, start.second
        years, months, hours = self.years, self.months, self.hours
        minutes, seconds = self.minutes, self.seconds
        # Each step either accepts a field or moves to the next candidate of the field
        # above it and resets the fields below; an overflowing value (day 32, hour 24,
        # month 13) is caught by the bisection of its own field on the next pass.
        while True:
            if years is not None:
                i = bisect_left(years, y)
                if i == len(years):
                    return None
                if years[i] != y:
                    y, mo, d, h, mi, s = years[i], 1, 1, 0, 0, 0
            if y > last_year:
                return None
            i = bisect_left(months, mo)
            if i == len(months):
                y, mo, d, h, mi, s = y + 1, 1, 1, 0, 0, 0
                continue
            if months[i] != mo:
                mo, d, h, mi, s = months[i], 1, 0, 0, 0
            days = self._days(y, mo)
            i = bisect_left(days, d)
            if i == len(days):
                mo, d, h, mi, s = mo + 1, 1, 0, 0, 0
                continue
            if days[i] != d:
                d, h, mi, s = days[i], 0, 0, 0
            i = bisect_left(hours, h)
            if i == len(hours):
                d, h, mi, s = d + 1, 0, 0, 0
                continue
            if hours[i] != h:
                h, mi, s = hours[i], 0, 0
            i = bisect_left(minutes, mi)
            if i == len(minutes):
                h, mi, s = h + 1, 0, 0
                continue
            if minutes[i] != mi:
                mi, s = minutes[i], 0
            i = bisect_left(seconds, s)
            if i == len(seconds):
                mi, s = mi + 1, 0
                continue
            return datetime(y, mo, d, h, mi, seconds[i])

    def _days(self, year: int, month: int) -> tuple[int, ...]:
        key = year * 16 + month
        days = self._month_days.get(key)
        if days is None:
            if len(self._month_days) >= 512:
                self._month_days.clear()
            days = self._month_days[key] = self._compute_days(year, month)
        return days

    def _compute_days(self, year: int, month: int) -> tuple[int, ...]:
        first_weekday, length = calendar.monthrange(year, month)
        by_dom = self.dom.select(first_weekday, length) if self.dom else None
        by_dow = self.dow.select(first_weekday, length) if self.dow else None
        if by_dom is None and by_dow is None:
            return tuple(range(1, length + 1))
        if by_dom is None or by_dow is None:
            chosen = by_dom if by_dow is None else by_dow
        else:
            chosen = by_dom | by_dow if self.either_day else by_dom & by_dow
        return tuple(sorted(chosen or ()))


# ---- parsing -------------------------------------------------------------------------


def _parse(expression: str) -> _Schedule:
    parts = _MACROS.get(expression.upper(), expression).split()
    if len(parts) == 5:
        return _parse_unix(parts)
    if len(parts) in (6, 7):
        return _parse_quartz(parts)
    if not parts:
        raise _Invalid("is empty", _COUNT_HINT)
    if len(parts) == 1 and parts[0].startswith("@"):
        raise _Invalid("is not a known shorthand", f"use one of {', '.join(_MACROS).lower()}")
    raise _Invalid(f"has {len(parts)} field{'s' if len(parts) > 1 else ''}", _COUNT_HINT)


def _parse_quartz(parts: list[str]) -> _Schedule:
    second, minute, hour, dom, month, dow = parts[:6]
    for i, text in enumerate(parts):
        if "?" in text and i not in (3, 5):
            raise _Invalid(
                f"{_QUARTZ_FIELDS[i]} '?' is only allowed in day-of-month or day-of-week"
            )
    for name, text, special in (("day-of-month", dom, "LW"), ("day-of-week", dow, "L#")):
        if "," in text and any(letter in text.upper() for letter in special):
            raise _Invalid(
                f"{name} {text!r} lists a {'/'.join(special)} term with other terms,"
                " which Quartz does not support",
                f"use one {'/'.join(special)} term alone, or split the job in two",
            )
    schedule = _Schedule(
        seconds=_sorted(second, _QUARTZ_SECONDS, wrap=True),
        minutes=_sorted(minute, _QUARTZ_MINUTES, wrap=True),
        hours=_sorted(hour, _QUARTZ_HOURS, wrap=True),
        months=_sorted(month, _MONTHS, wrap=True),
        years=None if len(parts) == 6 or parts[6] == "*" else _sorted(parts[6], _YEARS),
        dom=_days_of_month(dom, wrap=True),
        dow=_days_of_week(dow, _QUARTZ_DOW, to_weekday=5, quartz=True),
        either_day=False,
        interval=_is_interval(minute) or _is_interval(hour),
    )
    if (dom == "?") == (dow == "?"):
        raise _Invalid(_both_days_problem(parts), "put '?' in exactly one of them")
    _check_days_exist(schedule, dom, month)
    return schedule


def _both_days_problem(parts: list[str]) -> str:
    dom, dow = parts[3], parts[5]
    if dom == "?":
        return "has '?' in both day-of-month and day-of-week"
    fixed = [*parts]
    fixed[5 if dow == "*" or dom != "*" else 3] = "?"
    example = " ".join(fixed)
    return (
        f"sets both day-of-month {dom!r} and day-of-week {dow!r}, which Quartz does not"
        f" support (did you mean {example!r}?)"
    )


def _parse_unix(parts: list[str]) -> _Schedule:
    minute, hour, dom, month, dow = parts
    dom, dow = ("*" if text == "?" else text for text in (dom, dow))
    schedule = _Schedule(
        seconds=(0,),
        minutes=_sorted(minute, _MINUTES),
        hours=_sorted(hour, _HOURS),
        months=_sorted(month, _MONTHS),
        years=None,
        dom=_days_of_month(dom, wrap=False),
        dow=_days_of_week(dow, _UNIX_DOW, to_weekday=6, quartz=False),
        either_day=not dom.startswith("*") and not dow.startswith("*"),
        interval=_is_interval(minute) or _is_interval(hour),
    )
    if not schedule.either_day:
        _check_days_exist(schedule, dom, month)
    return schedule


def _is_interval(text: str) -> bool:
    return text.startswith(("*", "0/"))


def _check_days_exist(schedule: _Schedule, dom_text: str, month_text: str) -> None:
    """Reject day-of-month lists that no chosen month has, like the 30th of February."""
    dom = schedule.dom
    if dom is None or dom.before_last or dom.before_last_weekday or dom.nearest_weekday:
        return
    longest = max(_LONGEST_MONTH[month] for month in schedule.months)
    if min(dom.days) > longest:
        raise _Invalid(
            f"day-of-month {dom_text!r} never occurs in month {month_text!r}",
            "pick days that exist in those months, or 'L' for the last day",
        )


def _sorted(text: str, spec: _Field, *, wrap: bool = False) -> tuple[int, ...]:
    values: set[int] = set()
    for term in text.split(","):
        values.update(_term(term, spec, wrap=wrap))
    return tuple(sorted(values))


def _term(term: str, spec: _Field, *, wrap: bool) -> list[int]:
    """Values of one list item: ``*``, ``n``, ``a-b``, each optionally with ``/step``."""
    base, slash, step_text = term.partition("/")
    step = _number(step_text, f"{spec.name} step", 1, spec.step_limit) if slash else 1
    if base == "*":
        lo, hi = spec.lo, spec.hi
    elif "-" in base:
        first, _, last = base.partition("-")
        lo, hi = _value(first, spec, term), _value(last, spec, term)
    else:
        lo = _value(base, spec, term)
        hi = spec.hi if slash else lo
    if lo <= hi:
        return list(range(lo, hi + 1, step))
    if not wrap:
        raise _Invalid(f"{spec.name} range {base} runs backwards; write it as {hi}-{lo}")
    return [*range(lo, spec.hi + 1), *range(spec.lo, hi + 1)][::step]


def _value(text: str, spec: _Field, term: str) -> int:
    named = spec.names.get(text.upper())
    if named is not None:
        return named
    if not text:
        raise _Invalid(f"{spec.name} {term!r} is incomplete")
    return _number(text, spec.name, spec.lo, spec.hi)


def _number(text: str, what: str, lo: int, hi: int) -> int:
    if not (text.isascii() and text.isdigit()):
        raise _Invalid(f"{what} {text!r} is not a number")
    value = int(text)
    if not lo <= value <= hi:
        raise _Invalid(f"{what} {value} is out of range {lo}-{hi}")
    return value


def _days_of_month(text: str, *, wrap: bool) -> _DaysOfMonth | None:
    if text in ("*", "?"):
        return None
    days: set[int] = set()
    before_last: set[int] = set()
    nearest: set[int] = set()
    last_nearest: set[int] = set()
    for term in text.split(","):
        letters = term.upper()
        if letters == "LW":
            last_nearest.add(0)
        elif letters == "L":
            before_last.add(0)
        elif letters.startswith("L-"):
            weekday = letters.endswith("W")
            offset_text = term[2:-1] if weekday else term[2:]
            offset = _number(offset_text, f"day-of-month {term!r} offset", 0, 30)
            (last_nearest if weekday else before_last).add(offset)
        elif letters.endswith("W"):
            nearest.add(_value(term[:-1], _DOM, term))
        else:
            days.update(_term(term, _DOM, wrap=wrap))
    return _DaysOfMonth(
        frozenset(days), frozenset(before_last), frozenset(nearest), frozenset(last_nearest)
    )


def _days_of_week(text: str, spec: _Field, *, to_weekday: int, quartz: bool) -> _DaysOfWeek | None:
    """``to_weekday`` shifts the dialect's numbering onto date.weekday() (0=Monday)."""
    if text in ("*", "?"):
        return None
    weekdays: set[int] = set()
    last: set[int] = set()
    nth: set[tuple[int, int]] = set()
    for term in text.split(","):
        if "#" in term:
            day, _, n = term.partition("#")
            weekday = (_value(day, spec, term) + to_weekday) % 7
            nth.add((weekday, _number(n, f"day-of-week {term!r} occurrence", 1, 5)))
        elif term.upper() == "L" and quartz:
            weekdays.add(_SATURDAY)
        elif term.upper().endswith("L"):
            last.add((_value(term[:-1], spec, term) + to_weekday) % 7)
        else:
            weekdays.update((v + to_weekday) % 7 for v in _term(term, spec, wrap=quartz))
    return _DaysOfWeek(frozenset(weekdays), frozenset(last), frozenset(nth))


def dialect(expression: str) -> str:
    """``"Unix"`` for 5 fields or an ``@`` shorthand, else ``"Quartz"`` (how it is parsed)."""
    parts = _MACROS.get(expression.strip().upper(), expression).split()
    return "Unix" if len(parts) == 5 else "Quartz"
