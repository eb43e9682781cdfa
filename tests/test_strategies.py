from __future__ import annotations

import sys
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardcron import plugins
from shardcron.config import JobConfig
from shardcron.errors import ConfigError, ShardcronError, ShardingError
from shardcron.paths import JobPaths
from shardcron.registry.memory import MemoryRegistry
from shardcron.sharding import reshard
from shardcron.strategies import (
    STRATEGIES,
    Strategy,
    avg_allocation,
    java_string_hash,
    odevity,
    order_instances,
    register_strategy,
    resolve_strategy,
    round_robin,
    single_sharding_balance,
)

S1, S2, S3 = "server1", "server2", "server3"
ODD_NAME, EVEN_NAME = "a", "b"  # hashCode 97 and 98
MIN_HASH_NAME = "polygenelubricants"  # hashCode is Integer.MIN_VALUE


# --- java_string_hash -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("The quick brown fox jumps over the lazy dog", -609428141),
        ("中文作业", 621834424),
        ("😀", 1772899),  # one astral code point = two UTF-16 units
        (MIN_HASH_NAME, -(2**31)),
    ],
)
def test_java_string_hash_matches_java(text: str, expected: int) -> None:
    # Expected values were printed by Java 17's String.hashCode.
    assert java_string_hash(text) == expected


def _hash_by_formula(text: str) -> int:
    # s[0]*31^(n-1) + ... + s[n-1] over UTF-16 units, computed exactly, then wrapped once.
    raw = text.encode("utf-16-be", "surrogatepass")
    units = [int.from_bytes(raw[i : i + 2], "big") for i in range(0, len(raw), 2)]
    exact: int = sum(unit * 31 ** (len(units) - 1 - i) for i, unit in enumerate(units))
    wrapped = exact % 2**32
    return wrapped - 2**32 if wrapped >= 2**31 else wrapped


@given(st.text())
def test_java_string_hash_is_the_wrapped_polynomial(text: str) -> None:
    assert java_string_hash(text) == _hash_by_formula(text)
    assert -(2**31) <= java_string_hash(text) < 2**31


# --- order_instances --------------------------------------------------------------------------


def test_order_is_descending_string_order_not_numeric_ip_order() -> None:
    ids = ["192.168.1.10@-@100", "192.168.1.9@-@200", "192.168.1.11@-@50"]
    assert order_instances(ids) == ["192.168.1.9@-@200", "192.168.1.11@-@50", "192.168.1.10@-@100"]
    assert order_instances(["10.0.0.10@-@7", "10.0.0.9@-@7"]) == ["10.0.0.9@-@7", "10.0.0.10@-@7"]


def test_order_uses_utf16_code_units_like_java() -> None:
    # Java 17 sorts these (reverse order) as U+FFFF, U+E000, U+1F600, "a", "B".
    # Python's code-point order would put U+1F600 first.
    ids = ["B", "😀", "a", "\ue000", "\uffff"]
    assert order_instances(ids) == ["\uffff", "\ue000", "😀", "a", "B"]


# --- worked examples from the seeds and reference §1.4 -----------------------------------------


@pytest.mark.parametrize(
    ("total", "expected"),
    [
        (9, {S1: [0, 1, 2], S2: [3, 4, 5], S3: [6, 7, 8]}),
        (8, {S1: [0, 1, 6], S2: [2, 3, 7], S3: [4, 5]}),
        (10, {S1: [0, 1, 2, 9], S2: [3, 4, 5], S3: [6, 7, 8]}),
    ],
)
def test_avg_allocation_seed_examples(total: int, expected: dict[str, list[int]]) -> None:
    assert avg_allocation([S1, S2, S3], "anyJob", total) == expected


def test_avg_allocation_fewer_items_than_instances() -> None:
    assert avg_allocation([S1, S2, S3], "j", 1) == {S1: [0], S2: [], S3: []}
    assert avg_allocation([S1, S2], "j", 0) == {S1: [], S2: []}


def test_odevity_seed_examples() -> None:
    assert java_string_hash(ODD_NAME) % 2 == 1
    assert java_string_hash(EVEN_NAME) % 2 == 0
    # Odd hash: list order kept. Even hash: reversed.
    assert odevity([S1, S2, S3], ODD_NAME, 2) == {S1: [0], S2: [1], S3: []}
    assert odevity([S1, S2, S3], EVEN_NAME, 2) == {S3: [0], S2: [1], S1: []}


def test_odevity_negative_odd_hash_keeps_order() -> None:
    # Java computes -1 for a negative odd hash % 2, which is "not even": no reversal.
    name = "The quick brown fox jumps over the lazy dog"
    assert java_string_hash(name) < 0
    assert java_string_hash(name) % 2 == 1
    assert odevity([S1, S2, S3], name, 2) == {S1: [0], S2: [1], S3: []}


def test_odevity_does_not_mutate_the_callers_list() -> None:
    ids = [S1, S2, S3]
    odevity(ids, EVEN_NAME, 3)
    assert ids == [S1, S2, S3]


def test_round_robin_rotates_the_instance_list() -> None:
    # The seed article's prose shows items shifting ("hash 1: server1=[1,2,3] ..."), but its own
    # code, like reference §1.4, rotates the *instance list* and then averages. We follow the code.
    assert abs(java_string_hash("a")) % 3 == 1
    assert abs(java_string_hash("b")) % 3 == 2
    assert abs(java_string_hash("c")) % 3 == 0
    assert round_robin([S1, S2, S3], "a", 9) == {S2: [0, 1, 2], S3: [3, 4, 5], S1: [6, 7, 8]}
    assert round_robin([S1, S2, S3], "b", 9) == {S3: [0, 1, 2], S1: [3, 4, 5], S2: [6, 7, 8]}
    assert round_robin([S1, S2, S3], "c", 9) == {S1: [0, 1, 2], S2: [3, 4, 5], S3: [6, 7, 8]}


def test_round_robin_single_item_moves_between_jobs() -> None:
    owners = {next(k for k, v in round_robin([S1, S2, S3], n, 1).items() if v) for n in "abc"}
    assert owners == {S1, S2, S3}


def test_round_robin_min_value_hash() -> None:
    four = ["s1", "s2", "s3", "s4"]
    # Java: Math.abs(MIN_VALUE) % 4 == 0, so no rotation.
    assert round_robin(four, MIN_HASH_NAME, 4) == avg_allocation(four, MIN_HASH_NAME, 4)
    # Java throws here (negative index); we rotate by (-2**31) mod 3 == 1 instead.
    assert round_robin([S1, S2, S3], MIN_HASH_NAME, 3) == {S2: [0], S3: [1], S1: [2]}


# --- properties ---------------------------------------------------------------------------------

instance_lists = st.lists(st.text(min_size=1, max_size=12), unique=True, max_size=12)
totals = st.integers(min_value=0, max_value=120)
names = st.text(max_size=20)
builtins = st.sampled_from(sorted(STRATEGIES))
# SINGLE_SHARDING_BALANCE reads the clock, so two calls agree only with the clock pinned.
clockless = st.sampled_from(sorted(set(STRATEGIES) - {"SINGLE_SHARDING_BALANCE"}))


@given(builtins, instance_lists, names, totals)
def test_every_item_assigned_exactly_once(
    strategy_name: str, ids: list[str], job: str, total: int
) -> None:
    result = STRATEGIES[strategy_name](ids, job, total)
    assert set(result) == set(ids)
    assigned = [item for items in result.values() for item in items]
    assert sorted(assigned) == (list(range(total)) if ids else [])
    assert all(items == sorted(items) for items in result.values())


@given(builtins, instance_lists.filter(bool), names, totals)
def test_sizes_differ_by_at_most_one(
    strategy_name: str, ids: list[str], job: str, total: int
) -> None:
    sizes = [len(items) for items in STRATEGIES[strategy_name](ids, job, total).values()]
    assert max(sizes) - min(sizes) <= 1


@given(clockless, st.data(), instance_lists, names, totals)
def test_result_independent_of_input_order(
    strategy_name: str, data: st.DataObject, ids: list[str], job: str, total: int
) -> None:
    shuffled = data.draw(st.permutations(ids))
    strategy = STRATEGIES[strategy_name]
    assert strategy(order_instances(shuffled), job, total) == strategy(
        order_instances(ids), job, total
    )


@given(builtins, names, totals)
def test_no_instances_gives_empty_map(strategy_name: str, job: str, total: int) -> None:
    assert STRATEGIES[strategy_name]([], job, total) == {}


def test_negative_total_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        avg_allocation([S1], "j", -1)
    assert info.value.field == "shardingTotalCount"


def test_duplicate_instance_ids_are_refused() -> None:
    with pytest.raises(ShardcronError, match="duplicate"):
        avg_allocation([S1, S1], "j", 2)


# --- resolve_strategy ---------------------------------------------------------------------------


class CustomHolder:
    @staticmethod
    def everything_to_last(ids: Sequence[str], job: str, total: int) -> dict[str, list[int]]:
        return {i: (list(range(total)) if i == ids[-1] else []) for i in ids}


def test_resolve_builtin_names() -> None:
    assert resolve_strategy(None) is avg_allocation
    assert resolve_strategy("") is avg_allocation
    assert resolve_strategy("AVG_ALLOCATION") is avg_allocation
    assert resolve_strategy("ODEVITY") is odevity
    assert resolve_strategy("ROUND_ROBIN") is round_robin


def test_resolve_custom_registered_name() -> None:
    register_strategy("TO_LAST", CustomHolder.everything_to_last)
    try:
        strategy: Strategy = resolve_strategy("TO_LAST")
        assert strategy([S1, S2], "j", 3) == {S1: [], S2: [0, 1, 2]}
    finally:
        plugins.unregister(plugins.Kind.STRATEGY, "TO_LAST")
    with pytest.raises(ConfigError, match="unknown name 'TO_LAST'"):
        resolve_strategy("TO_LAST")


def test_a_builtin_name_cannot_be_registered_over() -> None:
    with pytest.raises(ConfigError, match="built-in"):
        register_strategy("ROUND_ROBIN", CustomHolder.everything_to_last)


def test_resolve_unknown_name_lists_known_ones() -> None:
    with pytest.raises(ConfigError) as info:
        resolve_strategy("AVERAGE")
    assert info.value.field == "jobShardingStrategyType"
    for known in ("AVG_ALLOCATION", "ODEVITY", "ROUND_ROBIN"):
        assert known in str(info.value)


@pytest.mark.parametrize(
    "ref",
    ["shardcron.strategies:round_robin", "os:system", "no_such_module_xyz:f", ":round_robin"],
)
def test_a_module_qualname_that_is_not_registered_is_unknown_and_not_imported(ref: str) -> None:
    with pytest.raises(ConfigError, match="never import code") as info:
        resolve_strategy(ref)
    assert info.value.field == "jobShardingStrategyType"
    assert "no_such_module_xyz" not in sys.modules


def broken_strategy(instance_ids: Sequence[str], job_name: str, total: int) -> dict[str, list[int]]:
    return {instance_ids[0]: [0]}  # forgets every other item


def test_a_custom_strategy_that_drops_items_is_refused_and_nothing_is_written() -> None:
    registry = MemoryRegistry()
    registry.start()
    paths = JobPaths("job")
    registry.put(paths.sharding_necessary, b"")
    cache = registry.tree_cache(paths.root)
    with pytest.raises(ShardingError, match="exactly once"):
        reshard(registry, cache, paths, 3, ["a@-@1", "b@-@2"], broken_strategy)
    assert registry.children(paths.sharding) == []
    assert registry.stat(paths.sharding_necessary) is not None  # still to be done
    assert registry.stat(paths.sharding_processing) is None  # nobody is blocked
    registry.close()


# --- SINGLE_SHARDING_BALANCE --------------------------------------------------------------------
# Java 3.0.5+: offset = Math.abs(jobName.hashCode() + (int) currentTimeMillis) % n (int
# arithmetic), rotate the list left by it, then AVG_ALLOCATION. The expected lists below are
# worked out by hand from that rule: "a" hashes to 97.

ABC = ["c", "b", "a"]  # already in order_instances order


@pytest.mark.parametrize(
    ("now_ms", "total", "expected"),
    [
        (0, 1, {"b": [0], "a": [], "c": []}),  # 97 % 3 = 1: [b, a, c]
        (1, 1, {"a": [0], "c": [], "b": []}),  # 98 % 3 = 2: [a, c, b]
        (2, 1, {"c": [0], "b": [], "a": []}),  # 99 % 3 = 0: no rotation
        (0, 4, {"b": [0, 3], "a": [1], "c": [2]}),  # [b, a, c], remainder to the first
        (2**32 + 5, 1, {"c": [0], "b": [], "a": []}),  # (int) keeps the low 32 bits: 102 % 3 = 0
        (2**31, 1, {"b": [0], "a": [], "c": []}),  # (int) 2^31 = -2^31; abs(97 - 2^31) % 3 = 1
        # A real clock value: (int) 1700000000000 = -807049216; abs(-807049119) % 3 = 0.
        (1_700_000_000_000, 2, {"c": [0], "b": [1], "a": []}),
    ],
)
def test_single_sharding_balance_matches_java(
    now_ms: int, total: int, expected: dict[str, list[int]]
) -> None:
    assert single_sharding_balance(ABC, "a", total, now_ms=now_ms) == expected


def test_single_sharding_balance_visits_every_instance_as_time_passes() -> None:
    owners = {
        next(i for i, items in single_sharding_balance(ABC, "job", 1, now_ms=t).items() if items)
        for t in range(3)
    }
    assert owners == set(ABC)


def test_single_sharding_balance_min_value_sum_rotates_modulo_n() -> None:
    # hash + millis == Integer.MIN_VALUE: Java's abs stays negative (and Java then fails for
    # n = 3); like ROUND_ROBIN we rotate by (-2**31) mod 3 == 1.
    now_ms = -(2**31) - 97 + 2**32
    assert single_sharding_balance(ABC, "a", 1, now_ms=now_ms) == {"b": [0], "a": [], "c": []}


def test_single_sharding_balance_is_a_builtin_name() -> None:
    assert resolve_strategy("SINGLE_SHARDING_BALANCE") is single_sharding_balance
    cfg = JobConfig(
        job_name="j",
        sharding_total_count=1,
        callable="tests.job_samples:record",
        job_sharding_strategy_type="SINGLE_SHARDING_BALANCE",
    )
    assert "jobShardingStrategyType" not in [err.field for err in cfg.validate_all()]


@given(instance_lists, names, totals, st.integers(min_value=0, max_value=2**45))
def test_single_sharding_balance_is_order_independent_with_a_pinned_clock(
    ids: list[str], job: str, total: int, now_ms: int
) -> None:
    shuffled = list(reversed(ids))
    assert single_sharding_balance(
        order_instances(shuffled), job, total, now_ms=now_ms
    ) == single_sharding_balance(order_instances(ids), job, total, now_ms=now_ms)
