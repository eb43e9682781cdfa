"""Sample jobs for examples/jobs.yaml (run from the repository root so this imports)."""

from __future__ import annotations

import logging

from shardcron import ShardingContext

log = logging.getLogger("examples.orders")


def process_orders(ctx: ShardingContext) -> None:
    log.info(
        "item %d of %d (%s), fencing token %d",
        ctx.sharding_item,
        ctx.sharding_total_count,
        ctx.sharding_parameter,
        ctx.fencing_token,
    )
