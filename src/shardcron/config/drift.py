"""Config drift: the keys in which the registry's stored job config differs from the local
one, the log line that says the stored one wins, and ``apply_settings``, the
``config JOB --set KEY=VALUE`` edit an operator applies instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from shardcron.config.conversion import _convert, _Kind, _unknown_key
from shardcron.config.job import _FILE_KEYS, _JAVA_KEYS, JobConfig
from shardcron.config.jobtypes import CALLABLE_PROP, EXECUTOR_KEY_305, PROP_PREFIX, TYPE_PROP
from shardcron.config.snakeyaml import Props
from shardcron.errors import ConfigError

# Not compared by ``drift``: ``overwrite`` is the file's own switch, and a worker always
# runs its own ``type`` and ``callable`` (a different callable is a name conflict instead).
_NOT_DRIFT = frozenset({"job_name", "overwrite", "type", "callable", "props"})
_YAML_KEY_OF = {attr: key for key, (attr, _) in _JAVA_KEYS.items() if key != EXECUTOR_KEY_305}


def drift(stored: JobConfig, local: JobConfig) -> list[str]:
    """The YAML keys whose registry value differs from the file's, sorted; ``props.NAME``
    for a property. With ``overwrite: false`` a worker runs the stored values of these."""
    keys = [
        _YAML_KEY_OF[f.name]
        for f in dataclasses.fields(JobConfig)
        if f.compare
        and f.name not in _NOT_DRIFT
        and getattr(stored, f.name) != getattr(local, f.name)
    ]
    keys += [
        f"props.{name}"
        for name in set(stored.props) | set(local.props)
        if stored.props.get(name) != local.props.get(name)
    ]
    return sorted(keys)


def drift_notice(job_name: str, keys: Iterable[str]) -> str:
    """One line for a worker's log: the registry's config wins over the local one, and how
    to apply the local one."""
    return (
        f"job {job_name!r}: the registry keeps its stored config (overwrite: false), which "
        f"differs from the local one in {', '.join(keys)}; to apply the local config, start "
        f"once with overwrite: true or run 'shardcron config {job_name} --set KEY=VALUE'"
    )


def apply_settings(cfg: JobConfig, settings: Mapping[str, str]) -> JobConfig:
    """``cfg`` with camelCase keys set from strings (``config JOB --set key=value``).

    ``props.NAME`` sets one property (an empty value removes it); an empty value clears an
    optional key. Types are converted and checked; call ``validate()`` for the rest.
    """
    changes: dict[str, Any] = {}
    props = dict(cfg.props)
    for key, raw in settings.items():
        try:
            if key.startswith("props."):
                name = key.removeprefix("props.")
                if name in (TYPE_PROP, CALLABLE_PROP):
                    raise ConfigError(key, f"reserved; set {name.removeprefix(PROP_PREFIX)!r}")
                if raw:
                    props[name] = raw
                else:
                    props.pop(name, None)
                continue
            if key == "jobName":
                raise ConfigError(key, "cannot be changed; a renamed job is a new job")
            if key == "props":
                raise ConfigError(key, "set one property at a time: props.NAME=VALUE")
            if key not in _FILE_KEYS:
                raise _unknown_key(key, [*_FILE_KEYS, "props.NAME"], None)
            attr, kind = _FILE_KEYS[key]
            changes[attr] = (
                None if kind is _Kind.OPTIONAL_TEXT and not raw else _convert(key, kind, raw)
            )
        except ConfigError as err:
            raise ConfigError(err.field, err.problem, job=cfg.job_name) from None
    return cfg.with_changes(props=Props(props), **changes)
