"""The forwarded bodies kept for `/admin/sent` (proxy/sent.py): per session, in all."""

from __future__ import annotations

import orjson

from proxy.sent import SentBodies


def body(n: int, size: int = 10) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": f"{n}" + "x" * size}]}


def test_each_session_keeps_its_last_turns_and_a_turn_sent_again_its_latest_body() -> None:
    sent = SentBodies(per_session=2)
    for turn in (1, 2, 3):
        sent.put("t", "a", turn, body(turn))
    sent.put("t", "b", 1, body(9))
    assert sent.turns("t", "a") == [2, 3] and sent.get("t", "a", 1) is None
    got = sent.get("t", "a")
    assert got is not None and got.turn == 3 and got.raw == orjson.dumps(body(3))
    sent.put("t", "a", 2, body(7))  # a retry of turn 2: its latest body, now the newest
    assert sent.turns("t", "a") == [3, 2]
    again = sent.get("t", "a", 2)
    assert again is not None and again.raw == orjson.dumps(body(7))
    assert sent.get("other-tenant", "a") is None and sent.turns("t", "b") == [1]
    assert sent.bytes == sum(len(orjson.dumps(body(n))) for n in (3, 7, 9))


def test_past_its_byte_cap_the_oldest_bodies_go_first_whatever_their_session() -> None:
    one = len(orjson.dumps(body(1, 1000)))
    sent = SentBodies(per_session=8, max_bytes=3 * one)
    for n, session in enumerate(("a", "b", "a", "c")):
        sent.put("t", session, n, body(n % 10, 1000))
    assert sent.turns("t", "a") == [2] and sent.turns("t", "b") == [1]
    assert sent.turns("t", "c") == [3] and sent.bytes <= 3 * one
    sent.put("t", "d", 0, body(0, 5000))  # larger than the cap alone: it still stays
    assert sent.turns("t", "d") == [0] and sent.turns("t", "a") == []


def test_keep_sent_zero_keeps_nothing() -> None:
    sent = SentBodies(per_session=0)
    sent.put("t", "a", 1, body(1))
    assert sent.get("t", "a") is None and sent.bytes == 0
