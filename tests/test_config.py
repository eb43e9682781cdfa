from __future__ import annotations

import json
import os.path
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardcron.config.conversion import parse_sharding_item_parameters
from shardcron.config.drift import apply_settings
from shardcron.config.file import AppConfig, check_file, load_config_file
from shardcron.config.instancerecord import InstanceRecord, instance_yaml, parse_instance_yaml
from shardcron.config.job import JobConfig, resolve_callable
from shardcron.config.jobtypes import JobType
from shardcron.config.registry import RegistryConfig, parse_registry_url
from shardcron.config.snakeyaml import Props
from shardcron.errors import ConfigError

# The POJO test sample of ElasticJob 3.x (reference §2.4), as Java writes it.
JAVA_SAMPLE = """\
cron: 0/1 * * * * ?
description: Job description
disabled: false
failover: false
jobErrorHandlerType: IGNORE
jobExecutorThreadPoolSizeProviderType: CPU
jobName: test_job
jobParameter: param
jobShardingStrategyType: AVG_ALLOCATION
maxTimeDiffSeconds: -1
misfire: false
monitorExecution: false
overwrite: false
props:
  key: value
reconcileIntervalMinutes: 0
shardingItemParameters: 0=A,1=B,2=C
shardingTotalCount: 3
staticSharding: false
"""


def valid_job(**changes: Any) -> JobConfig:
    base = JobConfig(
        job_name="orders", sharding_total_count=3, cron="0/5 * * * * ?", callable="json:dumps"
    )
    return base.with_changes(**changes)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "jobs.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


# --- defaults ------------------------------------------------------------------------------


def test_defaults_are_the_java_builder_defaults() -> None:
    cfg = JobConfig(job_name="j", sharding_total_count=1)
    assert cfg.cron is None
    assert cfg.time_zone is None
    assert cfg.sharding_item_parameters == ""
    assert cfg.job_parameter == ""
    assert cfg.monitor_execution is True
    assert cfg.failover is False
    assert cfg.misfire is True
    assert cfg.max_time_diff_seconds == -1
    assert cfg.reconcile_interval_minutes == 10
    assert cfg.job_sharding_strategy_type is None
    assert cfg.sharding_strategy == "AVG_ALLOCATION"
    assert cfg.job_executor_service_handler_type is None
    assert cfg.executor_service_handler == "CPU"
    assert cfg.job_error_handler_type is None
    assert cfg.error_handler == "LOG"
    assert cfg.job_listener_types == ()
    assert cfg.description == ""
    assert dict(cfg.props) == {}
    assert (cfg.disabled, cfg.overwrite, cfg.static_sharding) == (False, False, False)
    assert cfg.label is None
    assert cfg.type is JobType.SIMPLE
    assert cfg.callable is None


def test_config_is_immutable_and_hashable() -> None:
    cfg = valid_job(props={"b": "2", "a": "1"}, job_listener_types=["x"])
    assert isinstance(cfg.props, Props)
    assert list(cfg.props) == ["b", "a"]  # the order given: Java's insertion order
    assert cfg.job_listener_types == ("x",)
    same = valid_job(props={"a": "1", "b": "2"}, job_listener_types=("x",))
    assert cfg == same and hash(cfg) == hash(same)  # order does not matter to equality
    with pytest.raises(AttributeError):
        cfg.cron = "x"  # type: ignore[misc]


def test_type_given_as_text_becomes_the_enum() -> None:
    assert JobConfig(job_name="j", sharding_total_count=1, type="script").type is JobType.SCRIPT  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="type: unknown job type 'BATCH'"):
        JobConfig(job_name="j", sharding_total_count=1, type="BATCH")  # type: ignore[arg-type]


def test_accessors() -> None:
    cfg = valid_job(sharding_item_parameters=" 0 = Beijing , 1=Shanghai,2=a=b", props={"k": "v"})
    assert cfg.sharding_parameters() == {0: "Beijing", 1: "Shanghai", 2: "a=b"}
    assert cfg.prop("k") == "v"
    assert cfg.prop("missing") is None
    assert cfg.prop("missing", "d") == "d"
    assert cfg.node_value == "json:dumps"
    assert valid_job(type=JobType.SCRIPT, callable=None).node_value == "SCRIPT"


def test_blank_sharding_parameters_mean_none() -> None:
    assert parse_sharding_item_parameters("") == {}
    assert parse_sharding_item_parameters("  ") == {}


def test_sharding_parameters_accessor_names_the_job() -> None:
    with pytest.raises(ConfigError, match=r"^job 'orders': shardingItemParameters: "):
        valid_job(sharding_item_parameters="0=a,x").sharding_parameters()


# --- validation ----------------------------------------------------------------------------


def test_a_valid_job_has_no_problems() -> None:
    cfg = valid_job(
        sharding_item_parameters="0=a,1=b,2=c",
        job_sharding_strategy_type="ROUND_ROBIN",
        job_executor_service_handler_type="SINGLE_THREAD",
        job_error_handler_type="THROW",
        failover=True,
        max_time_diff_seconds=60,
        reconcile_interval_minutes=0,
    )
    assert cfg.validate_all() == []
    cfg.validate()


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"job_name": ""}, "jobName"),
        ({"job_name": "a/b"}, "jobName"),
        ({"job_name": ".."}, "jobName"),
        ({"job_name": "tab\there"}, "jobName"),
        ({"sharding_total_count": 0}, "shardingTotalCount"),
        ({"sharding_total_count": -2}, "shardingTotalCount"),
        ({"cron": "not a cron"}, "cron"),
        ({"cron": "0 0 25 * * ?"}, "cron"),
        ({"time_zone": "Mars/Olympus"}, "timeZone"),
        ({"sharding_item_parameters": "0=a,x"}, "shardingItemParameters"),
        ({"sharding_item_parameters": "a=b"}, "shardingItemParameters"),
        ({"sharding_item_parameters": "0=a,0=b"}, "shardingItemParameters"),
        ({"sharding_item_parameters": "3=d"}, "shardingItemParameters"),
        ({"sharding_item_parameters": "-1=d"}, "shardingItemParameters"),
        ({"job_sharding_strategy_type": "RANDOM"}, "jobShardingStrategyType"),
        ({"job_sharding_strategy_type": "no_such_module_xyz:Strategy"}, "jobShardingStrategyType"),
        ({"job_executor_service_handler_type": "GPU"}, "jobExecutorServiceHandlerType"),
        ({"job_error_handler_type": "PAGER"}, "jobErrorHandlerType"),
        ({"type": JobType.SCRIPT}, "script.command.line"),
        ({"type": JobType.HTTP, "props": {"http.method": "GET"}}, "http.uri"),
        ({"type": JobType.HTTP, "props": {"http.uri": "http://x"}}, "http.method"),
        (
            {"type": JobType.HTTP, "props": {"http.uri": "http://x", "http.method": "FETCH"}},
            "http.method",
        ),
        ({"callable": None}, "callable"),
        ({"type": JobType.DATAFLOW, "callable": None}, "callable"),
        ({"callable": ":run"}, "callable"),
        ({"callable": "json"}, "callable"),
        ({"failover": True, "monitor_execution": False}, "failover"),
        ({"max_time_diff_seconds": -2}, "maxTimeDiffSeconds"),
        ({"reconcile_interval_minutes": -1}, "reconcileIntervalMinutes"),
        ({"props": {"shardcron.callable": "x:y"}}, "shardcron.callable"),
    ],
)
def test_each_invalid_setting_gives_a_one_line_error_naming_the_field(
    changes: dict[str, Any], field: str
) -> None:
    cfg = valid_job(**changes)
    problems = cfg.validate_all()
    assert len(problems) == 1, problems
    message = str(problems[0])
    assert field in message
    assert "\n" not in message
    with pytest.raises(ConfigError) as raised:
        cfg.validate()
    assert str(raised.value) == message


def test_errors_name_the_job() -> None:
    [problem] = valid_job(sharding_total_count=0).validate_all()
    assert str(problem) == "job 'orders': shardingTotalCount: must be at least 1; got 0"
    assert (problem.job, problem.field) == ("orders", "shardingTotalCount")


def test_validate_all_collects_every_problem() -> None:
    cfg = valid_job(sharding_total_count=0, cron="nope", callable=None, max_time_diff_seconds=-5)
    fields = [problem.field for problem in cfg.validate_all()]
    assert fields == ["shardingTotalCount", "cron", "callable", "maxTimeDiffSeconds"]


def test_script_and_http_jobs_need_no_callable() -> None:
    script = valid_job(type=JobType.SCRIPT, callable=None, props={"script.command.line": "echo"})
    http = valid_job(
        type=JobType.HTTP, callable=None, props={"http.uri": "http://x", "http.method": "post"}
    )
    assert script.validate_all() == []
    assert http.validate_all() == []


def test_one_off_job_needs_no_cron() -> None:
    assert valid_job(cron=None).validate_all() == []


def test_validation_never_imports_what_a_config_names() -> None:
    cfg = valid_job(
        callable="no_such_module_xyz:run",
        job_sharding_strategy_type="no_such_module_abc:Strategy",
        job_listener_types=("no_such_module_def:Listener",),
    )
    fields = [problem.field for problem in cfg.validate_all()]
    assert fields == ["jobShardingStrategyType", "jobListenerTypes"]
    assert not {"no_such_module_xyz", "no_such_module_abc", "no_such_module_def"} & set(sys.modules)


def test_operator_tools_accept_a_plain_unknown_name_but_never_a_module_reference() -> None:
    plain = valid_job(job_sharding_strategy_type="MY_STRATEGY", job_error_handler_type="PAGER")
    assert plain.validate_all(registered_only=False) == []
    assert [p.field for p in plain.validate_all()] == [
        "jobShardingStrategyType",
        "jobErrorHandlerType",
    ]
    code = valid_job(job_sharding_strategy_type="os:system")
    assert [p.field for p in code.validate_all(registered_only=False)] == [
        "jobShardingStrategyType"
    ]


def test_a_local_file_imports_its_own_callable_and_reports_one_that_does_not_import(
    tmp_path: Path,
) -> None:
    path = write(
        tmp_path,
        """
        jobs:
          good: {shardingTotalCount: 1, callable: "json:dumps"}
          bad: {shardingTotalCount: 1, callable: "json:no_such_function"}
        """,
    )
    (problem,) = check_file(path)
    assert "job 'bad': callable:" in problem and "no_such_function" in problem


def test_resolve_callable_follows_the_qualname() -> None:
    assert resolve_callable("json:JSONEncoder.encode") is json.JSONEncoder.encode
    assert resolve_callable(" os.path : join ") is os.path.join


@pytest.mark.parametrize(
    ("ref", "says"),
    [
        ("json", "is not 'module:qualname'"),
        (":dumps", "is not 'module:qualname'"),
        ("no_such_module_xyz:run", "cannot import module 'no_such_module_xyz'"),
        ("json:JSONEncoder.nope", "module 'json', in 'JSONEncoder', has no 'nope'"),
        ("json:lods", "module 'json' has no 'lods'; did you mean 'loads'?"),
        ("json:JSONEncoder.encdoe", "in 'JSONEncoder', has no 'encdoe'; did you mean 'encode'?"),
    ],
)
def test_resolve_callable_says_which_part_failed(ref: str, says: str) -> None:
    with pytest.raises(ConfigError) as raised:
        resolve_callable(ref)
    assert raised.value.field == "callable"
    assert says in str(raised.value)


def test_resolve_callable_reports_a_module_that_fails_while_importing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_job_module_xyz.py").write_text("raise RuntimeError('boom\\nsecond line')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as raised:
        resolve_callable("broken_job_module_xyz:run")
    assert "RuntimeError: boom second line" in str(raised.value)
    assert "\n" not in str(raised.value)


# --- registry YAML ---------------------------------------------------------------------------


def test_java_sample_round_trips_byte_for_byte() -> None:
    cfg = JobConfig.from_yaml(JAVA_SAMPLE)
    assert cfg.job_name == "test_job"
    assert cfg.sharding_parameters() == {0: "A", 1: "B", 2: "C"}
    assert cfg.job_executor_service_handler_type == "CPU"
    assert dict(cfg.props) == {"key": "value"}
    assert cfg.to_yaml() == JAVA_SAMPLE


def test_java_304_thread_pool_key_round_trips_too() -> None:
    old = JAVA_SAMPLE.replace(
        "jobExecutorThreadPoolSizeProviderType", "jobExecutorServiceHandlerType"
    )
    cfg = JobConfig.from_yaml(old)
    assert cfg.job_executor_service_handler_type == "CPU"
    assert cfg.to_yaml() == old
    assert cfg == JobConfig.from_yaml(JAVA_SAMPLE)


def test_builder_defaults_write_every_boolean_and_int_and_omit_nulls() -> None:
    cfg = JobConfig(job_name="j", sharding_total_count=2, cron="0 0/5 * * * ?")
    assert cfg.to_yaml() == textwrap.dedent(
        """\
        cron: 0 0/5 * * * ?
        description: ''
        disabled: false
        failover: false
        jobName: j
        jobParameter: ''
        maxTimeDiffSeconds: -1
        misfire: true
        monitorExecution: true
        overwrite: false
        reconcileIntervalMinutes: 10
        shardingItemParameters: ''
        shardingTotalCount: 2
        staticSharding: false
        """
    )


def test_python_only_settings_go_into_props_with_the_prefix() -> None:
    cfg = valid_job(
        type=JobType.DATAFLOW,
        props={"streaming.process": "true", "http.connect.timeout.milliseconds": "3000"},
        job_listener_types=("audit", "metrics"),
        time_zone="GMT+08:00",
        label="blue",
    )
    text = cfg.to_yaml()
    assert "\ntype:" not in text
    assert "\ncallable:" not in text
    assert (
        textwrap.dedent(
            """\
        jobListenerTypes:
        - audit
        - metrics
        """
        )
        in text
    )
    assert (
        textwrap.dedent(
            """\
        props:
          shardcron.type: DATAFLOW
          shardcron.callable: json:dumps
          http.connect.timeout.milliseconds: '3000'
          streaming.process: 'true'
        """
        )
        in text
    )
    assert "\nlabel: blue\n" in text
    assert text.endswith("timeZone: GMT+08:00\n")
    back = JobConfig.from_yaml(text)
    assert back == cfg
    assert (back.type, back.callable) == (JobType.DATAFLOW, "json:dumps")
    assert "shardcron.type" not in back.props


def test_simple_type_is_not_written() -> None:
    assert "shardcron.type" not in valid_job().to_yaml()


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("0/1 * * * * ?", "0/1 * * * * ?"),
        ("* * * * * ?", "'* * * * * ?'"),
        ("true", "'true'"),
        ("off", "'off'"),
        ("3000", "'3000'"),
        ("-1", "'-1'"),
        ("1.5", "'1.5'"),
        ("1e5", "'1e5'"),
        ("null", "'null'"),
        ("a: b", "'a: b'"),
        ("a #b", "'a #b'"),
        ("#x", "'#x'"),
        ("@x", "'@x'"),
        ("", "''"),
        ("plain text", "plain text"),
        ("127.0.0.1@-@0", "127.0.0.1@-@0"),
        ("0=A,1=B", "0=A,1=B"),
        ("北京", "北京"),
    ],
)
def test_strings_are_quoted_as_snakeyaml_quotes_them(value: str, written: str) -> None:
    assert f"\njobParameter: {written}\n" in valid_job(job_parameter=value).to_yaml()
    assert JobConfig.from_yaml(valid_job(job_parameter=value).to_yaml()).job_parameter == value


def test_absent_keys_get_the_pojo_defaults() -> None:
    cfg = JobConfig.from_yaml("jobName: j\n")
    assert cfg.sharding_total_count == 0
    assert cfg.monitor_execution is False
    assert cfg.misfire is False
    assert cfg.reconcile_interval_minutes == 0
    assert cfg.failover is False
    assert cfg.max_time_diff_seconds == -1
    assert cfg.cron is None
    assert cfg.job_error_handler_type is None


def test_job_name_may_come_from_the_node_path() -> None:
    assert JobConfig.from_yaml("shardingTotalCount: 1\n", job_name="j").job_name == "j"
    assert JobConfig.from_yaml("jobName: y\n", job_name="j").job_name == "y"
    with pytest.raises(ConfigError, match="jobName: missing"):
        JobConfig.from_yaml("shardingTotalCount: 1\n")


def test_tagged_extra_configurations_and_unknown_keys_are_ignored() -> None:
    text = JAVA_SAMPLE + textwrap.dedent(
        """\
        jobExtraConfigurations:
        - !!org.apache.shardingsphere.elasticjob.kernel.tracing.yaml.YamlTracingConfiguration
          tracingStorageConfiguration: !!org.apache.shardingsphere.elasticjob.tracing.rdb.yaml.YamlDataSourceConfiguration
            dataSourceClassName: com.zaxxer.hikari.HikariDataSource
            props: {jdbcUrl: 'jdbc:h2:mem:x'}
          type: RDB
        someFutureKey: 1
        """
    )
    cfg = JobConfig.from_yaml(text)
    assert cfg.to_yaml() == JAVA_SAMPLE


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("jobName: j\nshardingTotalCount: many\n", "shardingTotalCount"),
        ("jobName: j\nfailover: maybe\n", "failover"),
        ("jobName: j\nprops:\n  shardcron.type: BATCH\n", "props.shardcron.type"),
        ("- a\n", "config"),
        ("jobName: [unclosed\n", "yaml"),
    ],
)
def test_bad_registry_yaml_gives_a_one_line_error(text: str, field: str) -> None:
    with pytest.raises(ConfigError) as raised:
        JobConfig.from_yaml(text)
    assert raised.value.field == field
    assert "\n" not in str(raised.value)


# A config the registry round trip must preserve exactly: text without control or
# surrogate characters, props without the reserved prefix.
_text = st.text(st.characters(exclude_categories=("Cs", "Cc")), max_size=20)
_name = st.text(st.characters(codec="ascii", categories=("L", "N")), min_size=1, max_size=10)
_configs = st.builds(
    JobConfig,
    job_name=_name,
    sharding_total_count=st.integers(-5, 1000),
    cron=st.none() | _text,
    time_zone=st.none() | _text,
    sharding_item_parameters=_text,
    job_parameter=_text,
    monitor_execution=st.booleans(),
    failover=st.booleans(),
    misfire=st.booleans(),
    max_time_diff_seconds=st.integers(-10, 10**6),
    reconcile_interval_minutes=st.integers(-10, 10**6),
    job_sharding_strategy_type=st.none() | _text,
    job_executor_service_handler_type=st.none() | _text,
    job_error_handler_type=st.none() | _text,
    job_listener_types=st.lists(_text, max_size=3).map(tuple),
    description=_text,
    props=st.dictionaries(_text.filter(lambda k: not k.startswith("shardcron.")), _text),
    disabled=st.booleans(),
    overwrite=st.booleans(),
    label=st.none() | _text,
    static_sharding=st.booleans(),
    type=st.sampled_from(JobType),
    callable=st.none() | _text,
)


@settings(deadline=None)
@given(_configs)
def test_every_config_survives_the_registry_round_trip(cfg: JobConfig) -> None:
    text = cfg.to_yaml()
    back = JobConfig.from_yaml(text)
    assert back == cfg
    if len(back.props) + 2 < 12:
        # From 12 props (with shardcron.type and .callable) Java's map grows while it is read,
        # which reverses part of a shared bin, so Java's own rewrite may reorder them too.
        assert back.to_yaml() == text


# --- instance node -----------------------------------------------------------------------------


def test_instance_yaml_is_exactly_what_java_writes() -> None:
    assert instance_yaml("127.0.0.1@-@0", "127.0.0.1") == (
        "jobInstanceId: 127.0.0.1@-@0\nserverIp: 127.0.0.1\n"
    )
    assert instance_yaml("127.0.0.1@-@0", "127.0.0.1", labels="labels") == (
        "jobInstanceId: 127.0.0.1@-@0\nlabels: labels\nserverIp: 127.0.0.1\n"
    )


def test_instance_yaml_parses_back() -> None:
    text = instance_yaml("10.0.0.7@-@4242", "10.0.0.7", labels="a,b")
    assert parse_instance_yaml(text) == InstanceRecord(
        instance_id="10.0.0.7@-@4242", server_ip="10.0.0.7", labels="a,b"
    )
    with pytest.raises(ConfigError, match="serverIp"):
        parse_instance_yaml("jobInstanceId: x\n")
    with pytest.raises(ConfigError, match="jobInstanceId"):
        parse_instance_yaml("serverIp: 10.0.0.7\n")
    with pytest.raises(ConfigError, match="instance: expected a YAML mapping"):
        parse_instance_yaml("")


# --- user config file --------------------------------------------------------------------------


SPEC_FILE = """\
registry:
  servers: 127.0.0.1:2181
  namespace: my-app
  sessionTimeoutMilliseconds: 10000
  digest: user:password
jobs:
  orders:
    type: SIMPLE
    callable: json:dumps
    cron: "0/5 * * * * ?"
    timeZone: Asia/Shanghai
    shardingTotalCount: 3
    shardingItemParameters: "0=Beijing,1=Shanghai,2=Guangzhou"
    failover: true
  ledger:
    type: SCRIPT
    cron: "* * * * * ?"
    shardingTotalCount: 4
    props:
      script.command.line: "python3 ledger.py"
      streaming.process: true
      timeout: 30
"""


def test_the_spec_example_file_loads(tmp_path: Path) -> None:
    app = load_config_file(write(tmp_path, SPEC_FILE))
    assert app.registry == RegistryConfig(
        servers="127.0.0.1:2181",
        namespace="my-app",
        session_timeout_ms=10000,
        digest="user:password",
    )
    orders, ledger = app.jobs
    assert orders == JobConfig(
        job_name="orders",
        callable="json:dumps",
        cron="0/5 * * * * ?",
        time_zone="Asia/Shanghai",
        sharding_total_count=3,
        sharding_item_parameters="0=Beijing,1=Shanghai,2=Guangzhou",
        failover=True,
    )
    assert ledger.type is JobType.SCRIPT
    assert dict(ledger.props) == {
        "script.command.line": "python3 ledger.py",
        "streaming.process": "true",
        "timeout": "30",
    }
    assert check_file(tmp_path / "jobs.yaml") == []


def test_a_file_without_registry_means_the_embedded_one(tmp_path: Path) -> None:
    path = write(tmp_path, "jobs:\n  j: {callable: 'json:dumps', shardingTotalCount: 1}\n")
    assert load_config_file(path) == AppConfig(
        registry=None,
        jobs=(JobConfig(job_name="j", sharding_total_count=1, callable="json:dumps"),),
    )


def test_registry_may_be_given_as_a_url(tmp_path: Path) -> None:
    app = load_config_file(write(tmp_path, "registry: zk://h1:2181,h2:2181/ns\n"))
    assert app.registry == RegistryConfig(servers="h1:2181,h2:2181", namespace="ns")
    assert app.jobs == ()


def test_unknown_key_suggests_the_right_one(tmp_path: Path) -> None:
    path = write(tmp_path, "jobs:\n  j:\n    cronn: '0 * * * * ?'\n    shardingTotalCount: 1\n")
    with pytest.raises(ConfigError) as raised:
        load_config_file(path, validate=False)
    assert str(raised.value) == "job 'j': cronn: unknown key; did you mean 'cron'?"


def test_bad_yaml_is_one_line_with_the_line_number(tmp_path: Path) -> None:
    path = write(tmp_path, "jobs:\n  j:\n    cron: '0 * * * * ?\n    shardingTotalCount: 1\n")
    with pytest.raises(ConfigError) as raised:
        load_config_file(path)
    assert raised.value.field == "yaml"
    assert "line " in str(raised.value)
    assert "\n" not in str(raised.value)


def test_bad_yaml_names_the_right_line(tmp_path: Path) -> None:
    path = write(tmp_path, "jobs:\n  j:\n    cron: a\n   bad: : x\n")
    [line] = check_file(path)
    assert line.startswith(f"{path}: yaml: line 4,")


def test_duplicate_keys_are_reported(tmp_path: Path) -> None:
    path = write(tmp_path, "jobs:\n  j: {shardingTotalCount: 1}\n  j: {shardingTotalCount: 2}\n")
    [line] = check_file(path)
    assert "line 3" in line
    assert "duplicate key 'j'" in line


def test_check_file_lists_every_problem_on_its_own_line(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        registry:
          servers: zk1:2181
          namespace: app
          maxRetries: lots
        jobs:
          a:
            callable: json:dumps
            shardingTotalCount: 0
            cron: "0 0 0 * *"
            failover: true
            monitorExecution: false
          b:
            type: SCRIPT
            shardingTotalCount: two
            shardingItemParameters: "0=x,y"
            misfir: true
        extra: 1
        """,
    )
    problems = check_file(path)
    expected = [
        "extra: unknown key",
        "registry.maxRetries: expected an integer, got 'lots'",
        "job 'a': shardingTotalCount: must be at least 1; got 0",
        "job 'a': cron: ",
        "job 'a': failover: needs monitorExecution: true",
        "job 'b': shardingTotalCount: expected an integer, got 'two'",
        "job 'b': misfir: unknown key; did you mean 'misfire'?",
        "job 'b': shardingItemParameters: 'y' is not ITEM=VALUE; write e.g. 0=a,1=b",
        "job 'b': props.script.command.line: required for SCRIPT jobs",
    ]
    assert len(problems) == len(expected), problems
    for problem, start in zip(problems, expected, strict=True):
        assert problem.startswith(f"{path}: {start}")
    assert all("\n" not in problem for problem in problems)


def test_missing_sharding_total_count_is_reported_once(tmp_path: Path) -> None:
    path = write(tmp_path, "jobs:\n  j:\n    callable: json:dumps\n")
    assert check_file(path) == [
        f"{path}: job 'j': shardingTotalCount: required: the number of items, e.g. 3"
    ]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("- a\n", "file: expected a mapping with 'registry' and 'jobs', got a list"),
        ("jobs: [a]\n", "jobs: expected a mapping of job names to settings, got a list"),
        ("jobs:\n  j: 3\n", "job 'j': settings: expected a mapping, got an int"),
        ("registry: 3\n", "registry: expected a mapping or a URL, got an int"),
        ("registry:\n  servers: h:1\n", "registry.namespace: required"),
        ("registry:\n  servers: h:1\n  namespace: n\n  sessionTimeout: 1\n", "did you mean"),
        ("registry: mysql://x\n", "registry: 'mysql://x' is not zk://"),
        (
            "jobs:\n  j:\n    jobName: k\n    shardingTotalCount: 1\n",
            "jobName: 'k' differs from 'j'",
        ),
        ("jobs:\n  j:\n    type: BATCH\n    shardingTotalCount: 1\n", "type: unknown job type"),
        (
            "jobs:\n  j:\n    shardingTotalCount: 1\n    props: {shardcron.callable: 'a:b'}\n",
            "reserved",
        ),
        (
            "jobs:\n  j:\n    shardingTotalCount: 1\n    props: [a]\n",
            "props: expected a mapping, got a list",
        ),
        (
            "jobs:\n  j:\n    shardingTotalCount: 1\n    jobListenerTypes: {a: 1}\n",
            "expected a list, got a mapping",
        ),
        ("jobs:\n  j:\n    shardingTotalCount: true\n", "expected an integer, got true"),
    ],
)
def test_file_shape_problems(tmp_path: Path, text: str, says: str) -> None:
    problems = check_file(write(tmp_path, text))
    assert any(says in problem for problem in problems), problems
    assert all("\n" not in problem for problem in problems)


def test_unreadable_file_is_one_problem(tmp_path: Path) -> None:
    [problem] = check_file(tmp_path / "missing.yaml")
    assert "file: cannot read" in problem


def test_validate_false_skips_only_the_semantic_checks(tmp_path: Path) -> None:
    path = write(tmp_path, "jobs:\n  j:\n    shardingTotalCount: 1\n")
    [job] = load_config_file(path, validate=False).jobs
    assert job.callable is None
    with pytest.raises(ConfigError, match="callable: required"):
        load_config_file(path)


def test_from_mapping_converts_loose_values() -> None:
    cfg = JobConfig.from_mapping(
        {
            "shardingTotalCount": "4",
            "failover": "TRUE",
            "jobListenerTypes": "a, b",
            "jobParameter": 42,
            "cron": None,
            "callable": "json:dumps",
        },
        "j",
    )
    assert (cfg.sharding_total_count, cfg.failover) == (4, True)
    assert cfg.job_listener_types == ("a", "b")
    assert cfg.job_parameter == "42"
    assert cfg.cron is None
    assert JobConfig.from_mapping({"jobName": "k", "shardingTotalCount": 1}).job_name == "k"


# --- apply_settings ----------------------------------------------------------------------------


def test_apply_settings_converts_strings() -> None:
    cfg = apply_settings(
        valid_job(label="x", props={"old": "1"}),
        {
            "shardingTotalCount": "5",
            "failover": "true",
            "cron": "0 0 * * * ?",
            "label": "",
            "jobListenerTypes": "a,b",
            "type": "dataflow",
            "props.streaming.process": "true",
            "props.old": "",
            "jobExecutorThreadPoolSizeProviderType": "SINGLE_THREAD",
        },
    )
    assert cfg.sharding_total_count == 5
    assert cfg.failover is True
    assert cfg.cron == "0 0 * * * ?"
    assert cfg.label is None
    assert cfg.job_listener_types == ("a", "b")
    assert cfg.type is JobType.DATAFLOW
    assert dict(cfg.props) == {"streaming.process": "true"}
    assert cfg.job_executor_service_handler_type == "SINGLE_THREAD"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"shardingTotalCount": "five"}, "job 'orders': shardingTotalCount: expected an integer"),
        ({"failover": "yes please"}, "job 'orders': failover: expected a boolean"),
        ({"jobName": "other"}, "job 'orders': jobName: cannot be changed"),
        ({"cronn": "x"}, "job 'orders': cronn: unknown key; did you mean 'cron'?"),
        ({"props": "a=b"}, "job 'orders': props: set one property at a time"),
        ({"props.shardcron.callable": "a:b"}, "props.shardcron.callable: reserved"),
        ({"type": "BATCH"}, "job 'orders': type: unknown job type 'BATCH'"),
    ],
)
def test_apply_settings_errors(settings: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        apply_settings(valid_job(), settings)
    assert message in str(raised.value)


# --- registry settings -------------------------------------------------------------------------


def test_registry_defaults() -> None:
    cfg = RegistryConfig(servers="h:2181", namespace="ns")
    assert (cfg.session_timeout_ms, cfg.connection_timeout_ms) == (10_000, 15_000)
    assert (cfg.base_sleep_ms, cfg.max_sleep_ms, cfg.max_retries) == (1_000, 3_000, 3)
    assert cfg.digest is None
    assert not cfg.is_memory
    assert cfg.validate_all() == []


def test_parse_zk_url() -> None:
    assert parse_registry_url("zk://h1:2181,h2:2181/ns") == RegistryConfig(
        servers="h1:2181,h2:2181", namespace="ns"
    )
    assert parse_registry_url(
        "zk://user:p%40ss@h1:2181/ns?sessionTimeoutMilliseconds=30000&maxRetries=5"
    ) == RegistryConfig(
        servers="h1:2181",
        namespace="ns",
        digest="user:p@ss",
        session_timeout_ms=30000,
        max_retries=5,
    )


def test_parse_memory_url() -> None:
    assert parse_registry_url("memory://") == RegistryConfig(
        servers="memory", namespace="shardcron"
    )
    assert parse_registry_url("memory://demo").namespace == "demo"
    assert parse_registry_url("memory://demo").is_memory


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("h1:2181/ns", "is not zk://"),
        ("http://h1/ns", "is not zk://"),
        ("zk://h1:2181", "names no namespace; add /NAMESPACE"),
        ("zk:///ns", "registry.servers: must name"),
        ("zk://h:1/ns?maxRetries=-1", "registry.maxRetries: must be 0 or more"),
        ("zk://h:1/ns?sessionTimeoutMilliseconds=x", "expected an integer"),
        ("zk://h:1/ns?timeout=1", "timeout: unknown key"),
        ("zk://nocolon@h:1/ns", "registry.digest: must be USER:PASSWORD"),
    ],
)
def test_bad_registry_urls(url: str, says: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_registry_url(url)
    assert says in str(raised.value)
    assert "\n" not in str(raised.value)
