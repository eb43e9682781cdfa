"""What keeps a seed cheap: no logging, and each YAML text handled once per process.

Parsing and rendering config and instance YAML (pure-Python PyYAML) was a third of a
seed's cost, for the same few texts over and over. All three are pure functions of their
arguments (a config is a frozen value), so while seeds run they are memoized; errors
are not (they raise every time). Everything is put back on exit.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator

from shardcron.config.instancerecord import instance_yaml
from shardcron.config.job import JobConfig
from shardcron.coordination import membership

_PARSED: dict[tuple[str, str | None], JobConfig] = {}
_RENDERED: dict[JobConfig, str] = {}
_instance_yaml = functools.cache(instance_yaml)


@contextlib.contextmanager
def yaml_once() -> Iterator[None]:
    parse, render = JobConfig.__dict__["from_yaml"], JobConfig.to_yaml

    def from_yaml(cls: type[JobConfig], text: str, job_name: str | None = None) -> JobConfig:
        found = _PARSED.get((text, job_name))
        if found is None:
            found = _PARSED[(text, job_name)] = parse.__func__(cls, text, job_name)
        return found

    def to_yaml(config: JobConfig) -> str:
        found = _RENDERED.get(config)
        if found is None:
            found = _RENDERED[config] = render(config)
        return found

    setattr(JobConfig, "from_yaml", classmethod(from_yaml))  # noqa: B010 - put back below
    setattr(JobConfig, "to_yaml", to_yaml)  # noqa: B010
    setattr(membership, "instance_yaml", _instance_yaml)  # noqa: B010
    try:
        yield
    finally:
        setattr(JobConfig, "from_yaml", parse)  # noqa: B010
        setattr(JobConfig, "to_yaml", render)  # noqa: B010
        setattr(membership, "instance_yaml", instance_yaml)  # noqa: B010


@contextlib.contextmanager
def logging_off() -> Iterator[None]:
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(previous)
