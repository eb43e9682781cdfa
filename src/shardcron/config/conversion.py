"""Conversion of loosely typed config values (YAML scalars, CLI and URL strings) to Python
values, with the one-line ConfigError wording for a wrong value or an unknown key. The job,
registry, instance and config-file readers all convert through here.
"""

from __future__ import annotations

import difflib
import enum
import re
from collections.abc import Iterable, Mapping
from typing import Any

from shardcron.config.jobtypes import JobType
from shardcron.config.snakeyaml import Props
from shardcron.errors import ConfigError


class _Kind(enum.Enum):
    TEXT = "text"
    OPTIONAL_TEXT = "optional text"
    INT = "integer"
    BOOL = "boolean"
    LIST = "list"
    PROPS = "mapping"
    JOB_TYPE = "job type"


def _convert(key: str, kind: _Kind, raw: object) -> Any:
    """``raw`` as the Python type of ``kind``; ConfigError naming ``key`` otherwise."""
    match kind:
        case _Kind.TEXT | _Kind.OPTIONAL_TEXT:
            return _text(key, raw)
        case _Kind.INT:
            if isinstance(raw, int) and not isinstance(raw, bool):
                return raw
            if isinstance(raw, str) and re.fullmatch(r"\s*[+-]?[0-9]+\s*", raw):
                return int(raw)
        case _Kind.BOOL:
            if isinstance(raw, bool):
                return raw
            if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
                return raw.strip().lower() == "true"
        case _Kind.LIST:
            if isinstance(raw, str):
                return tuple(part.strip() for part in raw.split(",") if part.strip())
            if isinstance(raw, list | tuple):
                return tuple(_text(key, each) for each in raw)
        case _Kind.PROPS:
            if isinstance(raw, Mapping):
                return Props({str(k): _text(f"{key}.{k}", v) for k, v in raw.items()})
        case _Kind.JOB_TYPE:
            return _job_type(_text(key, raw), key)
    raise ConfigError(key, f"expected {_article(kind.value)}, got {_shown(raw)}")


def _text(key: str, raw: object) -> str:
    if isinstance(raw, str):
        return raw
    if isinstance(raw, bool):  # as Java prints it, so `streaming.process: true` works
        return "true" if raw else "false"
    if isinstance(raw, int | float):
        return str(raw)
    raise ConfigError(key, f"expected text, got {_shown(raw)}")


def _job_type(raw: str, key: str) -> JobType:
    try:
        return JobType(raw.strip().upper())
    except ValueError:
        raise ConfigError(key, f"unknown job type {raw!r}; use {_choices(JobType)}") from None


def _article(noun: str) -> str:
    return f"an {noun}" if noun[0] in "aeiou" else f"a {noun}"


def _kind_name(raw: object) -> str:
    if raw is None:
        return "nothing"
    if isinstance(raw, dict):
        return "a mapping"
    return "a list" if isinstance(raw, list) else _article(type(raw).__name__)


def _shown(raw: object) -> str:
    if isinstance(raw, bool):
        return "true" if raw else "false"
    return repr(raw) if isinstance(raw, str | int | float) else _kind_name(raw)


def _unknown_key(key: str, known: Iterable[str], job: str | None) -> ConfigError:
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return ConfigError(key, f"unknown key{hint}", job=job)


def _choices(values: Iterable[str]) -> str:
    return ", ".join(values)


def parse_sharding_item_parameters(text: str) -> dict[int, str]:
    """Split on ``,`` then on the first ``=``, both sides trimmed; blank means none."""
    result: dict[int, str] = {}
    if not text.strip():
        return result
    for pair in text.split(","):
        item, sep, value = pair.partition("=")
        item = item.strip()
        if not sep:
            raise ConfigError(
                "shardingItemParameters", f"{pair.strip()!r} is not ITEM=VALUE; write e.g. 0=a,1=b"
            )
        if not re.fullmatch(r"[+-]?[0-9]+", item):
            raise ConfigError(
                "shardingItemParameters",
                f"{item!r} is not an item number; write e.g. 0=a,1=b",
            )
        number = int(item)
        if number in result:
            raise ConfigError("shardingItemParameters", f"item {number} is given twice")
        result[number] = value.strip()
    return result
