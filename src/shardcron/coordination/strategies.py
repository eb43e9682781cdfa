"""Sharding strategies: which instance runs which items, as pure functions.

Java-compatible: for the same instance list, job name and item count, each
built-in strategy gives the assignment that ElasticJob 3.x gives (reference
§1.4), so mixed Java and Python clusters agree on who runs what. The exception is
RENDEZVOUS, shardcron's own low-movement strategy for big jobs, which Java lacks.
"""

from __future__ import annotations

import hashlib
import heapq
import operator
import sys
import time
from array import array
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import cast

from shardcron.config import plugins
from shardcron.config.plugins import Kind
from shardcron.config.snakeyaml import java_string_hash
from shardcron.errors import ConfigError, ShardcronError

Strategy = Callable[[Sequence[str], str, int], dict[str, list[int]]]
"""(instance_ids in order_instances order, job_name, sharding_total_count) -> id -> sorted items."""

DEFAULT_STRATEGY = "AVG_ALLOCATION"
_FIELD = "jobShardingStrategyType"
_INT_MIN = -(2**31)


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


# A score is a 64-bit word: 31 bits from the instance's SHAKE-128 stream in the high half
# (its top bit, the guard bit _best_scores needs, stays clear), and the instance's rank among
# the sorted ids in the low half. The rank makes the highest score name its owner (so the
# max is the argmax) and breaks the rare 31-bit tie by id order, which a join or leave does
# not change between the instances that stay.
_RANK_MASK = 0xFFFFFFFF
_GUARD = 63
_NO_TOP_BIT = bytes(range(128)) * 2  # a translate() table: byte & 0x7F


def _score_table(ordered: Sequence[str], job_name: str, total: int) -> list[memoryview]:
    """Per instance, the scores of items ``0..total-1`` as native 64-bit words.

    The random halves are SHAKE-128 keyed by (job, instance), read as little-endian 32-bit
    words: an XOF's prefix does not depend on the length asked, so an item's score does not
    depend on ``total``, and SHAKE is standard (FIPS 202), so scores agree in every process,
    Python version and platform, unlike ``hash()``. Every step is one C call per instance.
    """
    job = job_name.encode("utf-8", "surrogatepass")
    prefix = len(job).to_bytes(4, "big") + job
    high = 1 if sys.byteorder == "little" else 0  # the high half's place in a native word
    table = []
    for rank, instance_id in enumerate(ordered):
        key = prefix + instance_id.encode("utf-8", "surrogatepass")
        stream = bytearray(hashlib.shake_128(key).digest(4 * total))
        stream[3::4] = stream[3::4].translate(_NO_TOP_BIT)  # the guard bit of each word
        halves = array("I", stream)  # "I" is 4 bytes on every platform CPython supports
        if sys.byteorder == "big":
            halves.byteswap()
        words = array("I", [0, rank] if high == 0 else [rank, 0]) * total
        words[high::2] = halves
        table.append(memoryview(words).cast("B").cast("Q"))
    return table


def _best_scores(table: Sequence[memoryview], total: int) -> array[int]:
    """Each item's highest score, computed on all items at once as the 64-bit lanes of big
    ints, so the work per (instance, item) pair runs in C: a Python loop over the 10 million
    pairs of 100,000 items x 100 instances takes seconds."""
    order = sys.byteorder  # an array's bytes are native words: lane i is word i either way
    guard = int.from_bytes(array("Q", [1 << _GUARD]) * total, order)
    best = 0
    for words in table:
        scores = int.from_bytes(words, order)
        # Per lane, (best | guard) - scores keeps the guard bit iff best >= scores; the guard
        # bit absorbs the borrow, so no lane disturbs its neighbour.
        at_least = ((best | guard) - scores) & guard
        keep_best = at_least - (at_least >> _GUARD)  # 63 one-bits where best >= scores
        best = scores ^ ((best ^ scores) & keep_best)
    return array("Q", best.to_bytes(8 * total, order))


def rendezvous(instance_ids: Sequence[str], job_name: str, total: int) -> dict[str, list[int]]:
    """RENDEZVOUS (shardcron only): bounded-load highest-random-weight hashing.

    Each (instance, item) pair gets a pseudo-random score; an item goes to the instance
    scoring it highest, but no instance takes more than ``ceil(total / instances)`` items:
    the lowest-scored items of a full instance go to their next choice. This is the unique
    stable matching for the scores, so it does not depend on the order of ``instance_ids``.
    When one instance joins or leaves, 1.2 to 1.6 times ``total / instances`` items change
    owner (measured), where AVG_ALLOCATION moves a quarter to a half of all items. Java
    workers do not know the name (docs/elasticjob-compatibility.md).
    """
    _check(instance_ids, total)
    if not instance_ids:
        return {}
    ordered = sorted(instance_ids, key=_utf16_key)
    table = _score_table(ordered, job_name, total)
    cap = -(-total // len(ordered))
    # Each instance's items as a min-heap of (score, item): a full one refuses its weakest.
    kept: list[list[tuple[int, int]]] = [[] for _ in ordered]
    for item, best in enumerate(_best_scores(table, total)):
        kept[best & _RANK_MASK].append((best, item))
    refused: list[int] = []
    for heap in kept:
        if len(heap) > cap:
            heap.sort(reverse=True)
            refused.extend(item for _, item in heap[cap:])
            del heap[cap:]
        heapq.heapify(heap)
    _place_refused(refused, kept, table, cap)
    result: dict[str, list[int]] = {}
    for instance_id, heap in zip(ordered, kept, strict=True):
        result[instance_id] = items = [item for _, item in heap]
        items.sort()
    return result


def _place_refused(
    refused: list[int], kept: list[list[tuple[int, int]]], table: Sequence[memoryview], cap: int
) -> None:
    """Deferred acceptance: a refused item asks its next choice, which keeps it if it has room
    or scores it above its weakest item (which then asks on). Only refused items, a few
    percent, need their full ranking."""
    rankings = _rankings(table, refused)
    while refused:
        item = refused.pop()
        ranking = rankings.get(item)
        if ranking is None:  # displaced from its first choice by a better-scored item
            ranking = rankings[item] = _rankings(table, [item])[item]
        score = ranking.pop()
        heap = kept[score & _RANK_MASK]
        if len(heap) < cap:
            heapq.heappush(heap, (score, item))
        elif heap[0] < (score, item):
            refused.append(heapq.heapreplace(heap, (score, item))[1])
        else:
            refused.append(item)


def _rankings(table: Sequence[memoryview], items: Sequence[int]) -> dict[int, list[int]]:
    """Each item's scores in ascending order, without the best (the choice that refused it).

    itemgetter gathers one instance's scores of every item in C."""
    if not items:
        return {}
    gather = operator.itemgetter(*items, items[0])  # two keys at least: always a tuple
    rows = zip(*(gather(words) for words in table), strict=True)
    return {item: sorted(row)[:-1] for item, row in zip(items, rows, strict=False)}


STRATEGIES: Mapping[str, Strategy] = MappingProxyType(
    {
        "AVG_ALLOCATION": avg_allocation,
        "ODEVITY": odevity,
        "ROUND_ROBIN": round_robin,
        "SINGLE_SHARDING_BALANCE": single_sharding_balance,
        "RENDEZVOUS": rendezvous,
    }
)


def resolve_strategy(name: str | None) -> Strategy:
    """A built-in strategy by name, or one registered in this process (see
    :mod:`shardcron.config.plugins`). Never imports: the name may come from the registry.

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
