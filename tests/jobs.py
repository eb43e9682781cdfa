"""Job bodies for worker processes started by the tests (imported by ``shardcron run``).

``ledger`` appends one JSON line per item run to the file named by ``SHARDCRON_LEDGER``:
instance, item, start, end, fencing token and source. Lines are written with O_APPEND in
one call, so concurrent writers never interleave.
"""

from __future__ import annotations

import json
import os
import time

from shardcron.model import ShardingContext


def ledger(ctx: ShardingContext) -> None:
    start = time.time()
    hold = float(os.environ.get("SHARDCRON_HOLD", "0"))
    if hold:
        time.sleep(hold)  # the item's work
    line = json.dumps(
        {
            "instance": os.environ["SHARDCRON_INSTANCE"],
            "item": ctx.sharding_item,
            "start": start,
            "end": time.time(),
            "token": ctx.fencing_token,
            "source": str(ctx.source),
            "current": ctx.claim_is_current() if os.environ.get("SHARDCRON_CHECK_CLAIM") else None,
        }
    )
    fd = os.open(os.environ["SHARDCRON_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)
