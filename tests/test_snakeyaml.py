"""Registry YAML byte for byte as Java's SnakeYAML 2.x writes it, and read back as text.

The fixtures are ours, worked out from SnakeYAML's representer and emitter rules: a string
it cannot print becomes ``!!binary`` (base64 of UTF-8, literal block); a string with a line
break asks for a literal block; ``=`` and U+FEFF stay plain; ``props`` follow the hash order
of the ``ConcurrentHashMap`` inside ``java.util.Properties`` (Java 9+).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardcron.config.job import JobConfig
from shardcron.config.snakeyaml import (
    Props,
    _dump_whole,
    dump_bean,
    java_props_order,
    java_string_hash,
)
from shardcron.coordination.paths import JobPaths
from shardcron.operations.admin import Admin
from shardcron.registry import Registry
from shardcron.registry.memory import MemoryRegistry

BELL = "ring\x07 twice"
BELL_B64 = base64.b64encode(BELL.encode()).decode()  # cmluZwcgdHdpY2U=


def java_config(**lines: str) -> str:
    """A config as Java 3.0.x writes it, with some keys' YAML text replaced."""
    keys = {
        "cron": "cron: 0/30 * * * * ?",
        "description": "description: ''",
        "disabled": "disabled: false",
        "failover": "failover: false",
        "jobName": "jobName: javaJob",
        "jobParameter": "jobParameter: ''",
        "maxTimeDiffSeconds": "maxTimeDiffSeconds: -1",
        "misfire": "misfire: true",
        "monitorExecution": "monitorExecution: true",
        "overwrite": "overwrite: false",
        "props": "",
        "reconcileIntervalMinutes": "reconcileIntervalMinutes: 10",
        "shardingItemParameters": "shardingItemParameters: ''",
        "shardingTotalCount": "shardingTotalCount: 1",
        "staticSharding": "staticSharding: false",
    }
    keys.update(lines)
    return "".join(text + "\n" for text in keys.values() if text)


def config(**changes: object) -> JobConfig:
    base = JobConfig(job_name="javaJob", sharding_total_count=1, cron="0/30 * * * * ?")
    return base.with_changes(**changes)


# (JobConfig changes, the YAML lines Java writes for them)
JAVA_WRITES = [
    # unprintable characters: BEL (C0), DEL, a C1 control, U+FFFE
    ({"description": BELL}, {"description": f"description: !!binary |-\n  {BELL_B64}"}),
    (
        {"job_parameter": "a\x7fb"},
        {"jobParameter": "jobParameter: !!binary |-\n  YX9i"},
    ),
    (
        {"description": "x\x9ay"},
        {"description": "description: !!binary |-\n  eMKaeQ=="},
    ),
    ({"description": "\ufffe"}, {"description": "description: !!binary |-\n  77++"}),
    # line breaks: literal blocks with SnakeYAML's chomping indicators
    ({"description": "line 1\nline 2"}, {"description": "description: |-\n  line 1\n  line 2"}),
    ({"description": "ends\n"}, {"description": "description: |\n  ends"}),
    ({"description": "keeps\n\n"}, {"description": "description: |+\n  keeps\n"}),
    ({"description": " indented\nx"}, {"description": "description: |2-\n   indented\n  x"}),
    ({"description": "a\u2028b"}, {"description": "description: |-\n  a\u2028  b"}),
    # a trailing space cannot be a block: double-quoted instead
    ({"description": "x \ny"}, {"description": 'description: "x \\ny"'}),
    # plain where PyYAML alone would quote
    ({"sharding_item_parameters": "="}, {"shardingItemParameters": "shardingItemParameters: ="}),
    ({"description": "a\ufeffb"}, {"description": "description: a\ufeffb"}),
    # tab is printable for the representer but not plain for the emitter
    ({"description": "a\tb"}, {"description": 'description: "a\\tb"'}),
    # props: Java's hash order, values as text, an unprintable value as binary
    (
        {"props": {"streaming.process": "true", "http.connect.timeout.milliseconds": "3000"}},
        {
            "props": "props:\n  http.connect.timeout.milliseconds: '3000'\n"
            "  streaming.process: 'true'"
        },
    ),
    (
        {"props": {"k": BELL}},
        {"props": f"props:\n  k: !!binary |-\n    {BELL_B64}"},
    ),
]


@pytest.mark.parametrize(("changes", "lines"), JAVA_WRITES)
def test_written_bytes_are_javas(changes: dict[str, object], lines: dict[str, str]) -> None:
    assert config(**changes).to_yaml() == java_config(**lines)


@pytest.mark.parametrize(("changes", "lines"), JAVA_WRITES)
def test_java_written_yaml_reads_back_as_text(
    changes: dict[str, object], lines: dict[str, str]
) -> None:
    assert JobConfig.from_yaml(java_config(**lines)) == config(**changes)


def test_a_java_update_with_a_binary_description_still_changes_the_cron() -> None:
    text = java_config(
        cron="cron: 0 0 4 * * ?",
        description=f"description: !!binary |-\n  {BELL_B64}",
        jobParameter="jobParameter: !!binary |-\n  cD0BMQ==",  # "p=\x011"
    )
    cfg = JobConfig.from_yaml(text)
    assert (cfg.cron, cfg.description, cfg.job_parameter) == ("0 0 4 * * ?", BELL, "p=\x011")
    cfg.with_changes(callable="tests.job_samples:record").validate()


def test_binary_that_is_not_utf8_reads_with_replacement_characters() -> None:
    text = java_config(description="description: !!binary |-\n  /w==")
    assert JobConfig.from_yaml(text).description == "\ufffd"


@pytest.fixture
def memory() -> Iterator[Registry]:
    made = MemoryRegistry(namespace="yaml")
    made.start()
    try:
        yield made
    finally:
        made.close()


def test_status_reads_a_java_binary_description(memory: Registry) -> None:
    paths = JobPaths("javaJob")
    memory.put(paths.root, b"com.example.JavaJob")
    memory.put(
        paths.config, java_config(description=f"description: !!binary |-\n  {BELL_B64}").encode()
    )
    (brief,) = Admin(memory).jobs()
    assert brief.description == BELL


# --- props order -----------------------------------------------------------------------------


def test_props_order_is_the_bin_order_of_javas_map() -> None:
    # "a", "q" and "z" hash to 97, 113 and 122: bins 1, 1 and 10 of 16; one bin keeps
    # insertion order.
    assert java_props_order(["z", "q", "a"]) == ["q", "a", "z"]
    assert java_props_order(["z", "a", "q"]) == ["a", "q", "z"]


def test_props_order_follows_the_split_when_the_map_grows() -> None:
    # The 12th key grows the table from 16 to 32 bins. Bin 0 then holds "", "0", "00",
    # "000" (spread hashes 0, 48, 1536, 47664: bit 16 is 0, 1, 0, 1). The split keeps the
    # tail run ("000") and puts the others before it in reverse: bin 0 gets "00", "";
    # bin 16 gets "0", "000".
    keys = ["", "0", "1", "2", "3", "4", "5", "6", "00", "000", "0000", "00000"]
    assert java_string_hash("000") == 47664
    order = java_props_order(keys)
    assert order[:2] == ["00", ""]
    assert order.index("0") < order.index("000")
    assert order == ["00", "", "00000", "0", "000", "1", "2", "3", "4", "5", "6", "0000"]


@given(st.lists(st.text(max_size=8), unique=True, max_size=11))
def test_props_order_is_stable_below_the_first_growth(keys: list[str]) -> None:
    once = java_props_order(keys)
    assert sorted(once) == sorted(keys)
    assert java_props_order(once) == once


def test_props_keep_their_order_but_compare_without_it() -> None:
    assert list(Props({"b": "1", "a": "2"})) == ["b", "a"]
    assert Props({"b": "1", "a": "2"}) == Props({"a": "2", "b": "1"})
    assert hash(Props({"b": "1", "a": "2"})) == hash(Props({"a": "2", "b": "1"}))


# Any text at all: line breaks at either end, unprintable characters (written as binary),
# spaces, YAML indicators, what reads as a number or a boolean.
_any_text = (
    st.text(max_size=12)
    | st.sampled_from(["", " ", "a\n", "a\n\n", "\n", "~", "1e5"])
    # Words, as job names are (written without the emitter), and words that read as
    # something else (written with it).
    | st.from_regex(r"[A-Za-z_][A-Za-z0-9_.\-]{0,12}", fullmatch=True)
    | st.sampled_from(["yes", "No", "null", "On", "TRUE", "y", "inf", "e5", "x-1", "_"])
)
_values = (
    _any_text
    | st.integers(-(2**40), 2**40)
    | st.booleans()
    | st.lists(_any_text, max_size=3)
    | st.dictionaries(_any_text, _any_text, max_size=3).map(lambda d: Props(d.items()))
)


@settings(deadline=None, max_examples=300)
@given(st.dictionaries(st.text(min_size=1, max_size=8), _values, max_size=8))
def test_a_bean_written_entry_by_entry_is_the_bean_written_whole(doc: dict[str, object]) -> None:
    """Entries are written one by one and reused; the bytes must be those of one dump."""
    assert dump_bean(doc) == _dump_whole(doc)
    assert dump_bean(doc) == _dump_whole(doc)  # again, from the reused entries
