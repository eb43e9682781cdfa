"""Sharding strategies: which instance runs which items, as pure functions.

Java-compatible: for the same instance list, job name and item count, each
built-in strategy gives the assignment that ElasticJob 3.x gives (reference
§1.4), so mixed Java and Python clusters agree on who runs what.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import cast

from shardcron.errors import ConfigError, ShardcronError

Strategy = Callable[[Sequence[str], str, int], dict[str, list[int]]]
"""(instance_ids in order_instances order, job_name, sharding_total_count) -> id -> sorted items."""

DEFAULT_STRATEGY = "AVG_ALLOCATION"
_FIELD = "jobShardingStrategyType"
_INT_MIN = -(2**31)


def java_string_hash(s: str) -> int:
    """Java ``String.hashCode``: over UTF-16 code units, wrapped to a signed 32-bit int."""
    units = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - 2**32 if h >= 2**31 else h


def _utf16_key(s: str) -> bytes:
    # Big-endian UTF-16 bytes compare like Java's code-unit order. This differs from
    # Python's code-point order only when an id mixes astral characters with U+E000..U+FFFF;
    # for ASCII ids (the usual ip@-@pid) both orders are the same.
    return s.encode("utf-16-be", "surrogatepass")


def order_instances(instance_ids: Sequence[str]) -> list[str]:
    """Descending lexicographic order, as Java's ``getChildrenKeys`` returns instances.

    Note it is string order, not numeric IP order: ``10.0.0.9@-@7`` sorts before ``10.0.0.10@-@7``.
    """
    return sorted(instance_ids, key=_utf16_key, reverse=True)


def _check(instance_ids: Sequence[str], total: int) -> None:
    if total < 0:
        raise ConfigError("shardingTotalCount", f"must not be negative, got {total}")
    if len(set(instance_ids)) != len(instance_ids):
        raise ShardcronError(f"duplicate instance ids in {list(instance_ids)!r}")


def avg_allocation(instance_ids: Sequence[str], job_name: str, total: int) -> dict[str, list[int]]:
    """AVG_ALLOCATION: equal contiguous blocks; the remainder goes one each to the first instances.

    3 instances, 8 items -> [0, 1, 6], [2, 3, 7], [4, 5].
    """
    _check(instance_ids, total)
    count = len(instance_ids)
    if count == 0:
        return {}
    per, extra = divmod(total, count)
    result: dict[str, list[int]] = {}
    for j, instance_id in enumerate(instance_ids):
        items = list(range(j * per, (j + 1) * per))
        if j < extra:
            items.append(per * count + j)
        result[instance_id] = items
    return result


def odevity(instance_ids: Sequence[str], job_name: str, total: int) -> dict[str, list[int]]:
    """ODEVITY: an even job-name hash reverses the list, then AVG_ALLOCATION.

    Spreads single-item jobs over both ends of the list instead of always the first instance.
    """
    ordered = list(instance_ids)
    # Parity does not depend on sign, so Python's % agrees with Java's truncating %.
    if java_string_hash(job_name) % 2 == 0:
        ordered.reverse()
    return avg_allocation(ordered, job_name, total)


def _java_abs(value: int) -> int:
    # Java's Math.abs overflows on Integer.MIN_VALUE and returns it unchanged.
    return value if value == _INT_MIN else abs(value)


def round_robin(instance_ids: Sequence[str], job_name: str, total: int) -> dict[str, list[int]]:
    """ROUND_ROBIN: rotate the list left by ``abs(hash) % n``, then AVG_ALLOCATION.

    For a name hashing to Integer.MIN_VALUE Java's offset is negative and its rotation indexes
    out of bounds (sharding fails) unless n is a power of two. Reducing the offset modulo n
    keeps Java's result wherever Java has one and gives a deterministic rotation elsewhere.
    """
    ordered = list(instance_ids)
    if ordered:
        offset = _java_abs(java_string_hash(job_name)) % len(ordered)
        ordered = ordered[offset:] + ordered[:offset]
    return avg_allocation(ordered, job_name, total)


STRATEGIES: Mapping[str, Strategy] = MappingProxyType(
    {
        "AVG_ALLOCATION": avg_allocation,
        "ODEVITY": odevity,
        "ROUND_ROBIN": round_robin,
    }
)


def _import_strategy(ref: str) -> Strategy:
    module_name, _, qualname = ref.partition(":")
    if not module_name or not qualname:
        raise ConfigError(_FIELD, f"custom strategy {ref!r} must look like 'module:qualname'")
    try:
        target: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(_FIELD, f"cannot import module {module_name!r}: {exc}") from exc
    for part in qualname.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as exc:
            raise ConfigError(_FIELD, f"{ref!r}: {module_name!r} has no {qualname!r}") from exc
    if not callable(target):
        raise ConfigError(_FIELD, f"{ref!r} is not callable")
    return cast(Strategy, target)


def resolve_strategy(name: str | None) -> Strategy:
    """A built-in strategy by name, or a custom one by ``module:qualname``.

    ``None`` or ``""`` means AVG_ALLOCATION, as Java treats a missing or empty type.
    """
    if not name:
        return STRATEGIES[DEFAULT_STRATEGY]
    if name in STRATEGIES:
        return STRATEGIES[name]
    if ":" in name:
        return _import_strategy(name)
    known = ", ".join(STRATEGIES)
    raise ConfigError(
        _FIELD, f"unknown strategy {name!r}; use one of {known} or a 'module:qualname' callable"
    )
