"""Sharding strategies: which instance runs which items, as pure functions.

Java-compatible: for the same instance list, job name and item count, each
built-in strategy gives the assignment that ElasticJob 3.x gives (reference
§1.4), so mixed Java and Python clusters agree on who runs what.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import cast

from shardcron import plugins
from shardcron.errors import ConfigError, ShardcronError
from shardcron.plugins import Kind

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


def _java_int(value: int) -> int:
    """``value`` wrapped to a signed 32-bit int, as Java's int arithmetic and ``(int)`` do."""
    value &= 0xFFFFFFFF
    return value - 2**32 if value >= 2**31 else value


def single_sharding_balance(
    instance_ids: Sequence[str], job_name: str, total: int, *, now_ms: int | None = None
) -> dict[str, list[int]]:
    """SINGLE_SHARDING_BALANCE (ElasticJob 3.0.5+): ROUND_ROBIN with a moving offset.

    The rotation adds the clock to the name's hash: ``abs(int(hash + int(millis))) % n``,
    where both additions wrap like Java ints and ``millis`` is cut to its low 32 bits. So a
    one-item job moves from instance to instance as reshards happen over time instead of
    always landing on the same one. ``now_ms`` (epoch milliseconds) pins the clock for tests
    and for comparing with Java; as in ROUND_ROBIN, an ``Integer.MIN_VALUE`` sum (where Java
    fails unless n is a power of two) is reduced modulo n.
    """
    ordered = list(instance_ids)
    if ordered:
        millis = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        mixed = _java_int(java_string_hash(job_name) + _java_int(millis))
        offset = _java_abs(mixed) % len(ordered)
        ordered = ordered[offset:] + ordered[:offset]
    return avg_allocation(ordered, job_name, total)


STRATEGIES: Mapping[str, Strategy] = MappingProxyType(
    {
        "AVG_ALLOCATION": avg_allocation,
        "ODEVITY": odevity,
        "ROUND_ROBIN": round_robin,
        "SINGLE_SHARDING_BALANCE": single_sharding_balance,
    }
)


def resolve_strategy(name: str | None) -> Strategy:
    """A built-in strategy by name, or one registered in this process (see
    :mod:`shardcron.plugins`). Never imports: the name may come from the registry.

    ``None`` or ``""`` means AVG_ALLOCATION, as Java treats a missing or empty type.
    """
    if not name:
        return STRATEGIES[DEFAULT_STRATEGY]
    if name in STRATEGIES:
        return STRATEGIES[name]
    found = plugins.lookup(Kind.STRATEGY, name)
    if found is None:
        problem = plugins.name_problem(Kind.STRATEGY, name, tuple(STRATEGIES), registered_only=True)
        raise ConfigError(_FIELD, problem or f"unknown strategy {name!r}")
    return cast(Strategy, found)


def register_strategy(name: str, strategy: Strategy) -> None:
    """Make ``name`` usable as ``jobShardingStrategyType`` on this worker."""
    if name in STRATEGIES:
        raise ConfigError(_FIELD, f"{name!r} is a built-in strategy; register another name")
    plugins.register(Kind.STRATEGY, name, strategy)
