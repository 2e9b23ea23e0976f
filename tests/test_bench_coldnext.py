"""bench/coldnext.py: the turns it sends after a history are valid requests of the shape
its table names (tool turns, then a reply to the agent's question)."""

from __future__ import annotations

from bench import agentgen, coldnext
from bench.replay import tool_pairs_valid
from proxy.step import asking
from proxy.validate import validate_body


def test_turns_grow_the_history_with_tool_turns_then_a_reply() -> None:
    s = agentgen.long_history(3, 60)
    turns = coldnext._turns(s, 0)
    assert [label for label, _ in turns] == (
        ["cold", "first tool turn"] + ["later tool turns"] * (coldnext.TOOL_TURNS - 1)
        + ["reply"])
    assert turns[0][1] == s.messages
    for (_, before), (_, after) in zip(turns, turns[1:], strict=False):
        assert after[:len(before)] == before  # each turn resends the last one whole
        validate_body({"model": "loop-1", "messages": after, "tools": s.tools})
        assert tool_pairs_valid(after)
    assert all(m[-1]["role"] == "tool" for _, m in turns[1:-1])
    reply = turns[-1][1]
    # a reply step (proxy/step.py): the agent asked, the user's answer asks nothing
    assert reply[-2]["role"] == "assistant" and asking(reply[-2]["content"])
    assert reply[-1]["role"] == "user" and not asking(reply[-1]["content"])
