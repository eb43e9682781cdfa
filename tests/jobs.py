"""Job bodies for worker processes started by the tests (imported by ``shardcron run``).

``ledger`` appends a JSON line to the file named by ``SHARDCRON_LEDGER`` when an item
starts and another when it ends (same ``run`` id): instance, item, times (the wall clock's
and the monotonic one's, which a step of the wall clock leaves alone), fencing token,
source, the second of the fire the run is for, and, with ``SHARDCRON_CHECK_CLAIM`` set, whether the claim was still current at
the end. Lines are written with O_APPEND in one call, so concurrent writers never
interleave. A run with a start line and no end line was interrupted.
"""

from __future__ import annotations

import json
import os
import time
import uuid

from shardcron.model import ShardingContext, default_instance_id


def _append(record: dict[str, object]) -> None:
    fd = os.open(os.environ["SHARDCRON_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


def ledger(ctx: ShardingContext) -> None:
    record: dict[str, object] = {
        "run": uuid.uuid4().hex,
        # Worker processes forked by gunicorn share one environment: there the pid tells them apart.
        "instance": os.environ.get("SHARDCRON_INSTANCE") or default_instance_id(),
        "item": ctx.sharding_item,
        "start": time.time(),
        "mono": time.monotonic(),
        "token": ctx.fencing_token,
        "source": str(ctx.source),
        "fire": ctx.scheduled_fire_time,
    }
    _append({**record, "phase": "start"})
    hold = float(os.environ.get("SHARDCRON_HOLD", "0"))
    if hold:
        time.sleep(hold)  # the item's work
    if os.environ.get("SHARDCRON_CHECK_CLAIM"):
        record["current"] = ctx.claim_is_current()
    _append({**record, "phase": "end", "end": time.time(), "mono_end": time.monotonic()})
