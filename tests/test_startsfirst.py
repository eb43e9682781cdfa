"""The ends of a herd's items wait until its last item has started (startsfirst.py)."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator

import pytest

from shardcron.scheduler.startsfirst import HOLD_SECONDS, MAX_HOLD_SECONDS, StartsFirst, hold_for


class Coordinator:
    def __init__(self) -> None:
        self.tasks: list[Callable[[], None]] = []
        self.timers: list[tuple[float, Callable[[], None]]] = []

    def run(self) -> None:
        while self.tasks:
            self.tasks.pop(0)()


@pytest.fixture(autouse=True)
def collector_restored() -> Iterator[None]:
    """Each test starts with the collector on and leaves it as it found it."""
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def starts_first() -> tuple[StartsFirst, Coordinator, list[str]]:
    coordinator = Coordinator()
    starts = StartsFirst(
        coordinator.tasks.append, lambda delay, fn: coordinator.timers.append((delay, fn))
    )
    return starts, coordinator, []


def test_ends_wait_until_the_last_item_handed_over_has_started() -> None:
    starts, coordinator, ended = starts_first()
    starts.handed(3)
    starts.started()
    starts.ended(lambda: ended.append("a"))
    starts.started()
    starts.ended(lambda: ended.append("b"))
    coordinator.run()
    assert ended == []  # one item still waits for a thread
    starts.started()
    coordinator.run()
    assert ended == ["a", "b"]  # in the order they ended, in one coordinator task
    starts.ended(lambda: ended.append("c"))  # nothing waits: at once
    coordinator.run()
    assert ended == ["a", "b", "c"]


def test_ends_are_held_no_longer_than_the_hold() -> None:
    """Items stuck behind long-running ones in a busy pool: the ends of those that ran
    still reach their fires."""
    starts, coordinator, ended = starts_first()
    starts.handed(2)
    starts.started()
    starts.ended(lambda: ended.append("a"))
    starts.ended(lambda: ended.append("b"))
    [_, (delay, release)] = coordinator.timers  # the collector's bound, the held ends'
    assert delay == HOLD_SECONDS
    release()
    assert ended == ["a", "b"]
    starts.started()  # the last item starts later: nothing left to release
    coordinator.run()
    assert ended == ["a", "b"]


def test_the_hold_is_half_the_time_to_the_next_claim_within_bounds() -> None:
    """An every-second job claims again half a second after its second at the earliest:
    its held end must still complete before that. A herd due every 20 s, claimed 4 s
    ahead, may keep its ends until its last item has started, up to the most."""
    assert hold_for(100.0, 100.5) == HOLD_SECONDS == 0.25
    assert hold_for(100.0, 100.1) == HOLD_SECONDS  # never shorter than the least
    assert hold_for(100.0, 100.8) == pytest.approx(0.4)
    assert hold_for(100.0, 116.0) == MAX_HOLD_SECONDS == 1.0
    assert hold_for(100.0, None) == MAX_HOLD_SECONDS  # no next fire


def test_ends_and_the_collector_wait_for_the_hold_of_the_hand_over() -> None:
    starts, coordinator, ended = starts_first()
    starts.handed(2, hold=1.0)
    starts.started()
    starts.ended(lambda: ended.append("a"))
    [(collector, _), (ends, release)] = coordinator.timers
    assert collector == ends == 1.0
    release()
    assert ended == ["a"]


def test_a_hand_over_that_claims_sooner_shortens_the_hold() -> None:
    """Items of every-second jobs handed over while a herd of slower jobs still starts:
    the ends are held no longer than the every-second jobs allow."""
    starts, coordinator, _ = starts_first()
    starts.handed(2, hold=1.0)
    starts.handed(1, hold=HOLD_SECONDS)
    starts.started()
    starts.ended(lambda: None)
    assert coordinator.timers[-1][0] == HOLD_SECONDS
    for _ in range(2):
        starts.started()  # all started: the next hand-over has its own hold
    starts.handed(1, hold=1.0)
    starts.ended(lambda: None)
    assert coordinator.timers[-1][0] == 1.0


def test_an_end_that_fails_does_not_lose_the_others() -> None:
    starts, coordinator, ended = starts_first()
    starts.handed(2)
    starts.started()
    starts.ended(lambda: ended.append(str(1 / 0)))
    starts.ended(lambda: ended.append("b"))
    starts.started()
    coordinator.run()
    assert ended == ["b"]


def test_the_collector_waits_until_the_last_item_has_started() -> None:
    """A herd's young collections would find its live fires and nothing to free, while
    its items wait for the threads they stop."""
    starts, coordinator, _ = starts_first()
    starts.handed(2)
    assert not gc.isenabled()
    starts.handed(1)  # more staged items of the same herd: the same pause
    assert len(coordinator.timers) == 1
    starts.started()
    starts.started()
    assert not gc.isenabled()
    starts.started()
    assert gc.isenabled()
    [(_, bound)] = coordinator.timers
    starts.handed(1)  # the next herd pauses it again: the first bound is not its own
    bound()
    assert not gc.isenabled()


def test_the_collector_waits_no_longer_than_the_hold() -> None:
    """Items stuck behind long-running ones in a busy pool."""
    starts, coordinator, _ = starts_first()
    starts.handed(2)
    starts.started()
    [(delay, bound)] = coordinator.timers
    assert delay == HOLD_SECONDS
    bound()
    assert gc.isenabled()
    starts.started()
    assert gc.isenabled()


def test_a_collector_the_program_disabled_stays_disabled() -> None:
    starts, coordinator, _ = starts_first()
    gc.disable()
    starts.handed(1)
    starts.started()
    assert not gc.isenabled()
    assert coordinator.timers == []


def test_a_program_that_leaves_the_collector_alone_gets_no_pause() -> None:
    """``Scheduler(gc_threshold=None)``."""
    coordinator = Coordinator()
    starts = StartsFirst(coordinator.tasks.append, lambda d, fn: None, pause_collector=False)
    starts.handed(1)
    assert gc.isenabled()
