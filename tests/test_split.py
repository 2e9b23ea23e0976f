"""Passages: ≤ the limit, on natural boundaries, readable, deterministic, nothing dropped."""

from __future__ import annotations

import json
import random

import pytest

from store.split import MAX_TOKENS, count_tokens, passage_id, split_text


def _records(n: int, needle_at: int, needle: str) -> list[dict[str, object]]:
    rnd = random.Random(5)
    rows: list[dict[str, object]] = [
        {"reservation_id": f"R{rnd.randrange(10**5):05d}", "origin": rnd.choice(["JFK", "SFO"]),
         "destination": rnd.choice(["MIA", "SEA"]), "passengers": rnd.randint(1, 4)}
        for _ in range(n)]
    rows[needle_at]["notes"] = needle
    return rows


def test_short_text_is_one_passage() -> None:
    pieces = split_text("hello world")
    assert [(p.ordinal, p.text) for p in pieces] == [(0, "hello world")]
    assert split_text("   \n ") == []


def test_json_array_splits_by_items_and_keeps_the_needle_whole() -> None:
    needle = "the passenger travels with a cat named Whiskers in a soft carrier"
    doc = json.dumps(_records(400, 311, needle), indent=2)
    assert count_tokens(doc) > 10_000
    pieces = split_text(doc)
    assert all(p.tokens <= MAX_TOKENS and p.tokens == count_tokens(p.text) for p in pieces)
    holders = [p for p in pieces if needle in p.text]
    assert len(holders) == 1 and holders[0].tokens <= MAX_TOKENS
    # one labelled item per line, each line valid JSON after its label
    for line in holders[0].text.split("\n"):
        label, _, value = line.partition(": ")
        assert label.startswith("[") and isinstance(json.loads(value), dict)
    # nothing dropped: every record is in exactly one passage
    lines = [ln for p in pieces for ln in p.text.split("\n")]
    assert len(lines) == 400 and lines[311].startswith("[311]: ")


def test_nested_objects_recurse_with_paths() -> None:
    doc = json.dumps({"user": {"id": "mia_li_3668"},
                      "reservations": _records(120, 7, "wheelchair requested")})
    pieces = split_text(doc, 128)
    text = "\n".join(p.text for p in pieces)
    assert 'user: {"id": "mia_li_3668"}' in text
    assert "reservations[7]: " in text and "wheelchair requested" in text
    assert all(p.tokens <= 128 for p in pieces)


def test_paragraphs_then_lines_then_windows() -> None:
    paras = [f"Paragraph {i}. " + "The quarterly report covers revenue. " * 12 for i in range(30)]
    pieces = split_text("\n\n".join(paras), 128)
    assert all(p.tokens <= 128 for p in pieces)
    assert all(p.text.startswith("Paragraph") for p in pieces)  # cut at paragraph starts

    one_line = " ".join(f"tok{i}" for i in range(3000))
    windows = split_text(one_line, 128)
    assert len(windows) > 10 and all(p.tokens <= 128 for p in windows)
    # overlapping windows: every word survives whole in some window
    words = set(one_line.split())
    found = {w for p in windows for w in p.text.split()}
    assert words <= found


def test_deterministic_ids_and_limits() -> None:
    text = "\n".join(f"line {i}: " + "lorem ipsum " * 20 for i in range(200))
    assert split_text(text) == split_text(text)
    assert passage_id("abc", 3) == "abc#3"
    with pytest.raises(ValueError):
        split_text(text, 16)
