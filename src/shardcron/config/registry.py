"""How to reach the registry: RegistryConfig, its checks, and ``parse_registry_url`` for the
``zk://`` and ``memory://`` URLs (a config file's ``registry`` URL, ``--registry``,
``$SHARDCRON_REGISTRY``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote

from shardcron.config import secrecy
from shardcron.config.conversion import _convert, _Kind, _unknown_key
from shardcron.errors import ConfigError

MEMORY_SERVERS = "memory"
DEFAULT_MEMORY_NAMESPACE = "shardcron"


@dataclass(frozen=True, slots=True, kw_only=True)
class RegistryConfig:
    """How to reach ZooKeeper. ``servers == "memory"`` means the embedded in-process registry.

    ``session_timeout_ms`` defaults to 10 s (kazoo's default), not Curator's 60 s: the session
    timeout is how long a crashed instance's items wait before failover.
    """

    servers: str
    namespace: str
    session_timeout_ms: int = 10_000
    connection_timeout_ms: int = 15_000
    base_sleep_ms: int = 1_000
    max_sleep_ms: int = 3_000
    max_retries: int = 3
    digest: str | None = field(default=None, repr=False)  # USER:PASSWORD: never printed

    @property
    def is_memory(self) -> bool:
        return self.servers == MEMORY_SERVERS

    def validate_all(self) -> list[ConfigError]:
        problems: list[ConfigError] = []
        if not self.servers.strip():
            problems.append(ConfigError("registry.servers", "must name HOST:PORT[,HOST:PORT]"))
        if not self.namespace.strip("/"):
            problems.append(ConfigError("registry.namespace", "must not be empty"))
        for key, value in (
            ("sessionTimeoutMilliseconds", self.session_timeout_ms),
            ("connectionTimeoutMilliseconds", self.connection_timeout_ms),
            ("baseSleepTimeMilliseconds", self.base_sleep_ms),
            ("maxSleepTimeMilliseconds", self.max_sleep_ms),
        ):
            if value <= 0:
                problems.append(ConfigError(f"registry.{key}", f"must be positive; got {value}"))
        if self.max_retries < 0:
            problems.append(
                ConfigError("registry.maxRetries", f"must be 0 or more; got {self.max_retries}")
            )
        if self.digest is not None and ":" not in self.digest:
            problems.append(ConfigError("registry.digest", "must be USER:PASSWORD"))
        return problems


_REGISTRY_KEYS: dict[str, tuple[str, _Kind]] = {
    "servers": ("servers", _Kind.TEXT),
    "namespace": ("namespace", _Kind.TEXT),
    "sessionTimeoutMilliseconds": ("session_timeout_ms", _Kind.INT),
    "connectionTimeoutMilliseconds": ("connection_timeout_ms", _Kind.INT),
    "baseSleepTimeMilliseconds": ("base_sleep_ms", _Kind.INT),
    "maxSleepTimeMilliseconds": ("max_sleep_ms", _Kind.INT),
    "maxRetries": ("max_retries", _Kind.INT),
    "digest": ("digest", _Kind.OPTIONAL_TEXT),
}


def parse_registry_url(url: str) -> RegistryConfig:
    """``zk://[USER:PASSWORD@]HOST:PORT[,HOST:PORT]/NAMESPACE[?key=value&...]`` or
    ``memory://[NAMESPACE]`` (the embedded registry; namespace defaults to ``shardcron``).

    Query keys are the registry keys of the config file, e.g. ``sessionTimeoutMilliseconds``.
    """
    scheme, sep, rest = url.strip().partition("://")
    if scheme.lower() == "memory" and sep:
        namespace = rest.strip("/") or DEFAULT_MEMORY_NAMESPACE
        return RegistryConfig(servers=MEMORY_SERVERS, namespace=namespace)
    if scheme.lower() not in ("zk", "zookeeper") or not sep:
        raise ConfigError(
            "registry",
            f"{secrecy.redact_url(url)!r} is not zk://HOST:PORT[,HOST:PORT]/NAMESPACE or memory://",
        )
    rest, _, query = rest.partition("?")
    netloc, _, path = rest.partition("/")
    userinfo, at, servers = netloc.rpartition("@")
    namespace = unquote(path.strip("/"))
    if not namespace:
        raise ConfigError(
            "registry", f"{secrecy.redact_url(url)!r} names no namespace; add /NAMESPACE"
        )
    data: dict[str, object] = dict(parse_qsl(query, keep_blank_values=True))
    data.update(servers=servers, namespace=namespace)
    if at:
        data["digest"] = unquote(userinfo)
    cfg, errors = _parse_registry(data)
    if cfg is None or errors:
        raise errors[0]
    return cfg


def _parse_registry(data: Mapping[Any, object]) -> tuple[RegistryConfig | None, list[ConfigError]]:
    kwargs: dict[str, Any] = {}
    errors: list[ConfigError] = []
    for raw_key, raw in data.items():
        key = str(raw_key)
        if key not in _REGISTRY_KEYS:
            errors.append(_unknown_key(key, _REGISTRY_KEYS, None))
            continue
        if raw is None:
            continue
        attr, kind = _REGISTRY_KEYS[key]
        try:
            kwargs[attr] = _convert(key, kind, raw)
        except ConfigError as err:
            errors.append(ConfigError(f"registry.{err.field}", err.problem))
    missing = [key for key in ("servers", "namespace") if key not in kwargs]
    errors += [ConfigError(f"registry.{key}", "required") for key in missing]
    if missing:
        return None, errors
    cfg = RegistryConfig(**kwargs)
    return cfg, errors + cfg.validate_all()
