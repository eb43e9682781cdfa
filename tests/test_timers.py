"""The process's timer when the wall clock steps (an NTP step, a VM resumed).

Delays (heal ticks, retries, grace periods) keep their length; entries due at a
wall-clock time (a fire's second) stay at that time. The timer here is the real one, on
its own thread; only the wall clock it reads is stepped, as ``date -s`` would.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from shardcron.scheduler import timers
from shardcron.scheduler.timers import Timers
from tests.helpers import wait_until


class SteppedClock:
    """``time`` as the timer reads it, with a wall clock the test can step."""

    def __init__(self) -> None:
        self.step = 0.0

    def time(self) -> float:
        return time.time() + self.step

    def monotonic(self) -> float:
        return time.monotonic()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> SteppedClock:
    stepped = SteppedClock()
    monkeypatch.setattr(timers, "time", stepped)
    return stepped


@pytest.fixture
def timer(clock: SteppedClock) -> Iterator[Timers]:
    made = Timers(lambda fn: fn())  # the coordinator: run at once, on the timer thread
    made.start()
    yield made
    made.close()


def flag() -> tuple[threading.Event, Callable[[], None]]:
    event = threading.Event()
    return event, event.set


def stamp() -> tuple[list[float], Callable[[], None]]:
    """A callback that notes when (monotonic) it ran."""
    ran: list[float] = []
    return ran, lambda: ran.append(time.monotonic())


def test_after_a_step_back_delays_keep_their_length_and_fires_wait_for_their_time(
    clock: SteppedClock, timer: Timers
) -> None:
    healed, heal = stamp()
    fired, fire = flag()
    with timer.lock:  # both pushed, then the clock steps, before the timer looks
        pushed = time.monotonic()
        timer.push_in(0.5, heal)
        timer.push(clock.time() + 0.5, fire)
        clock.step -= 3600.0
    wait_until(lambda: healed, 5, "the delay of 0.5 s to end")
    assert 0.45 <= healed[0] - pushed < 3.0
    # Due at the same moment, the fire would have been released with it: its second is an
    # hour away again, so it runs once, when the clock gets there.
    assert not fired.is_set()
    clock.step += 3600.0
    assert fired.wait(5)


def test_after_a_step_forward_delays_keep_their_length_and_fires_due_are_released(
    clock: SteppedClock, timer: Timers
) -> None:
    healed, heal = stamp()
    fired, fire = flag()
    with timer.lock:
        pushed = time.monotonic()
        timer.push_in(1.5, heal)
        timer.push(clock.time() + 600.0, fire)
        clock.step += 3600.0
    assert fired.wait(5)  # past due: released at once (a fire then records it missed)
    wait_until(lambda: healed, 5, "the delay of 1.5 s to end")
    assert 1.45 <= healed[0] - pushed < 4.0  # not cut short by the step
