"""How often the embedder's child may be stopped (proxy/hush.py): a burst of cold
histories is held whole, a longer stream leaves the child a fifth of the time, and a
hold still ends after `max_hold_s`. A hand-written child and clock, so it runs anywhere."""

from __future__ import annotations

import asyncio

from proxy.hush import RUNS, Hush


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Child:
    """Records what it was told; `pause` grants unless told otherwise."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.history: list[tuple[str, float]] = []
        self.grants = True

    def pause(self) -> bool:
        self.history.append(("pause", self.clock.now))
        return self.grants

    def resume(self) -> None:
        self.history.append(("resume", self.clock.now))


def cold_stream(hush: Hush, clock: Clock, n: int, hold: float, gap: float) -> list[bool]:
    """`n` cold histories, each `hold` seconds prepared, `gap` seconds apart: whether
    each was held."""
    out = []
    for _ in range(n):
        before = hush.holds
        with hush.held():
            clock.now += hold
        out.append(hush.holds > before)
        clock.now += gap
    return out


async def test_a_burst_of_cold_histories_is_held_whole() -> None:
    clock = Clock()
    child = Child(clock)
    hush = Hush(child, burst_s=1.0, clock=clock)
    clock.now += 60  # the child has run a while
    held = cold_stream(hush, clock, 8, hold=0.1, gap=0.01)
    assert held == [True] * 8 and hush.refused == 0
    assert [what for what, _ in child.history] == ["pause", "resume"] * 8
    assert round(hush.seconds, 6) == 0.8


async def test_a_long_stream_leaves_the_child_a_fifth_of_the_time() -> None:
    clock = Clock()
    child = Child(clock)
    hush = Hush(child, burst_s=1.0, clock=clock)
    start = clock.now
    held = cold_stream(hush, clock, 400, hold=0.1, gap=0.01)
    elapsed = clock.now - start
    assert all(held[:9])  # the banked credit first
    assert not all(held) and hush.refused == held.count(False)
    ran = elapsed - hush.seconds
    assert ran / elapsed >= RUNS / (1 + RUNS) - 0.01  # a fifth, what the credit allows
    assert hush.seconds / elapsed > 0.7  # ... and the rest held: not every other one


async def test_a_credit_of_nothing_holds_nothing() -> None:
    clock = Clock()
    hush = Hush(Child(clock), burst_s=0.0, clock=clock)
    clock.now += 60
    assert cold_stream(hush, clock, 6, hold=0.1, gap=0.01) == [False] * 6
    assert hush.refused == 6


async def test_a_hold_ends_after_max_hold_s_while_the_request_goes_on() -> None:
    clock = Clock()
    child = Child(clock)
    hush = Hush(child, max_hold_s=0.05, burst_s=1.0, clock=clock)
    with hush.held():
        await asyncio.sleep(0.2)  # the timer resumes the child
        assert [what for what, _ in child.history] == ["pause", "resume"]
    assert hush.holds == 1 and [what for what, _ in child.history] == ["pause", "resume"]


async def test_a_child_that_cannot_pause_costs_no_credit() -> None:
    clock = Clock()
    child = Child(clock)
    child.grants = False
    hush = Hush(child, burst_s=0.3, clock=clock)
    assert cold_stream(hush, clock, 5, hold=0.1, gap=0.0) == [False] * 5
    assert hush.refused == 0 and hush.seconds == 0.0
    child.grants = True
    assert cold_stream(hush, clock, 3, hold=0.1, gap=0.0) == [True, True, True]
