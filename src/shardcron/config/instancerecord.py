"""The value of ``/{job}/instances/{id}``: the record a worker, Java or Python, writes for each
job it runs (its instance id, server IP and labels).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from shardcron.config.conversion import _kind_name, _text
from shardcron.config.snakeyaml import RegistryLoader, dump_bean, load
from shardcron.errors import ConfigError


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceRecord:
    """The value of ``/{job}/instances/{id}``."""

    instance_id: str
    server_ip: str
    labels: str | None = None


@functools.lru_cache(maxsize=64)  # the same for every job of a process
def instance_yaml(instance_id: str, server_ip: str, labels: str | None = None) -> str:
    """``"jobInstanceId: ...\\nserverIp: ...\\n"`` (with ``labels`` between, if set)."""
    doc = {"jobInstanceId": instance_id, "labels": labels, "serverIp": server_ip}
    return dump_bean({k: v for k, v in doc.items() if v is not None})


def parse_instance_yaml(text: str) -> InstanceRecord:
    data = load(text, RegistryLoader)
    if not isinstance(data, dict):
        raise ConfigError("instance", f"expected a YAML mapping, got {_kind_name(data)}")
    instance_id, server_ip, labels = (data.get(k) for k in ("jobInstanceId", "serverIp", "labels"))
    if not isinstance(instance_id, str) or not instance_id:
        raise ConfigError("jobInstanceId", "missing from the instance node")
    if not isinstance(server_ip, str) or not server_ip:
        raise ConfigError("serverIp", "missing from the instance node")
    label_text = None if labels is None else _text("labels", labels)
    return InstanceRecord(instance_id=instance_id, server_ip=server_ip, labels=label_text)
