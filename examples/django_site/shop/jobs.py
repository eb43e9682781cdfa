"""The example site's jobs. Django is set up when they run, so they may use the ORM."""

from __future__ import annotations

import logging

from django.db import close_old_connections

from shardcron import ShardingContext

log = logging.getLogger(__name__)


def sync_stock(ctx: ShardingContext) -> None:
    # Job threads live outside Django's request cycle: drop stale connections ourselves.
    close_old_connections()
    log.info("syncing warehouse %s (item %d)", ctx.sharding_parameter, ctx.sharding_item)
