"""bench/pause.py compares replays that differ only in the time slept before each request:
that holds only if a pause changes no decision."""

from __future__ import annotations

from bench.pause import replay


async def test_a_pause_changes_no_decision() -> None:
    back_to_back = await replay(0.0)
    paced = await replay(0.005)
    assert len(back_to_back) == len(paced) > 100  # every request of the three sessions
    assert [sent for *_, sent in back_to_back] == [sent for *_, sent in paced]  # same bodies
    assert 0 < sum(evicted for _, evicted, _ in paced) < len(paced)  # turns of both kinds
