"""``sharding_context`` and ``run_item``: users test their own jobs without a registry."""

from __future__ import annotations

import asyncio
import inspect
import re
import sys
import types
from pathlib import Path

import pytest

from shardcron import ShardingContext
from shardcron.config.file import load_config_file
from shardcron.errors import ConfigError
from shardcron.testing.jobs import run_item, sharding_context
from tests.workers import ROOT

SEEN: list[ShardingContext] = []


def remember(ctx: ShardingContext) -> None:
    SEEN.append(ctx)


def test_sharding_context_carries_what_a_worker_gives() -> None:
    ctx = sharding_context(1, 3, parameter="Shanghai", job_parameter="full", job_name="orders")
    assert (ctx.sharding_item, ctx.sharding_total_count) == (1, 3)
    assert (ctx.sharding_parameter, ctx.job_parameter, ctx.job_name) == (
        "Shanghai",
        "full",
        "orders",
    )
    assert ctx.task_id.startswith("orders@-@1@-@READY@-@127.0.0.1@-@")
    assert ctx.claim_is_current() and ctx.should_continue()
    lost = sharding_context(claim_current=False, keep_going=False)
    assert not lost.claim_is_current() and not lost.should_continue()


def test_sharding_context_rejects_an_item_out_of_range() -> None:
    with pytest.raises(ConfigError, match=r"item: 3 is out of range 0..2 \(total is 3\)"):
        sharding_context(3, 3)


def test_run_item_of_a_config_file_job_uses_its_parameters(tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(
        "jobs:\n"
        "  orders:\n"
        "    callable: tests.test_jobtesting:remember\n"
        "    shardingTotalCount: 3\n"
        '    shardingItemParameters: "0=Beijing,1=Shanghai,2=Guangzhou"\n'
        "    jobParameter: full\n"
    )
    SEEN.clear()
    ctx = run_item(load_config_file(path).jobs[0], item=2)
    assert len(SEEN) == 1 and SEEN[0] is ctx
    assert (ctx.job_name, ctx.sharding_parameter, ctx.job_parameter) == (
        "orders",
        "Guangzhou",
        "full",
    )
    assert ctx.sharding_total_count == 3


def test_run_item_awaits_a_coroutine_job_and_raises_its_failure() -> None:
    done: list[int] = []

    async def job(ctx: ShardingContext) -> None:
        await asyncio.sleep(0)
        if ctx.sharding_item == 1:
            raise RuntimeError("item 1 failed")
        done.append(ctx.sharding_item)

    run_item(job, 0, total=2)
    assert done == [0]
    with pytest.raises(RuntimeError, match="item 1 failed"):
        run_item(job, 1, total=2)


class Batches:
    """A DATAFLOW job: fetches until its source runs dry."""

    def __init__(self) -> None:
        self.source = [[1, 2], [3]]
        self.processed: list[int] = []

    def fetch_data(self, ctx: ShardingContext) -> list[int]:
        return self.source.pop(0) if self.source else []

    def process_data(self, ctx: ShardingContext, data: list[int]) -> None:
        self.processed += data


def test_run_item_fetches_and_processes_a_dataflow_object_once() -> None:
    job = Batches()
    run_item(job)
    assert job.processed == [1, 2]  # not streaming: one fetch and one process per run


# --- the examples of docs/testing-your-jobs.md -------------------------------------------

DOC = ROOT / "docs" / "testing-your-jobs.md"
DOC_BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


@pytest.mark.parametrize("index", range(len(DOC_BLOCKS)))
def test_the_examples_of_testing_your_jobs_pass(
    index: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each block runs as a module of its own (its jobs import by name); its argument-free
    ``test_`` functions are called."""
    monkeypatch.chdir(ROOT)
    name = f"docs_testing_your_jobs_{index}"
    module = types.ModuleType(name)
    monkeypatch.setitem(sys.modules, name, module)
    code = compile(DOC_BLOCKS[index], f"{DOC}[block {index}]", "exec")
    exec(code, module.__dict__)  # noqa: S102  # our own docs, which must run as printed
    tests = [
        fn
        for key, fn in vars(module).items()
        if key.startswith("test_") and callable(fn) and not inspect.signature(fn).parameters
    ]
    for test in tests:
        test()
    assert tests or "zookeeper_server" in DOC_BLOCKS[index]
