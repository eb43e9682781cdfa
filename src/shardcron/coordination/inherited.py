"""Fires nobody ran because their owner had died and nobody knew it yet.

A SIGKILLed or frozen process keeps its items until its session times out and the
leader gives them to others: the fires due in between run nowhere, and no live instance
knows of them. So every claim writes the second of its fire on the item node
(:func:`shardcron.coordination.claims.stamp`), and the instance that gets such an item
learns from it, at its first fire of the item, which fires were missed: those due after
the stamp and before this fire. It records them as skipped (one
:class:`~shardcron.coordination.events.ItemsSkipped` per fire second, reason
:data:`DEAD_OWNER`); with misfire, the item runs once more after this fire.

It looks whenever a layout gave it items another instance had (that one may have died,
been cut off, or handled a fire with the layout before): one read of the gained items'
nodes at the next fire, and nothing in steady state. An owner that knew it missed a fire
recorded that itself (one cut off from the registry, say): those fires are recorded
twice, once by each. A dead owner's claim that the leader repairs is settled there: the
repair records the fire of that claim and those since, and stamps the item anew
(:mod:`shardcron.coordination.healing`). Item nodes a layout makes carry a stamp as well
(:func:`shardcron.coordination.sharding.plan`).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from shardcron.coordination import claims
from shardcron.coordination.job import JobState
from shardcron.model import item_ranges

if TYPE_CHECKING:
    from shardcron.coordination.misfires import Misfires
    from shardcron.schedule.trigger import CronTrigger

log = logging.getLogger(__name__)

DEAD_OWNER = "nobody ran it: its owner had died, was cut off, or did not know the layout yet"
HELD_BY_DEAD = "its owner died or was cut off holding its claim: interrupted, or never started"
# The most fires named per item: a layout left for days without a live instance would
# otherwise cost a walk over every fire of those days.
MAX_NAMED = 60


def fires_between(trigger: CronTrigger, after: float, before: float) -> list[float]:
    """The fire seconds of ``trigger`` strictly between ``after`` and ``before``, the first
    :data:`MAX_NAMED` of them."""
    found: list[float] = []
    moment = trigger.next_fire(datetime.fromtimestamp(after, UTC))
    while moment is not None and moment.timestamp() < before and len(found) < MAX_NAMED:
        found.append(moment.timestamp())
        moment = trigger.next_fire(moment)
    return found


def record(
    rt: JobState,
    trigger: CronTrigger | None,
    misfires: Misfires,
    gained: list[int],
    when: float,
    others: list[int] | None = None,
) -> set[int]:
    """Record the fires of ``gained`` items that nobody ran before ``when``. Return those
    of them and of ``others`` already claimed for ``when`` or later: another owner ran
    this fire of theirs (a fire that waited for a layout comes late, and the layout may
    have moved its items meanwhile, and back)."""
    paths = rt.paths
    items = gained + [i for i in others or () if i not in gained]
    nodes = rt.registry.get_with_stats([paths.item(i) for i in items])
    values = {
        item: None if node is None else node[0] for item, node in zip(items, nodes, strict=True)
    }
    ran = {i for i, value in values.items() if (claims.stamped(value) or 0.0) >= when}
    record_missed(rt, trigger, misfires, {i: values[i] for i in gained}, when)
    return ran


def record_held(
    rt: JobState, trigger: CronTrigger | None, misfires: Misfires, item: int, value: bytes | None
) -> None:
    """Record the fire a dead owner's claim of ``item`` was for (the claim's stamp,
    ``value``): its run was cut short, or never began. The repair of the claim fails the
    item over, or flags it misfired, so it is not re-run for this record."""
    second = claims.stamped(value)
    if second is None or trigger is None:
        return
    # Only a fire's own claim stamps its second; a catch-up's stamps the moment it ran.
    if fires_between(trigger, second - claims.UNRUN_SECONDS, second + claims.UNRUN_SECONDS) == [
        second
    ]:
        misfires.skip([item], HELD_BY_DEAD, second, misfire=False)


def count_changed(rt: JobState) -> float | None:
    """When the config last changed (its node's last write; one read)."""
    stat = rt.registry.stat(rt.paths.config)
    return None if stat is None else stat.mtime_ms / 1000


def stamps_of(rt: JobState, items: list[int]) -> dict[int, bytes | None]:
    """The item nodes' values (one read)."""
    nodes = rt.registry.get_with_stats([rt.paths.item(i) for i in items])
    return {i: None if node is None else node[0] for i, node in zip(items, nodes, strict=True)}


def record_dropped(
    rt: JobState, trigger: CronTrigger | None, misfires: Misfires, stamps: dict[int, bytes | None]
) -> None:
    """Record the fires nobody ran of items dropped by a lowered count (their values read
    before: ``stamps``), up to the change: their stamps go with their nodes."""
    changed = count_changed(rt) if stamps else None
    if changed is not None:
        record_missed(rt, trigger, misfires, stamps, changed + claims.UNRUN_SECONDS)


def record_missed(
    rt: JobState,
    trigger: CronTrigger | None,
    misfires: Misfires,
    stamps: dict[int, bytes | None],
    before: float,
) -> None:
    """Record as skipped the fires after each item's stamp and before ``before``: nobody
    ran them (the new owner's first fire, or the leader's repair of a dead claim, asks)."""
    missed: dict[float, list[int]] = {}
    for item, value in stamps.items():
        after = claims.stamped(value)
        if after is None or after >= before or trigger is None:
            continue
        for second in fires_between(trigger, after, before):
            missed.setdefault(second, []).append(item)
    if not missed:
        return
    seconds = sorted(missed)
    log.warning(
        "job %s: items %s missed %d fire(s) from %s while their owner was lost; "
        "recorded as skipped%s",
        rt.name,
        item_ranges(sorted({i for its in missed.values() for i in its})),
        len(seconds),
        datetime.fromtimestamp(seconds[0], UTC).isoformat(),
        ", to run once more" if rt.config.misfire else "",
    )
    for second in seconds:
        misfires.skip(missed[second], DEAD_OWNER, second)
