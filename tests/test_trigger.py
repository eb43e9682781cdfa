"""Tests for the cron trigger: both dialects, time zones, the DST policy, errors, and
properties against brute-force references that step through real instants."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from functools import partial
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, reject, settings
from hypothesis import strategies as st

from shardcron.errors import ConfigError
from shardcron.schedule.timezones import parse_time_zone
from shardcron.schedule.trigger import CronTrigger


def fires(expression: str, zone: str | None, after: str, count: int) -> list[str]:
    """The next ``count`` fires after ``after`` as ISO strings in the trigger's zone.

    ``after`` without an offset is read in the trigger's zone (first occurrence).
    """
    trigger = CronTrigger.parse(expression, zone)
    moment = datetime.fromisoformat(after)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=trigger.time_zone)
    found: list[str] = []
    for _ in range(count):
        following = trigger.next_fire(moment)
        if following is None:
            found.append("none")
            break
        assert following.utcoffset() == timedelta(0)
        found.append(following.astimezone(trigger.time_zone).isoformat())
        moment = following
    return found


# ---- Quartz --------------------------------------------------------------------------

QUARTZ_EXAMPLES = [
    # every second, and steps in the seconds field (expected: day of month, then time)
    ("* * * * * ?", "2026-05-01T10:00:00.5", ["01T10:00:01", "01T10:00:02", "01T10:00:03"]),
    ("0/5 * * * * ?", "2026-05-01T10:00:03", ["01T10:00:05", "01T10:00:10", "01T10:00:15"]),
    ("10-40/10 * * * * ?", "2026-05-01T10:00:35", ["01T10:00:40", "01T10:01:10", "01T10:01:20"]),
    ("50-10/10 * * * * ?", "2026-05-01T10:00:45", ["01T10:00:50", "01T10:01:00", "01T10:01:10"]),
    ("0 */15 * * * ?", "2026-05-01T10:00:00", ["01T10:15:00", "01T10:30:00", "01T10:45:00"]),
    (
        "0 0 22-1 * * ?",
        "2026-05-01T21:30:00",
        ["01T22:00:00", "01T23:00:00", "02T00:00:00", "02T01:00:00", "02T22:00:00"],
    ),
    ("0 5,10 9 * * ?", "2026-05-01T09:07:00", ["01T09:10:00", "02T09:05:00"]),
    ("59 59 23 * * ?", "2026-05-31T23:59:59", ["01T23:59:59"]),
]


@pytest.mark.parametrize(("expression", "after", "expected"), QUARTZ_EXAMPLES)
def test_quartz_time_of_day_fields(expression: str, after: str, expected: list[str]) -> None:
    got = [text[8:19] for text in fires(expression, "UTC", after, len(expected))]
    assert got == expected


QUARTZ_DAY_EXAMPLES = [
    # weekday names and Quartz numbering (1=SUN .. 7=SAT); 2026-05-01 is a Friday
    ("0 0 12 ? * MON-FRI", "2026-05-01T12:00", ["2026-05-04", "2026-05-05"]),
    ("0 0 0 ? * fri-mon", "2026-05-06", ["2026-05-08", "2026-05-09", "2026-05-10", "2026-05-11"]),
    ("0 0 0 ? * 1", "2026-05-06", ["2026-05-10", "2026-05-17"]),
    ("0 0 0 ? * 7", "2026-05-06", ["2026-05-09", "2026-05-16"]),
    ("0 0 0 ? * L", "2026-05-06", ["2026-05-09"]),
    ("0 0 0 ? * 2/2", "2026-05-06", ["2026-05-08", "2026-05-11", "2026-05-13"]),
    # month names
    ("0 0 0 1 JAN,jul ?", "2026-05-06", ["2026-07-01", "2027-01-01", "2027-07-01"]),
    ("0 0 0 1 NOV-FEB ?", "2026-05-06", ["2026-11-01", "2026-12-01", "2027-01-01"]),
    # last day, and days before it
    ("0 15 10 L * ?", "2026-01-01", ["2026-01-31", "2026-02-28", "2026-03-31"]),
    ("0 0 0 L 2 ? 2028", "2026-01-01", ["2028-02-29", "none"]),
    ("0 0 0 L-3 * ?", "2026-01-01", ["2026-01-28", "2026-02-25", "2026-03-28"]),
    # nearest weekday; 2026-02-15 and 2026-03-15 are Sundays, 2026-08-15 a Saturday
    ("0 0 9 15W * ?", "2026-01-01", ["2026-01-15", "2026-02-16", "2026-03-16"]),
    ("0 0 9 15W 8 ?", "2026-01-01", ["2026-08-14"]),
    # 2026-08-01 is a Saturday: stay in August rather than go back to July 31
    ("0 0 9 1W 8 ?", "2026-07-01", ["2026-08-03"]),
    # 2026-05-31 is a Sunday: stay in May rather than go on to June 1
    ("0 0 9 31W 5 ?", "2026-05-01", ["2026-05-29"]),
    ("0 0 9 LW * ?", "2026-01-01", ["2026-01-30", "2026-02-27", "2026-03-31"]),
    # L-3W, 2026: Jan 28 and Feb 25 are Wednesdays; Mar 28 is a Saturday, so Friday the 27th
    ("0 0 9 L-3W * ?", "2026-01-01", ["2026-01-28", "2026-02-25", "2026-03-27"]),
    # Quartz's own example: L-1W in October 2010 is Friday the 29th (the 30th is a Saturday)
    ("0 15 10 L-1W * ? 2010", "2010-10-01", ["2010-10-29"]),
    # last Thursday / last Friday, nth weekday
    ("0 0 9 ? * 5L", "2026-01-01", ["2026-01-29", "2026-02-26", "2026-03-26"]),
    ("0 0 9 ? * FRIL", "2026-01-01", ["2026-01-30", "2026-02-27", "2026-03-27"]),
    ("0 0 9 ? * 6#3", "2026-01-01", ["2026-01-16", "2026-02-20", "2026-03-20"]),
    ("0 0 9 ? * FRI#5", "2026-01-01", ["2026-01-30", "2026-05-29"]),
    # year field
    ("0 0 0 1 1 ? 2027-2031/2", "2026-05-01", ["2027-01-01", "2029-01-01", "2031-01-01", "none"]),
    ("0 0 0 1 1 ? 2030,2028", "2026-05-01", ["2028-01-01", "2030-01-01", "none"]),
    ("0 0 0 1 1 ? *", "2026-05-01", ["2027-01-01"]),
    ("0 0 0 1 1 ? 2020", "2026-05-01", ["none"]),
    ("0 0 0 29 2 ? 2027", "2026-05-01", ["none"]),
]


@pytest.mark.parametrize(("expression", "after", "expected"), QUARTZ_DAY_EXAMPLES)
def test_quartz_day_fields(expression: str, after: str, expected: list[str]) -> None:
    got = [text[:10] for text in fires(expression, "UTC", after, len(expected))]
    assert got == expected


def test_quartz_fires_at_the_given_time_of_day() -> None:
    assert fires("0 15 10 ? * 6L", "UTC", "2026-01-01", 1) == ["2026-01-30T10:15:00+00:00"]
    assert fires("30 15 10 ? * 6#3", "UTC", "2026-01-16T10:15:30", 1) == [
        "2026-02-20T10:15:30+00:00"
    ]


def test_next_fire_is_strictly_after_and_in_utc() -> None:
    trigger = CronTrigger.parse("0/5 * * * * ?", "Asia/Shanghai")
    at_fire = datetime(2026, 5, 1, 10, 0, 5, tzinfo=UTC)
    assert trigger.next_fire(at_fire) == datetime(2026, 5, 1, 10, 0, 10, tzinfo=UTC)
    just_before = at_fire - timedelta(microseconds=1)
    result = trigger.next_fire(just_before)
    assert result == at_fire
    assert result is not None and result.tzinfo is UTC


def test_next_fire_rejects_naive_datetimes() -> None:
    with pytest.raises(ValueError, match="aware"):
        CronTrigger.parse("* * * * * ?").next_fire(datetime(2026, 1, 1))


def test_trigger_is_a_value() -> None:
    a = CronTrigger.parse(" 0/5 * * * * ? ", "GMT+08:00")
    b = CronTrigger("0/5 * * * * ?", timezone(timedelta(hours=8)))
    assert a == b and hash(a) == hash(b)
    assert a != CronTrigger.parse("0/5 * * * * ?", "UTC")
    assert a.expression == "0/5 * * * * ?"


# ---- Unix ----------------------------------------------------------------------------

UNIX_EXAMPLES = [
    ("*/5 * * * *", "2026-05-01T10:00:03", ["2026-05-01T10:05:00", "2026-05-01T10:10:00"]),
    ("0 9 * * *", "2026-05-01T10:00", ["2026-05-02T09:00:00"]),
    # 0, 7 and SUN all mean Sunday; 2026-05-10 is a Sunday
    ("0 0 * * 0", "2026-05-06", ["2026-05-10T00:00:00"]),
    ("0 0 * * 7", "2026-05-06", ["2026-05-10T00:00:00"]),
    ("0 0 * * sun", "2026-05-06", ["2026-05-10T00:00:00"]),
    (
        "0 0 * * 5-7",
        "2026-05-06",
        ["2026-05-08T00:00:00", "2026-05-09T00:00:00", "2026-05-10T00:00:00"],
    ),
    # both day fields restricted: either one may match (1st/15th, or any Monday)
    (
        "0 0 1,15 * MON",
        "2026-01-01",
        [f"2026-{day}T00:00:00" for day in ("01-05", "01-12", "01-15", "01-19", "01-26", "02-01")],
    ),
    # day-of-month starts with '*': both must match (odd days that are Mondays)
    (
        "0 0 */2 * MON",
        "2026-01-01",
        [f"2026-{day}T00:00:00" for day in ("01-05", "01-19", "02-09")],
    ),
    ("30 2 1 jan,JUL ?", "2026-05-06", ["2026-07-01T02:30:00", "2027-01-01T02:30:00"]),
    ("@daily", "2026-05-06T10:00", ["2026-05-07T00:00:00"]),
    ("@hourly", "2026-05-06T10:00", ["2026-05-06T11:00:00"]),
    ("@weekly", "2026-05-06T10:00", ["2026-05-10T00:00:00"]),
]


@pytest.mark.parametrize(("expression", "after", "expected"), UNIX_EXAMPLES)
def test_unix_expressions(expression: str, after: str, expected: list[str]) -> None:
    got = [text[:19] for text in fires(expression, "UTC", after, len(expected))]
    assert got == expected


# ---- time zones ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "utc_hour", "utc_minute"),
    [
        ("Asia/Shanghai", 1, 0),
        ("GMT+08:00", 1, 0),
        ("GMT+8", 1, 0),
        ("GMT-5", 14, 0),
        ("gmt-05:00", 14, 0),
        ("GMT+0530", 3, 30),
        ("GMT", 9, 0),
        ("UTC", 9, 0),
        ("Etc/GMT-8", 1, 0),  # IANA's inverted sign: this is UTC+8
    ],
)
def test_time_zones(zone: str, utc_hour: int, utc_minute: int) -> None:
    trigger = CronTrigger.parse("0 0 9 * * ?", zone)
    after = datetime(2026, 5, 1, 0, 0, tzinfo=UTC)
    assert trigger.next_fire(after) == datetime(2026, 5, 1, utc_hour, utc_minute, tzinfo=UTC)


def test_fixed_offsets_parse_to_their_offset() -> None:
    assert parse_time_zone("GMT+08:00").utcoffset(None) == timedelta(hours=8)
    assert parse_time_zone("GMT-09:30").utcoffset(None) == timedelta(hours=-9, minutes=-30)
    assert parse_time_zone("UTC").utcoffset(None) == timedelta(0)
    assert parse_time_zone(" Asia/Shanghai ") == ZoneInfo("Asia/Shanghai")


@pytest.mark.parametrize("empty", [None, "", "  "])
def test_no_time_zone_means_the_local_zone(
    monkeypatch: pytest.MonkeyPatch, empty: str | None
) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    assert parse_time_zone(empty) == ZoneInfo("Asia/Tokyo")
    trigger = CronTrigger.parse("0 0 9 * * ?", empty)
    assert trigger.next_fire(datetime(2026, 5, 1, tzinfo=UTC)) == datetime(
        2026, 5, 2, 0, 0, tzinfo=UTC
    )
    # TZ changed within the process: the same expression follows the new local zone.
    monkeypatch.setenv("TZ", "Europe/Paris")
    trigger = CronTrigger.parse("0 0 9 * * ?", empty)
    assert trigger.next_fire(datetime(2026, 5, 1, tzinfo=UTC)) == datetime(
        2026, 5, 1, 7, 0, tzinfo=UTC
    )


@pytest.mark.parametrize(
    "zone", ["Mars/Olympus", "GMT+25", "GMT+08:75", "America", "../etc/passwd", "+08:00"]
)
def test_bad_time_zones_name_the_time_zone_field(zone: str) -> None:
    with pytest.raises(ConfigError) as caught:
        CronTrigger.parse("0 0 9 * * ?", zone)
    assert caught.value.field == "timeZone"
    assert str(caught.value).startswith(f"timeZone: {zone!r} ")
    assert "GMT+08:00" in str(caught.value)  # the message says how to fix it


# ---- daylight saving time ------------------------------------------------------------

DST_EXAMPLES = [
    # spring forward: a fixed-time job due in the gap fires once, when the gap ends
    (
        "0 30 2 * * ?",
        "America/New_York",
        "2026-03-08T00:00",
        ["2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"],
    ),
    (
        "0 30 2 * * ?",
        "Europe/Berlin",
        "2026-03-29T00:00",
        ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"],
    ),
    ("0 30 2 * * ?", "Australia/Sydney", "2026-10-04T00:00", ["2026-10-04T03:00:00+11:00"]),
    ("0 15 2 * * ?", "Australia/Lord_Howe", "2026-10-04T00:00", ["2026-10-04T02:30:00+11:00"]),
    ("0 30 0 * * ?", "Asia/Tehran", "2022-03-21T12:00", ["2022-03-22T01:00:00+04:30"]),
    # several fixed times in one gap still fire only once
    (
        "0 0,30 2 * * ?",
        "America/New_York",
        "2026-03-08T00:00",
        ["2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00"],
    ),
    (
        "30 30 2 * * ?",
        "Europe/Berlin",
        "2026-03-29T00:00",
        ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:30+02:00"],
    ),
    ("30 2 * * *", "America/New_York", "2026-03-08T00:00", ["2026-03-08T03:00:00-04:00"]),
    # interval jobs just have no fires in the gap
    (
        "0 0/30 * * * ?",
        "America/New_York",
        "2026-03-08T01:00",
        ["2026-03-08T01:30:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T03:30:00-04:00"],
    ),
    (
        "0 * * * *",
        "Europe/Berlin",
        "2026-03-29T01:00",
        ["2026-03-29T03:00:00+02:00", "2026-03-29T04:00:00+02:00"],
    ),
    ("0 0/30 2 * * ?", "America/New_York", "2026-03-08T00:00", ["2026-03-09T02:00:00-04:00"]),
    # fall back: a fixed-time job fires once, in the first pass
    (
        "0 30 1 * * ?",
        "America/New_York",
        "2026-11-01T00:00",
        ["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"],
    ),
    (
        "0 30 2 * * ?",
        "Europe/Berlin",
        "2026-10-25T00:00",
        ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"],
    ),
    (
        "0 30 2 * * ?",
        "Australia/Sydney",
        "2026-04-05T00:00",
        ["2026-04-05T02:30:00+11:00", "2026-04-06T02:30:00+10:00"],
    ),
    (
        "30 1 * * *",
        "America/New_York",
        "2026-11-01T00:00",
        ["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"],
    ),
    (
        "0 30 23 * * ?",
        "Asia/Tehran",
        "2022-09-21T12:00",
        ["2022-09-21T23:30:00+04:30", "2022-09-22T23:30:00+03:30"],
    ),
    # ... even when asked from inside the second pass
    (
        "0 55 1 * * ?",
        "America/New_York",
        "2026-11-01T01:10:00-05:00",
        ["2026-11-02T01:55:00-05:00"],
    ),
    # fall back: an hourly job fires in every real hour (Debian: 01:00 EDT and 01:00 EST)
    (
        "0 0 * * * ?",
        "America/New_York",
        "2026-11-01T00:00",
        ["2026-11-01T01:00:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00"],
    ),
    (
        "0 * * * *",
        "America/New_York",
        "2026-11-01T00:30",
        ["2026-11-01T01:00:00-04:00", "2026-11-01T01:00:00-05:00", "2026-11-01T02:00:00-05:00"],
    ),
    (
        "0 0 * * * ?",
        "Europe/Berlin",
        "2026-10-25T01:00",
        ["2026-10-25T02:00:00+02:00", "2026-10-25T02:00:00+01:00", "2026-10-25T03:00:00+01:00"],
    ),
    # sub-hour intervals follow real time across the repeated hour
    (
        "0 0/20 * * * ?",
        "Europe/Berlin",
        "2026-10-25T02:30",
        [
            "2026-10-25T02:40:00+02:00",
            "2026-10-25T02:00:00+01:00",
            "2026-10-25T02:20:00+01:00",
            "2026-10-25T02:40:00+01:00",
            "2026-10-25T03:00:00+01:00",
        ],
    ),
    (
        "0 0/30 * * * ?",
        "America/New_York",
        "2026-11-01T01:45:00-04:00",
        ["2026-11-01T01:00:00-05:00"],
    ),
    (
        "0 0/30 1 * * ?",
        "Australia/Lord_Howe",
        "2026-04-05T01:40:00+11:00",
        ["2026-04-05T01:30:00+10:30"],
    ),
]


@pytest.mark.parametrize(("expression", "zone", "after", "expected"), DST_EXAMPLES)
def test_dst_policy(expression: str, zone: str, after: str, expected: list[str]) -> None:
    assert fires(expression, zone, after, len(expected)) == expected


# ---- invalid expressions -------------------------------------------------------------

INVALID = [
    ("", "is empty"),
    ("   ", "is empty"),
    ("* * * *", "has 4 fields"),
    ("0 0 0 1 1 ? 2026 x", "has 8 fields"),
    ("@reboot", "not a known shorthand"),
    ("0 0 25 * * ?", "hour 25 is out of range 0-23"),
    ("60 * * * * ?", "second 60 is out of range 0-59"),
    ("0 60 * * * ?", "minute 60 is out of range 0-59"),
    ("0 0 0 32 * ?", "day-of-month 32 is out of range 1-31"),
    ("0 0 0 0 * ?", "day-of-month 0 is out of range 1-31"),
    ("0 0 0 1 13 ?", "month 13 is out of range 1-12"),
    ("0 0 0 ? * 0", "day-of-week 0 is out of range 1-7"),
    ("0 0 0 1 1 ? 1969", "year 1969 is out of range 1970-2099"),
    ("0 0 * * 8", "day-of-week 8 is out of range 0-7"),
    ("0 24 * * *", "hour 24 is out of range 0-23"),
    ("5-1 * * * *", "range 5-1 runs backwards"),
    ("0 0 12 1 * MON", "sets both day-of-month '1' and day-of-week 'MON'"),
    ("0 0 12 * * *", "did you mean '0 0 12 * * ?'"),
    ("0 0 12 ? * ?", "'?' in both"),
    ("? 0 12 ? * MON", "second '?' is only allowed in day-of-month or day-of-week"),
    ("0 0 12 ? * 6#6", "'6#6' occurrence 6 is out of range 1-5"),
    ("0 0 12 ? * 6#0", "'6#0' occurrence 0 is out of range 1-5"),
    ("0 0 12 ? * 6#", "occurrence '' is not a number"),
    ("0 0 12 ? * #3", "'#3' is incomplete"),
    ("0 0 12 ? * FUN#3", "'FUN' is not a number"),
    ("0 0 12 L-31 * ?", "'L-31' offset 31 is out of range 0-30"),
    ("0 0 12 32W * ?", "32 is out of range 1-31"),
    ("0/0 * * * * ?", "step 0 is out of range"),
    ("0 0 0 30 2 ?", "never occurs in month '2'"),
    ("0 0 0 31 APR,JUN ?", "never occurs"),
    ("0 0 MON * * ?", "hour 'MON' is not a number"),
    ("hello world this is not cron", "second 'hello' is not a number"),
    ("0 0 0 1-  * ?", "'1-' is incomplete"),
    ("0 0 0 ? * ½", "is not a number"),
    # What Quartz 2.3.2 refuses: steps above 59/59/23, and L, W or # terms in a list.
    ("0/60 * * * * ?", "second step 60 is out of range 1-59"),
    ("0 */60 * * * ?", "minute step 60 is out of range 1-59"),
    ("0 0 0/24 * * ?", "hour step 24 is out of range 1-23"),
    ("0 0 0 L,15 * ?", "day-of-month 'L,15' lists a L/W term with other terms"),
    ("0 0 0 1,15W * ?", "lists a L/W term"),
    ("0 0 0 LW,L-2 * ?", "lists a L/W term"),
    ("0 0 0 ? * 5L,6L", "day-of-week '5L,6L' lists a L/# term with other terms"),
    ("0 0 0 ? * 6#3,2#1", "lists a L/# term"),
    ("0 0 12 ? * 2#1,6", "which Quartz does not support"),
    ("0 0 12 ? * L,MON", "lists a L/# term"),
    ("0 0 12 L-xW * ?", "day-of-month 'L-xW' offset 'x' is not a number"),
]


@pytest.mark.parametrize(("expression", "problem"), INVALID)
def test_invalid_expressions_name_the_cron_field(expression: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        CronTrigger.parse(expression, "UTC")
    message = str(caught.value)
    assert caught.value.field == "cron"
    assert message.startswith(f"cron: {expression.strip()!r} ")
    assert problem in message
    assert "; " in message and "\n" not in message  # problem; how to fix, on one line


def test_out_of_range_message_matches_the_documented_form() -> None:
    with pytest.raises(ConfigError) as caught:
        CronTrigger.parse("0 0 25 * * ?")
    assert str(caught.value) == (
        "cron: '0 0 25 * * ?' hour 25 is out of range 0-23; use a Quartz expression like '0/5 * * * * ?'"
    )


def test_non_string_expression_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not a string"):
        CronTrigger.parse(5)  # type: ignore[arg-type]


# ---- properties against brute force --------------------------------------------------

QUARTZ_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
FIXED_ZONES = {
    "UTC": timedelta(0),
    "GMT": timedelta(0),
    "GMT+08:00": timedelta(hours=8),
    "GMT-05:00": timedelta(hours=-5),
    "GMT+05:30": timedelta(hours=5, minutes=30),
    "GMT-09:30": timedelta(hours=-9, minutes=-30),
    "GMT+14:00": timedelta(hours=14),
    "GMT-12": timedelta(hours=-12),
}

DayTest = Callable[[date], bool]
Field = tuple[str, frozenset[int]]  # text, and the values it stands for


@dataclass(frozen=True, repr=False)
class Reference:
    """What an expression means, worked out by the test without the parser under test."""

    text: str
    interval: bool  # the DST policy's "interval job": minute or hour starts with * or 0/
    seconds: tuple[int, ...]  # sorted
    minutes: frozenset[int]
    hours: frozenset[int]
    months: frozenset[int]
    years: frozenset[int] | None
    day: DayTest

    def __repr__(self) -> str:
        return f"Reference({self.text!r})"

    def day_matches(self, day: date) -> bool:
        return (
            day.month in self.months
            and (self.years is None or day.year in self.years)
            and self.day(day)
        )

    def minute_matches(self, wall: datetime) -> bool:
        return (
            wall.minute in self.minutes
            and wall.hour in self.hours
            and self.day_matches(wall.date())
        )


def cyclic(lo: int, hi: int, first: int, last: int, step: int) -> frozenset[int]:
    """first..last, wrapping past hi back to lo, every step-th value."""
    size = hi - lo + 1
    count = (last - first) % size + 1
    return frozenset(lo + (first - lo + k) % size for k in range(0, count, step))


@st.composite
def term(
    draw: st.DrawFn, lo: int, hi: int, *, wrap: bool, names: tuple[str, ...] = (), base: int = 0
) -> Field:
    """One list item of a numeric field: a value, a range, or a step."""
    first, last = draw(st.integers(lo, hi)), draw(st.integers(lo, hi))
    # Quartz caps steps at 59 for seconds and minutes and 23 for hours (the 0-based fields).
    step = draw(st.integers(1, hi - lo if lo == 0 else hi - lo + 1))
    kind = draw(st.sampled_from(["value", "value", "range", "range/step", "start/step", "*/step"]))

    def show(value: int) -> str:
        if names and 0 <= value - base < len(names) and draw(st.booleans()):
            name = names[value - base]
            return name if draw(st.booleans()) else name.lower()
        return str(value)

    if kind == "value":
        return show(first), frozenset({first})
    if kind == "start/step":
        return f"{first}/{step}", frozenset(range(first, hi + 1, step))
    if kind == "*/step":
        return f"*/{step}", frozenset(range(lo, hi + 1, step))
    if not wrap and first > last:
        first, last = last, first
    text = f"{show(first)}-{show(last)}"
    if kind == "range":
        return text, cyclic(lo, hi, first, last, 1)
    return f"{text}/{step}", cyclic(lo, hi, first, last, step)


@st.composite
def any_field(
    draw: st.DrawFn, lo: int, hi: int, *, wrap: bool, names: tuple[str, ...] = (), base: int = 0
) -> Field:
    if draw(st.integers(0, 3)) == 0:
        return "*", frozenset(range(lo, hi + 1))
    items = draw(st.lists(term(lo, hi, wrap=wrap, names=names, base=base), min_size=1, max_size=3))
    return ",".join(text for text, _ in items), frozenset().union(*(values for _, values in items))


def general(lo: int, hi: int, wrap: bool) -> st.SearchStrategy[Field]:
    return any_field(lo, hi, wrap=wrap)


def few_values(lo: int, hi: int, wrap: bool) -> st.SearchStrategy[Field]:
    values = st.lists(st.integers(lo, hi), min_size=1, max_size=3)
    return values.map(lambda vs: (",".join(map(str, vs)), frozenset(vs)))


def last_day(day: date) -> int:
    following = date(day.year + day.month // 12, day.month % 12 + 1, 1)
    return (following - timedelta(days=1)).day


def weekdays_of_month(day: date) -> list[int]:
    return [d for d in range(1, last_day(day) + 1) if day.replace(day=d).weekday() < 5]


# Day tests, each the plain definition of one day-field item (bound with partial).


def day_in(values: frozenset[int], day: date) -> bool:
    return day.day in values


def is_before_last(n: int, day: date) -> bool:
    return day.day == last_day(day) - n


def is_last_weekday_of_month(day: date) -> bool:
    return day.day == max(weekdays_of_month(day))


def is_nearest_weekday(target: int, day: date) -> bool:
    """Of the weekdays of this month, is ``day`` the one closest to ``target``?"""
    if target > last_day(day):
        return False
    return day.day == min(weekdays_of_month(day), key=lambda d: abs(d - target))


def is_nearest_weekday_before_last(n: int, day: date) -> bool:
    return n < last_day(day) and is_nearest_weekday(last_day(day) - n, day)


def weekday_numbers(quartz: bool, day: date) -> set[int]:
    """The dialect's numbers for the weekday of ``day`` (Quartz 1=SUN; Unix 0 or 7=SUN)."""
    sunday_based = day.isoweekday() % 7
    if quartz:
        return {sunday_based + 1}
    return {0, 7} if sunday_based == 0 else {sunday_based}


def weekday_in(quartz: bool, values: frozenset[int], day: date) -> bool:
    return bool(weekday_numbers(quartz, day) & values)


def is_last_of_weekday(quartz: bool, n: int, day: date) -> bool:
    return n in weekday_numbers(quartz, day) and day.day + 7 > last_day(day)


def is_nth_of_weekday(quartz: bool, n: int, k: int, day: date) -> bool:
    return n in weekday_numbers(quartz, day) and (day.day - 1) // 7 + 1 == k


def any_of(items: list[tuple[str, DayTest]]) -> tuple[str, DayTest]:
    return ",".join(text for text, _ in items), lambda d: any(test(d) for _, test in items)


@st.composite
def dom_field(draw: st.DrawFn, *, specials: bool, quartz: bool) -> tuple[str, DayTest]:
    kinds = ["plain", "L", "L-n", "LW", "nW", "L-nW"] if specials else ["plain"]
    items: list[tuple[str, DayTest]] = []
    for kind in draw(st.lists(st.sampled_from(kinds), min_size=1, max_size=2)):
        n = draw(st.integers(1, 31))
        if kind == "plain":
            text, values = draw(term(1, 31, wrap=False))
            items.append((text, partial(day_in, values)))
        elif kind == "L":
            items.append(("L", partial(is_before_last, 0)))
        elif kind == "L-n":
            items.append((f"L-{n - 1}", partial(is_before_last, n - 1)))
        elif kind == "LW":
            items.append(("LW", is_last_weekday_of_month))
        elif kind == "L-nW":
            items.append((f"L-{n - 1}W", partial(is_nearest_weekday_before_last, n - 1)))
        else:
            items.append((f"{n}W", partial(is_nearest_weekday, n)))
    return any_of(alone_if_special(items, quartz, "LW"))


def alone_if_special(
    items: list[tuple[str, DayTest]], quartz: bool, letters: str
) -> list[tuple[str, DayTest]]:
    """Quartz refuses a list holding an L/W/# term: keep such a term alone."""
    special = [each for each in items if any(c in each[0].upper() for c in letters)]
    return special[:1] if quartz and special else items


@st.composite
def dow_field(draw: st.DrawFn, *, quartz: bool, specials: bool) -> tuple[str, DayTest]:
    lo, hi = (1, 7) if quartz else (0, 7)
    kinds = ["plain", "nL", "n#k"] if specials else ["plain"]
    items: list[tuple[str, DayTest]] = []
    for kind in draw(st.lists(st.sampled_from(kinds), min_size=1, max_size=2)):
        n, k = draw(st.integers(lo, hi)), draw(st.integers(1, 5))
        shown = QUARTZ_DAYS[(n - lo) % 7] if draw(st.booleans()) else str(n)
        if kind == "plain":
            text, values = draw(term(lo, hi, wrap=quartz, names=QUARTZ_DAYS, base=lo))
            items.append((text, partial(weekday_in, quartz, values)))
        elif kind == "nL":
            items.append((f"{shown}L", partial(is_last_of_weekday, quartz, n)))
        else:
            items.append((f"{shown}#{k}", partial(is_nth_of_weekday, quartz, n, k)))
    return any_of(alone_if_special(items, quartz, "L#"))


ANY_DAY: tuple[str, DayTest] = ("*", lambda d: True)


@st.composite
def expressions(
    draw: st.DrawFn,
    *,
    seconds: Callable[[int, int, bool], st.SearchStrategy[Field]],
    times: Callable[[int, int, bool], st.SearchStrategy[Field]],
    specials: bool,
) -> Reference:
    """A random Quartz or Unix expression, and its meaning."""
    quartz = draw(st.booleans())
    second_text, second_values = draw(seconds(0, 59, quartz)) if quartz else ("", frozenset({0}))
    minute_text, minute_values = draw(times(0, 59, quartz))
    hour_text, hour_values = draw(times(0, 23, quartz))
    month_text, month_values = draw(
        st.one_of(
            st.just(("*", frozenset(range(1, 13)))),
            any_field(1, 12, wrap=quartz, names=MONTHS, base=1),
        )
    )
    dom_text, dom_test = draw(
        st.one_of(st.just(ANY_DAY), dom_field(specials=specials, quartz=quartz))
    )
    dow_text, dow_test = draw(
        st.one_of(st.just(ANY_DAY), dow_field(quartz=quartz, specials=specials))
    )
    years: frozenset[int] | None = None
    day: DayTest
    if quartz:
        if draw(st.booleans()):
            dom_text, day = "?", dow_test
        else:
            dow_text, day = "?", dom_test
        fields = [second_text, minute_text, hour_text, dom_text, month_text, dow_text]
        if draw(st.booleans()):
            year_text, years = draw(any_field(2019, 2034, wrap=False))
            # the year field's own range starts at 1970, so spell '*/n' from 2019
            fields.append(year_text.replace("*/", "2019/").replace("*", "2019-2034"))
    else:
        fields = [minute_text, hour_text, dom_text, month_text, dow_text]
        if dom_text.startswith("*") or dow_text.startswith("*"):
            day = lambda d: dom_test(d) and dow_test(d)
        else:  # Vixie: both restricted, so either may match
            day = lambda d: dom_test(d) or dow_test(d)
    interval = minute_text.startswith(("*", "0/")) or hour_text.startswith(("*", "0/"))
    return Reference(
        text=" ".join(fields),
        interval=interval,
        seconds=tuple(sorted(second_values)),
        minutes=minute_values,
        hours=hour_values,
        months=month_values,
        years=years,
        day=day,
    )


def parse(ref: Reference, zone: str) -> CronTrigger:
    """Parse, accepting only the refusal of day-of-month lists that can never match."""
    try:
        return CronTrigger.parse(ref.text, zone)
    except ConfigError as error:
        assert "never occurs" in str(error), str(error)
        leap_year = [date(2028, 1, 1) + timedelta(days=n) for n in range(366)]
        assert not any(d.month in ref.months and ref.day(d) for d in leap_year)
        reject()


AFTER = st.datetimes(
    min_value=datetime(2020, 1, 1), max_value=datetime(2030, 12, 31), timezones=st.just(UTC)
)


def brute_by_minute(
    ref: Reference, offset: timedelta, after: datetime, until: datetime
) -> datetime | None:
    """Step through real minutes, reading each on the zone's clock."""
    minute = after.replace(second=0, microsecond=0)
    while minute <= until:
        if ref.minute_matches((minute + offset).replace(tzinfo=None)):
            for second in ref.seconds:
                if minute + timedelta(seconds=second) > after:
                    return minute + timedelta(seconds=second)
        minute += timedelta(minutes=1)
    return None


def brute_by_day(ref: Reference, offset: timedelta, after: datetime, days: int) -> datetime | None:
    """Walk the zone's calendar days; on a matching day try every listed time in order."""
    first = (after + offset).date()
    for n in range(days):
        day = first + timedelta(days=n)
        if not ref.day_matches(day):
            continue
        for hour in sorted(ref.hours):
            for minute in sorted(ref.minutes):
                for second in ref.seconds:
                    wall = datetime(day.year, day.month, day.day, hour, minute, second, tzinfo=UTC)
                    if wall - offset > after:
                        return wall - offset
    return None


@settings(max_examples=200, deadline=None)
@given(
    ref=expressions(
        seconds=general,
        times=general,
        specials=False,
    ),
    zone=st.sampled_from(sorted(FIXED_ZONES)),
    after=AFTER,
)
def test_matches_brute_force_minute_by_minute(ref: Reference, zone: str, after: datetime) -> None:
    until = after + timedelta(days=1)
    expected = brute_by_minute(ref, FIXED_ZONES[zone], after, until)
    got = parse(ref, zone).next_fire(after)
    if expected is None:
        assert got is None or got > until
    else:
        assert got == expected


@settings(max_examples=250, deadline=None)
@given(
    ref=expressions(seconds=few_values, times=few_values, specials=True),
    zone=st.sampled_from(sorted(FIXED_ZONES)),
    after=AFTER,
)
def test_matches_brute_force_day_by_day(ref: Reference, zone: str, after: datetime) -> None:
    days = 500
    expected = brute_by_day(ref, FIXED_ZONES[zone], after, days)
    got = parse(ref, zone).next_fire(after)
    if expected is None:
        assert got is None or got > after + timedelta(days=days - 2)
    else:
        assert got == expected


# Instants where a zone's offset changes; the DST property starts near them.
TRANSITIONS = [
    ("America/New_York", datetime(2026, 3, 8, 7, tzinfo=UTC)),
    ("America/New_York", datetime(2026, 11, 1, 6, tzinfo=UTC)),
    ("Europe/Berlin", datetime(2026, 3, 29, 1, tzinfo=UTC)),
    ("Europe/Berlin", datetime(2026, 10, 25, 1, tzinfo=UTC)),
    ("Australia/Sydney", datetime(2026, 4, 4, 16, tzinfo=UTC)),
    ("Australia/Sydney", datetime(2026, 10, 3, 16, tzinfo=UTC)),
    ("Australia/Lord_Howe", datetime(2026, 4, 4, 15, tzinfo=UTC)),  # 30-minute DST
    ("Australia/Lord_Howe", datetime(2026, 10, 3, 15, 30, tzinfo=UTC)),
    ("Asia/Tehran", datetime(2022, 3, 21, 20, 30, tzinfo=UTC)),  # at midnight
    ("Asia/Tehran", datetime(2022, 9, 21, 19, 30, tzinfo=UTC)),
]


def brute_in_zone(
    ref: Reference, zone: ZoneInfo, after: datetime, until: datetime
) -> list[datetime]:
    """Every fire in (after, until] under the documented DST policy, stepping real minutes."""
    found: set[datetime] = set()
    minute = after.replace(second=0, microsecond=0)
    previous = minute.astimezone(zone).utcoffset()
    while minute <= until:
        local = minute.astimezone(zone)
        offset = local.utcoffset()
        assert offset is not None and previous is not None
        # a wall time seen a second time fires again only for interval jobs
        if ref.minute_matches(local.replace(tzinfo=None)) and (ref.interval or local.fold == 0):
            found.update(minute + timedelta(seconds=second) for second in ref.seconds)
        if offset > previous and not ref.interval:
            # the clocks jumped forward at `minute`: fixed-time jobs due in the gap fire now
            skipped = (minute + previous).replace(tzinfo=None)
            while skipped < (minute + offset).replace(tzinfo=None):
                if ref.minute_matches(skipped):
                    found.add(minute)
                skipped += timedelta(minutes=1)
        previous = offset
        minute += timedelta(minutes=1)
    return sorted(t for t in found if after < t <= until)


@settings(max_examples=150, deadline=None)
@given(
    ref=expressions(seconds=few_values, times=general, specials=False),
    transition=st.sampled_from(TRANSITIONS),
    lead=st.integers(-6 * 3600, 3 * 3600),
)
def test_dst_zones_follow_the_policy_and_never_repeat(
    ref: Reference, transition: tuple[str, datetime], lead: int
) -> None:
    name, change = transition
    after = change + timedelta(seconds=lead, microseconds=lead % 7)
    until = change + timedelta(hours=6)
    trigger = parse(ref, name)
    got: list[datetime] = []
    moment = trigger.next_fire(after)
    while moment is not None and moment <= until:
        assert moment > (got[-1] if got else after)  # strictly increasing: never twice
        got.append(moment)
        moment = trigger.next_fire(moment)
    assert got == brute_in_zone(ref, ZoneInfo(name), after, until)


def test_jobs_on_the_same_schedule_share_one_trigger_and_bad_ones_still_fail() -> None:
    assert CronTrigger.parse("0 * * * * ?") is CronTrigger.parse(" 0 * * * * ? ")
    assert CronTrigger.parse("0 * * * * ?", "UTC") is not CronTrigger.parse("0 * * * * ?")
    for _ in range(2):  # a failure is not remembered as a trigger
        with pytest.raises(ConfigError, match="cron"):
            CronTrigger.parse("61 * * * * ?")


def test_jobs_due_together_compute_their_next_fire_once_and_each_instant_its_own() -> None:
    trigger = CronTrigger.parse("*/5 * * * * ?")
    at = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
    first = trigger.next_fire(at)
    assert first == datetime(2026, 3, 1, 12, 0, 5, tzinfo=UTC)
    assert trigger.next_fire(datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)) is first
    assert trigger.next_fire(first) == datetime(2026, 3, 1, 12, 0, 10, tzinfo=UTC)
    assert trigger.next_fire(at) == first
    # The jobs of a late tick each ask from their own instant of a second: one answer.
    instants = [at + timedelta(microseconds=us) for us in (1, 300_000, 999_999)]
    assert all(trigger.next_fire(t) is first for t in instants)
    # Many seconds later (the memo is bounded and starts over), answers are still right.
    walked = [trigger.next_fire(at + timedelta(seconds=s, microseconds=5)) for s in range(200)]
    assert walked == [at + timedelta(seconds=5 * (s // 5 + 1)) for s in range(200)]
    # Equal local times of a repeated hour are different instants (fold): none is kept.
    zoned = CronTrigger.parse("0 30 * * * ?", "Europe/Berlin")
    berlin = ZoneInfo("Europe/Berlin")
    early = datetime(2026, 10, 25, 2, 10, tzinfo=berlin)  # first pass, UTC+2
    late = early.replace(fold=1)  # second pass, UTC+1
    assert zoned.next_fire(early) == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    assert zoned.next_fire(late) == datetime(2026, 10, 25, 1, 30, tzinfo=UTC)
