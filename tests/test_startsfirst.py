"""The ends of a herd's items wait until its last item has started (startsfirst.py)."""

from __future__ import annotations

from collections.abc import Callable

from shardcron.startsfirst import HOLD_SECONDS, StartsFirst


class Coordinator:
    def __init__(self) -> None:
        self.tasks: list[Callable[[], None]] = []
        self.timers: list[tuple[float, Callable[[], None]]] = []

    def run(self) -> None:
        while self.tasks:
            self.tasks.pop(0)()


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
    [(delay, release)] = coordinator.timers  # one timer for the held ends
    assert delay == HOLD_SECONDS
    release()
    assert ended == ["a", "b"]
    starts.started()  # the last item starts later: nothing left to release
    coordinator.run()
    assert ended == ["a", "b"]


def test_an_end_that_fails_does_not_lose_the_others() -> None:
    starts, coordinator, ended = starts_first()
    starts.handed(2)
    starts.started()
    starts.ended(lambda: ended.append(str(1 / 0)))
    starts.ended(lambda: ended.append("b"))
    starts.started()
    coordinator.run()
    assert ended == ["b"]
