"""Unit-testing your own jobs, without a registry or a schedule.

::

    from shardcron.testing import run_item, sharding_context

    process_orders(sharding_context(item=1, total=3, parameter="Shanghai"))  # a plain call
    run_item(load_config_file("jobs.yaml").jobs[0], item=1)  # as a worker runs it

:func:`run_item` goes through the same runner a worker uses, so coroutine functions are awaited,
DATAFLOW objects fetch and process (repeatedly with ``streaming.process``), and SCRIPT and
HTTP jobs run their command or request. Exceptions propagate: a failing item raises.
"""

from __future__ import annotations

from collections.abc import Callable

from shardcron.config.job import JobConfig
from shardcron.config.jobtypes import JobType
from shardcron.errors import ConfigError
from shardcron.execution.jobs import AsyncLoop, make_runner
from shardcron.model import ExecutionSource, ShardingContext, task_id

Flag = bool | Callable[[], bool]


def sharding_context(
    item: int = 0,
    total: int = 1,
    *,
    parameter: str | None = None,
    job_parameter: str = "",
    job_name: str = "test-job",
    fencing_token: int = 1,
    source: ExecutionSource = ExecutionSource.NORMAL_TRIGGER,
    claim_current: Flag = True,
    keep_going: Flag = True,
) -> ShardingContext:
    """The context a worker would hand item ``item`` of ``total``.

    ``claim_current`` and ``keep_going`` answer ``ctx.claim_is_current()`` and
    ``ctx.should_continue()``: a bool, or a function for answers that change over the run.
    """
    if not 0 <= item < total:
        raise ConfigError("item", f"{item} is out of range 0..{total - 1} (total is {total})")
    return ShardingContext(
        job_name=job_name,
        task_id=task_id(job_name, [item], "127.0.0.1"),
        sharding_total_count=total,
        job_parameter=job_parameter,
        sharding_item=item,
        sharding_parameter=parameter,
        fencing_token=fencing_token,
        source=source,
        _claim_check=_answer(claim_current),
        _keep_going=_answer(keep_going),
    )


def run_item(
    job: JobConfig | object,
    item: int = 0,
    *,
    total: int | None = None,
    parameter: str | None = None,
    job_parameter: str | None = None,
    claim_current: Flag = True,
    keep_going: Flag = True,
) -> ShardingContext:
    """Run one item of ``job`` as a worker would; return the context it ran with.

    ``job`` is a JobConfig (its callable is imported; total, parameters and job parameter come
    from it unless given here), a function taking the context, or a DATAFLOW object with
    ``fetch_data`` and ``process_data``.
    """
    config = job if isinstance(job, JobConfig) else _config_for(job, total or 1)
    target = None if isinstance(job, JobConfig) else job
    ctx = sharding_context(
        item,
        total or config.sharding_total_count,
        parameter=parameter if parameter is not None else config.sharding_parameters().get(item),
        job_parameter=job_parameter if job_parameter is not None else config.job_parameter,
        job_name=config.job_name,
        claim_current=claim_current,
        keep_going=keep_going,
    )
    loop = AsyncLoop()
    try:
        make_runner(config, target, loop)(ctx)
    finally:
        loop.stop()
    return ctx


def _config_for(target: object, total: int) -> JobConfig:
    dataflow = callable(getattr(target, "fetch_data", None))
    name = getattr(target, "__name__", None) or type(target).__name__
    return JobConfig(
        job_name=name,
        sharding_total_count=total,
        type=JobType.DATAFLOW if dataflow else JobType.SIMPLE,
    )


def _answer(flag: Flag) -> Callable[[], bool]:
    if callable(flag):
        return flag
    return lambda: flag
