"""Where a worker's registry comes from, and how it is named without its credentials."""

from __future__ import annotations

from shardcron.config.registry import parse_registry_url
from shardcron.scheduler.launch import EMBEDDED, choose_registry, describe_registry

FILE = parse_registry_url("zk://file-host:2181/from-file")


def test_the_flag_wins_then_the_variable_then_the_file_then_embedded() -> None:
    env = {"SHARDCRON_REGISTRY": "zk://env-host:2181/from-env"}
    assert choose_registry("zk://flag-host:2181/flag", FILE, env).namespace == "flag"
    assert choose_registry(None, FILE, env).namespace == "from-env"
    assert choose_registry(None, FILE, {}).namespace == "from-file"
    assert choose_registry(None, None, {}).is_memory
    assert choose_registry(None, FILE, {"SHARDCRON_REGISTRY": ""}).namespace == "from-file"


def test_the_description_names_servers_and_namespace_but_no_password() -> None:
    cfg = parse_registry_url(
        "zk://admin:s3cret@zk1:2181,zk2:2181/shop?sessionTimeoutMilliseconds=4000"
    )
    assert describe_registry(cfg) == "zk://zk1:2181,zk2:2181/shop"
    assert describe_registry(parse_registry_url("memory://")) == EMBEDDED
    assert EMBEDDED == "embedded: this process only"
