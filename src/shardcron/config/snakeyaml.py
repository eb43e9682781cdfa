"""YAML as Java's SnakeYAML 2.x writes and reads it, for the registry's config and instance nodes.

ElasticJob stores ``/{job}/config`` with SnakeYAML's ``dumpAsMap``. SnakeYAML's emitter is a
port of PyYAML's, so PyYAML's emitter gives the same bytes once its representer and resolver
make SnakeYAML's choices:

* a string with a character SnakeYAML cannot print (C0 controls other than tab, LF and CR;
  DEL; C1 controls other than NEL; U+FFFE and U+FFFF) is written as ``!!binary``, base64 of
  its UTF-8 bytes in a literal block; readers here turn it back into text;
* a string with a line break (LF, NEL, U+2028, U+2029) asks for a literal block (``|``,
  ``|-``, ``|+``), which the emitter keeps unless the text cannot be a block;
* ``=`` is an ordinary string (PyYAML alone resolves it as the ``value`` tag and quotes it);
* ``1e5``-like strings read as floats in SnakeYAML, so they are quoted;
* U+FEFF is an ordinary printable character for SnakeYAML's emitter (PyYAML's quotes it);
* bean keys are sorted, but ``props`` (a ``java.util.Properties``) comes out in the order of
  the ``ConcurrentHashMap`` behind it: see :func:`java_props_order`.
"""

from __future__ import annotations

import base64
import functools
import re
from collections.abc import Hashable, Iterable, Iterator, Mapping
from typing import Any

import yaml
from yaml.emitter import ScalarAnalysis

from shardcron.errors import ConfigError

# SnakeYAML's StreamReader.isPrintable, as a pattern of what it is not.
_UNPRINTABLE = re.compile("[^\t\n\r\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_LINE_BREAK = re.compile("[\n\x85\u2028\u2029]")
_BINARY_TAG = "tag:yaml.org,2002:binary"
# Java 9+ `new Properties()` holds a ConcurrentHashMap of 16 bins, grown at 3/4 full.
_FIRST_TABLE = 16


def java_string_hash(s: str) -> int:
    """Java ``String.hashCode``: over UTF-16 code units, wrapped to a signed 32-bit int."""
    units = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - 2**32 if h >= 2**31 else h


class Props(Mapping[str, str]):
    """An immutable, hashable ``str -> str`` mapping that keeps the order it was given.

    The order is what Java inserted (the YAML's order), so writing the props back follows
    Java's hash order exactly; equality and hashing ignore order, as for Java's Properties.
    """

    __slots__ = ("_items",)

    def __init__(self, items: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> None:
        self._items = dict(items)

    def __getitem__(self, key: str) -> str:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(frozenset(self._items.items()))

    def __repr__(self) -> str:
        return f"Props({self._items!r})"


def java_props_order(keys: Iterable[str]) -> list[str]:
    """The order Java 9+ iterates a ``Properties`` after putting ``keys`` in this order.

    A simulation of ``ConcurrentHashMap``: bins by the spread hash, a new key at the end of
    its bin, the table doubled once 3/4 full, and the doubling's split of each bin (which
    keeps the bin's tail run and puts the nodes before it in reverse). Not simulated: bins
    of 8 or more colliding keys (Java then grows or turns the bin into a tree).
    """
    table: list[list[tuple[int, str]]] = [[] for _ in range(_FIRST_TABLE)]
    count = 0
    for key in keys:
        spread = _spread(java_string_hash(key))
        chain = table[spread & (len(table) - 1)]
        if any(existing == key for _, existing in chain):
            continue
        chain.append((spread, key))
        count += 1
        if count >= len(table) - (len(table) >> 2):
            table = _grown(table)
    return [key for chain in table for _, key in chain]


def _spread(java_hash: int) -> int:
    unsigned = java_hash & 0xFFFFFFFF
    return (unsigned ^ (unsigned >> 16)) & 0x7FFFFFFF


def _grown(table: list[list[tuple[int, str]]]) -> list[list[tuple[int, str]]]:
    n = len(table)
    bigger: list[list[tuple[int, str]]] = [[] for _ in range(2 * n)]
    for index, chain in enumerate(table):
        if not chain:
            continue
        last_run = 0
        for position in range(1, len(chain)):
            if chain[position][0] & n != chain[position - 1][0] & n:
                last_run = position
        low: list[tuple[int, str]] = []
        high: list[tuple[int, str]] = []
        (high if chain[last_run][0] & n else low).extend(chain[last_run:])
        for node in chain[:last_run]:
            (high if node[0] & n else low).insert(0, node)
        bigger[index], bigger[index + n] = low, high
    return bigger


# --- writing -------------------------------------------------------------------------------


class _SnakeEmitter(yaml.emitter.Emitter):
    def analyze_scalar(self, scalar: str) -> ScalarAnalysis:
        # SnakeYAML prints U+FEFF like any other character; U+00A0 analyses the same way.
        analysis = super().analyze_scalar(scalar.replace("\ufeff", "\xa0"))
        analysis.scalar = scalar  # what gets written
        return analysis


class _SnakeDumper(
    _SnakeEmitter,
    yaml.serializer.Serializer,
    yaml.representer.SafeRepresenter,
    yaml.resolver.Resolver,
):
    def __init__(self, stream: Any, **options: Any) -> None:
        _SnakeEmitter.__init__(
            self, stream, width=options.get("width"), allow_unicode=options.get("allow_unicode")
        )
        yaml.serializer.Serializer.__init__(self)
        yaml.representer.SafeRepresenter.__init__(
            self,
            default_style=options.get("default_style"),
            default_flow_style=options.get("default_flow_style", False),
            sort_keys=options.get("sort_keys", True),
        )
        yaml.resolver.Resolver.__init__(self)


def _represent_str(dumper: yaml.representer.SafeRepresenter, text: str) -> yaml.ScalarNode:
    if _UNPRINTABLE.search(text):
        encoded = base64.b64encode(text.encode("utf-8", "surrogatepass")).decode("ascii")
        return dumper.represent_scalar(_BINARY_TAG, encoded, style="|")
    style = "|" if _LINE_BREAK.search(text) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


# A word the emitter writes plain: no indicator, space or line break, not a number.
_PLAIN_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,100}\Z")
_SnakeDumper.add_representer(str, _represent_str)
_SnakeDumper.add_representer(Props, lambda dumper, props: dumper.represent_dict(dict(props)))
# SnakeYAML has no `value` (`=`) resolver, and reads 1e5-like strings as floats.
_SnakeDumper.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:value"]
    for first, resolvers in yaml.resolver.Resolver.yaml_implicit_resolvers.items()
}
_SnakeDumper.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:\.[0-9]+|[0-9_]+(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?$"),
    list("-+0123456789."),
)


def dump_bean(doc: Mapping[str, object]) -> str:
    """``doc`` as SnakeYAML ``dumpAsMap`` writes a bean: keys sorted, nested Props unsorted.

    A block mapping is written entry by entry, each the same whatever its neighbours, so
    scalar entries are dumped once and reused: a worker starting thousands of jobs whose
    configs differ in their name and cron spent most of its start in this emitter. An
    entry that leaves its document open (a text ending in line breaks) is written with
    the whole document, as the end of a document depends on it."""
    entries = [_entry(key, value) for key, value in sorted(doc.items())]
    if not entries or any(entry.endswith("...\n") for entry in entries):
        return _dump_whole(doc)
    return "".join(entries)


def _entry(key: str, value: object) -> str:
    if isinstance(value, str) and (plain := _plain_entry(key, value)):
        return plain
    if isinstance(value, str | int):  # bools are ints; the cache tells them apart
        return _scalar_entry(key, value)
    return _dump_whole({key: value})


def _plain_entry(key: str, value: str) -> str | None:
    """``key: value`` as the emitter writes it when both are plain words that read back
    as strings, without running it: each job's name is such a word, unlike the entries
    shared by many jobs that the cache below serves."""
    for word in (key, value):
        if not _PLAIN_WORD.match(word):
            return None
        resolvers = _SnakeDumper.yaml_implicit_resolvers.get(word[0], ())
        if any(regexp.match(word) for _tag, regexp in resolvers):  # a bool, a null...
            return None
    return f"{key}: {value}\n"


@functools.lru_cache(maxsize=4096, typed=True)  # typed: True and 1 are written apart
def _scalar_entry(key: str, value: str | int) -> str:
    return _dump_whole({key: value})


def _dump_whole(doc: Mapping[str, object]) -> str:
    ordered = {key: doc[key] for key in sorted(doc)}
    return yaml.dump(
        ordered, Dumper=_SnakeDumper, default_flow_style=False, sort_keys=False, allow_unicode=True
    )


def java_props(props: Mapping[str, str]) -> Props:
    """``props`` in the order Java writes them after inserting them in their current order."""
    return Props((key, props[key]) for key in java_props_order(props))


# --- reading -------------------------------------------------------------------------------


class RegistryLoader(yaml.SafeLoader):
    """Reads registry YAML: SnakeYAML class tags (``!!org.apache...``) are ignored and
    ``!!binary`` scalars (SnakeYAML's way of writing unprintable strings) become text."""


def _construct_tagged(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> object:
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)  # type: ignore[arg-type]


def _construct_binary_text(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> str:
    raw = loader.construct_yaml_binary(node)
    # Java decodes the bytes as UTF-8 too, replacing what is not.
    return raw.decode("utf-8", errors="replace")


RegistryLoader.add_multi_constructor("", _construct_tagged)
RegistryLoader.add_constructor(_BINARY_TAG, _construct_binary_text)


class FileLoader(yaml.SafeLoader):
    """Reads the user's file, rejecting duplicate keys (the first would be silently lost)."""


def _construct_unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> object:
    loader.flatten_mapping(node)
    seen: set[Hashable] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if isinstance(key, Hashable) and key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


FileLoader.add_constructor("tag:yaml.org,2002:map", _construct_unique_mapping)


def load(text: str, loader: type[yaml.SafeLoader]) -> object:
    """Parse ``text``; a YAML syntax error becomes a one-line ConfigError naming the place."""
    try:
        return yaml.load(text, Loader=loader)  # both loaders derive from SafeLoader
    except yaml.YAMLError as exc:
        raise _yaml_error(exc) from None


def _yaml_error(exc: yaml.YAMLError) -> ConfigError:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        context = f" ({exc.context})" if exc.context else ""
        problem = f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem}{context}"
        return ConfigError("yaml", " ".join(problem.split()))
    return ConfigError("yaml", " ".join(str(exc).split()))
