"""bench/blackbox.py: the kept sessions are what the section says, and the replays count
what each request forwarded."""

from __future__ import annotations

from collections import Counter

import pytest

from bench import blackbox


@pytest.mark.parametrize(("name", "sessions", "kinds"), [
    ("first", 10, {"tool": 30, "user": 10, "constraint": 7}),
    ("second", 12, {"tool": 42, "user": 12, "constraint": 12}),
    ("third", 12, {"tool": 48, "user": 12, "constraint": 12}),
    ("fourth", 12, {"tool": 48, "user": 12, "constraint": 12}),
    ("fifth", 12, {"tool": 48, "user": 12, "constraint": 12}),
    ("sixth", 12, {"tool": 48, "user": 12, "constraint": 12}),
    ("eighth", 12, {"tool": 48, "user": 12, "constraint": 12}),
    ("ninth", 12, {"tool": 48, "user": 12, "constraint": 12}),
    ("tenth", 12, {"tool": 48, "user": 12, "constraint": 12}),
    ("eleventh", 12, {"tool": 48, "user": 12, "constraint": 12}),
    ("twelfth", 12, {"tool": 96, "user": 24, "constraint": 24}),
    ("thirteenth", 12, {"tool": 96, "user": 24, "constraint": 24}),
    ("fourteenth", 12, {"tool": 96, "user": 24, "constraint": 24}),
    ("fifteenth", 12, {"tool": 192, "user": 48, "constraint": 48}),
    ("sixteenth", 12, {"tool": 96, "user": 24, "constraint": 24})])
def test_the_kept_sessions_plant_each_answer_once_and_ask_for_it_in_other_words(
        name: str, sessions: int, kinds: dict[str, int]) -> None:
    data = blackbox.sessions(blackbox.SETS[name])
    assert len(data) == sessions
    facts = [f for s in data for f in s["facts"]]
    assert Counter(f["kind"] for f in facts) == kinds
    for s in data:
        texts = [str(m.get("content")) for m in s["messages"]]
        for f in s["facts"]:
            before = texts[:f["ask_index"]]  # the third set's replies repeat it after
            assert [i for i, t in enumerate(before) if f["answer"] in t] == [f["msg_index"]]
            asked = s["messages"][f["ask_index"]]
            # (the twelfth set's second question of two lower-cases its first letter)
            assert asked["role"] == "user"
            assert f["question"].lower() in asked["content"].lower()
            assert f["answer"] not in f["question"]
            assert f["ask_index"] + 1 in s["requests"]  # the question is sent


async def test_a_replay_counts_what_was_forwarded() -> None:
    one = blackbox.sessions()[:1]
    asked = Counter(f["kind"] for f in one[0]["facts"])
    for replay in (blackbox.loop, blackbox.cold):
        c, missed = await replay("truncate", one)
        assert {k: c[f"asked_{k}"] for k in asked} == dict(asked)
        kept = sum(c[f"kept_{k}"] for k in asked)
        assert kept + len(missed) == sum(asked.values())
        assert all(m.startswith(one[0]["id"] + ":") for m in missed)
    c, _ = await blackbox.loop("truncate", one)  # every request after the first
    assert c["turns"] == len(one[0]["requests"]) - 1
    assert 0 < c["prefix_permille"] < 1000 * c["turns"]


async def test_a_message_that_asks_two_facts_counts_both() -> None:
    """The eleventh set asks its facts two to a message: the back-to-back replay counts
    each, as the cold one does (it counted only the last of the two)."""
    one = blackbox.sessions(blackbox.SETS["eleventh"])[:1]
    shared = Counter(f["ask_index"] for f in one[0]["facts"])
    assert max(shared.values()) == 2  # the premise
    for replay in (blackbox.loop, blackbox.cold):
        c, missed = await replay("truncate", one)
        assert sum(c[f"asked_{k}"] for k in ("tool", "user", "constraint")) == 6


def test_an_answer_with_a_quote_counts_as_the_wire_carries_it() -> None:
    """`11'-4" AFF` is `11'-4\\" AFF` in the forwarded JSON: it was counted as lost."""
    c: Counter[str] = Counter()
    missed: list[str] = []
    fact = {"name": "duct", "kind": "tool", "answer": "11'-4\" AFF"}
    blackbox._tally(c, missed, "s", fact, {"messages": [
        {"role": "tool", "content": "relocate duct to elevation 11'-4\" AFF (bottom)"}]})
    blackbox._tally(c, missed, "s", fact, {"messages": [{"role": "user", "content": "hi"}]})
    assert (c["asked_tool"], c["kept_tool"], missed) == (2, 1, ["s:duct"])
