"""The held-out workload (bench/heldout.py) keeps its promises: valid requests, each answer
in exactly one message and never in its question, deterministic for a seed."""

from __future__ import annotations

import pytest

from bench import heldout


@pytest.mark.parametrize("seed", [0, 7])
def test_held_out_sessions_are_valid_and_deterministic(seed: int) -> None:
    out = heldout.sessions(seed, 8000)
    assert sorted({s.kind for s in out}) == sorted(d.kind for d in heldout.DOMAINS)
    for s in out:
        heldout.validate(s, 8000)  # asserts pairing, placement and length
        assert sorted(f.kind for f in s.facts) == ["constraint", "tool", "tool", "tool",
                                                    "user", "user"]
    assert [s.messages for s in heldout.sessions(seed, 8000)] == [s.messages for s in out]


def test_a_window_too_small_for_the_sessions_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 2,000 tokens"):
        heldout.sessions(0, 1000)
