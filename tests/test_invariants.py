"""The nemesis checker flags what it must, and only that (synthetic ledgers, no ZooKeeper)."""

from __future__ import annotations

import math

from tests.cluster import Run
from tests.invariants import find_lost, find_overlaps, find_revoked, find_stuck

T = 1_000.0  # a whole second, like cron fire times
A, B = "127.0.0.1@-@1", "127.0.0.2@-@2"


def run(instance: str, item: int, start: float, end: float, token: int = 1) -> Run:
    return Run(instance, item, T + start, T + end, token, "NORMAL_TRIGGER")


def key(r: Run) -> tuple[str, int, float]:
    return (r.instance, r.item, r.start)


def every_second(item: int, seconds: range, instance: str = A) -> list[Run]:
    return [run(instance, item, s + 0.01, s + 0.6) for s in seconds]


def test_two_instances_at_once_is_an_overlap() -> None:
    old, new = run(A, 0, 0, 3, token=1), run(B, 0, 1, 2, token=2)
    assert len(find_overlaps([old, new], set(), {}, T)) == 1
    assert find_overlaps([old, run(B, 0, 3, 4, token=2)], set(), {}, T) == []


def test_a_fenced_run_of_a_cut_off_worker_may_overlap_a_newer_claim() -> None:
    old, new = run(A, 0, 0, 5, token=1), run(B, 0, 3, 4, token=2)
    cut_off = {A: [(T + 0.5, T + 4.5)]}
    assert find_overlaps([old, new], {key(old)}, cut_off, T) == []
    assert find_revoked([old, new], {key(old)}, cut_off, T) == []
    # The same run without a fault that could cost its session: its claim was taken.
    assert len(find_overlaps([old, new], {key(old)}, {}, T)) == 1
    assert len(find_revoked([old, new], {key(old)}, {}, T)) == 1
    # Nor may the older claim carry the higher token.
    stale = run(A, 0, 0, 5, token=3)
    assert len(find_overlaps([stale, new], {key(stale)}, cut_off, T)) == 1


def test_a_gap_longer_than_the_window_loses_fires() -> None:
    runs = every_second(0, range(5)) + every_second(0, range(12, 20))
    lost, longest = find_lost(runs, set(), set(), 1, T, T + 20, window=5)
    assert len(lost) == 3  # the fires at 5, 6 and 7 s: the next run starts at 12.01 s
    assert math.isclose(longest, 12.0 - 4.0 - 1.0)
    short = every_second(0, range(5)) + every_second(0, range(8, 20))
    assert find_lost(short, set(), set(), 1, T, T + 20, window=5)[0] == []


def test_a_cut_run_must_run_again_within_the_window() -> None:
    cut = run(A, 0, 0.01, 2.0)  # its process ended at 2 s
    rerun = run(B, 0, 4.0, 4.6)
    runs = [cut, rerun, *every_second(0, range(5, 20), B)]
    assert find_lost(runs, {key(cut)}, set(), 1, T, T + 20, window=5)[0] == []
    late = [cut, *every_second(0, range(9, 20), B)]
    lost, _ = find_lost(late, {key(cut)}, set(), 1, T, T + 20, window=5)
    assert any("cut run" in line for line in lost)


def test_items_that_stop_running_are_stuck() -> None:
    runs = every_second(0, range(20)) + every_second(1, range(10))
    assert find_stuck(runs, 2, T + 20, window=3) == [1]
