"""Split an evicted chunk into passages of at most `max_tokens` on natural boundaries.

Why: one vector for a 10k-token tool output averages the needle away; a passage of a few
hundred tokens keeps it findable. Boundaries, best first: the JSON document's items (a
tool result that is a JSON array/object is re-rendered one top-level item per line,
labelled with its path, big items split into their own items), paragraphs, lines, and
last token windows (with a small overlap, so a fact on a window edge survives whole in
one of them). Small units are packed greedily up to the limit, so passages stay few.

Deterministic: the same text always gives the same passages, so passage ids are
`<chunk id>#<ordinal>` and a resent chunk rewrites nothing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import tiktoken  # TIKTOKEN_CACHE_DIR is set first, by store/__init__.py

MAX_TOKENS = 256
WINDOW_OVERLAP = 32
_PARAGRAPHS = re.compile(r"\n[ \t]*\n+")


@dataclass(frozen=True, slots=True)
class Piece:
    ordinal: int
    text: str
    tokens: int


def passage_id(chunk_id: str, ordinal: int) -> str:
    return f"{chunk_id}#{ordinal}"


@lru_cache(maxsize=1)
def _encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding("o200k_base")


def count_tokens(text: str) -> int:
    return len(_encoding().encode_ordinary(text))


def split_text(text: str, max_tokens: int = MAX_TOKENS) -> list[Piece]:
    """Passages of `text`, in order, each at most `max_tokens` o200k tokens."""
    if max_tokens < 2 * WINDOW_OVERLAP:
        raise ValueError(f"max_tokens must be at least {2 * WINDOW_OVERLAP}")
    if not text.strip():
        return []
    n = count_tokens(text)
    if n <= max_tokens:
        return [Piece(0, text, n)]
    units = _json_units(text, max_tokens)
    if units is None:
        units = _text_units(text, max_tokens)
    out: list[Piece] = []
    for chunk in _pack(units, max_tokens):
        tokens = count_tokens(chunk)
        pieces = [chunk] if tokens <= max_tokens else _windows(chunk, max_tokens)
        for p in pieces:
            out.append(Piece(len(out), p, tokens if len(pieces) == 1 else count_tokens(p)))
    return out


# A unit is (separator before it, text, tokens); the separator is dropped at a passage start.
Unit = tuple[str, str, int]


def _pack(units: list[Unit], max_tokens: int) -> list[str]:
    out: list[str] = []
    cur: list[str] = []
    size = 0
    for sep, text, tokens in units:
        extra = tokens + (1 if cur else 0)
        if cur and size + extra > max_tokens:
            out.append("".join(cur))
            cur, size, extra = [], 0, tokens
        cur.append(sep + text if cur else text)
        size += extra
    if cur:
        out.append("".join(cur))
    return out


def _text_units(text: str, max_tokens: int) -> list[Unit]:
    units: list[Unit] = []
    for para in _PARAGRAPHS.split(text.strip("\n")):
        sep = "\n\n"
        n = count_tokens(para)
        if n <= max_tokens:
            units.append((sep, para, n))
            continue
        for line in para.split("\n"):
            if not line.strip():
                continue
            n = count_tokens(line)
            if n <= max_tokens:
                units.append((sep, line, n))
            else:
                units.extend((sep, w, count_tokens(w)) for w in _windows(line, max_tokens))
            sep = "\n"
    return units


def _json_units(text: str, max_tokens: int) -> list[Unit] | None:
    s = text.strip()
    if not s or s[0] not in "[{":
        return None
    try:
        doc = json.loads(s)
    except ValueError:
        return None
    if not isinstance(doc, (list, dict)):
        return None
    units: list[Unit] = []
    _json_items(doc, "", max_tokens, units)
    return units


def _json_items(doc: list[Any] | dict[str, Any], path: str, max_tokens: int,
                units: list[Unit]) -> None:
    items: list[tuple[str, Any]] = (
        [(f"{path}.{k}" if path else k, v) for k, v in doc.items()] if isinstance(doc, dict)
        else [(f"{path}[{i}]", v) for i, v in enumerate(doc)])
    for label, value in items:
        line = f"{label}: {json.dumps(value, ensure_ascii=False, separators=(', ', ': '))}"
        n = count_tokens(line)
        if n <= max_tokens:
            units.append(("\n", line, n))
        elif isinstance(value, (list, dict)) and value:
            _json_items(value, label, max_tokens, units)
        else:
            units.extend(("\n", w, count_tokens(w)) for w in _windows(line, max_tokens))


def _windows(text: str, max_tokens: int) -> list[str]:
    """Token windows with overlap; each re-counted (decoding can shift a boundary)."""
    enc = _encoding()
    ids = enc.encode_ordinary(text)
    size = max_tokens - 8  # room for re-tokenisation drift at the edges
    step = size - WINDOW_OVERLAP
    out: list[str] = []
    start = 0
    while True:
        window = enc.decode(ids[start:start + size])
        while count_tokens(window) > max_tokens:  # pathological drift: shrink and retry
            window = window[: int(len(window) * 0.9)]
        out.append(window)
        if start + size >= len(ids):
            return out
        start += step
