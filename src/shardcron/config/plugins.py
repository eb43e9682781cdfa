"""Names the worker registers itself: custom sharding strategies, listeners, error handlers.

A name read from the registry (``jobShardingStrategyType``, ``jobListenerTypes``,
``jobErrorHandlerType``) resolves only to a built-in or to an entry of these process-wide
tables; nothing read from the registry is ever imported. Whoever can write the registry
can choose among the code the worker registered, never name new code.

The tables are filled from the worker's own side only:

* code: ``Scheduler(strategies={"MY_STRATEGY": fn}, listener_types={...},
  error_handlers={...})``, or :func:`register` directly;
* the local config file: the ``worker:`` block's ``strategies``, ``listenerTypes`` and
  ``errorHandlers`` map names to ``module:qualname``, imported when the file is loaded;
* a job declared locally (file or code) that names a ``module:qualname`` strategy or
  listener: :func:`declare` imports it and registers it under that very string, so such
  configs keep working while the same string written into the registry by someone else
  resolves to nothing new.
"""

from __future__ import annotations

import difflib
import importlib
import re
import threading
from collections.abc import Callable, Mapping
from enum import StrEnum

from shardcron.errors import ConfigError


class Kind(StrEnum):
    """A kind of registered name; the value is the config key that names one."""

    STRATEGY = "jobShardingStrategyType"
    LISTENER = "jobListenerTypes"
    ERROR_HANDLER = "jobErrorHandlerType"


_HOW = {
    Kind.STRATEGY: "Scheduler(strategies={NAME: fn}) or the worker block's strategies",
    Kind.LISTENER: "Scheduler(listener_types={NAME: cls}) or the worker block's listenerTypes",
    Kind.ERROR_HANDLER: "Scheduler(error_handlers={NAME: fn}) or the worker block's errorHandlers",
}
_tables: dict[Kind, dict[str, Callable[..., object]]] = {kind: {} for kind in Kind}
_lock = threading.Lock()


def register(kind: Kind, name: str, target: object) -> None:
    """Make ``name`` resolve to ``target`` in this process (a later call replaces it)."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(str(kind), f"a registered name must be non-empty text; got {name!r}")
    if not callable(target):
        raise ConfigError(str(kind), f"{name!r}: {target!r} is not callable")
    with _lock:
        _tables[kind][name] = target


def register_all(kind: Kind, targets: Mapping[str, object] | None) -> None:
    for name, target in (targets or {}).items():
        register(kind, name, target)


def lookup(kind: Kind, name: str) -> Callable[..., object] | None:
    with _lock:
        return _tables[kind].get(name)


def unregister(kind: Kind, name: str) -> None:
    """Forget ``name`` (for tests and for code that registers temporarily)."""
    with _lock:
        _tables[kind].pop(name, None)


def how_to_register(kind: Kind) -> str:
    return _HOW[kind]


def import_ref(ref: str, *, field: str = "callable") -> object:
    """Import ``"module:qualname"`` and return what it names. Only for names the worker's
    own code or local file gives, never for a name read from the registry."""
    module_name, sep, qualname = (part.strip() for part in ref.partition(":"))
    if not sep or not module_name or not qualname:
        raise ConfigError(field, f"{ref!r} is not 'module:qualname' (e.g. myapp.jobs:process)")
    try:
        target: object = importlib.import_module(module_name)
    except Exception as exc:  # a broken user module can raise anything while importing
        problem = f"cannot import module {module_name!r}: {type(exc).__name__}: {exc}"
        raise ConfigError(field, " ".join(problem.split())) from exc
    found: list[str] = []
    for part in qualname.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            where = f"module {module_name!r}" + (f", in {'.'.join(found)!r}," if found else "")
            names = [name for name in dir(target) if not name.startswith("_")]
            close = difflib.get_close_matches(part, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(field, f"{where} has no {part!r}{hint}") from None
        found.append(part)
    return target


def register_refs(kind: Kind, refs: Mapping[str, str], *, source: str) -> None:
    """Import each ``name: module:qualname`` of a local file and register it."""
    for name, ref in refs.items():
        register(kind, name, import_ref(ref, field=f"{source}.{name}"))


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")


def name_problem(
    kind: Kind, name: str, builtins: tuple[str, ...], *, registered_only: bool
) -> str | None:
    """Why ``name`` cannot be used for ``kind``, or None; never imports anything.

    A worker (``registered_only``) accepts built-ins and its registered names. An operator's
    tool cannot see the workers' tables, so it also accepts any plain name (each worker then
    rejects one it does not know), but never a ``module:qualname`` that is not already there.
    """
    if not name or name in builtins or lookup(kind, name) is not None:
        return None
    choices = ", ".join(builtins) if builtins else "none built in"
    if registered_only or not _NAME.fullmatch(name):
        return (
            f"unknown name {name!r} (names from the registry never import code); use "
            f"{choices}, or register it on the worker: {_HOW[kind]}"
        )
    return None
