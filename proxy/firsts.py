"""A question that asks for the first of something prefers the passage where it first
happens.

"What was the request ID of the very first 500 after the new version started up?", "What
time did the first pit-gain alarm go off?": the answer is the first line of a long output
(a log, an alarm journal, a command history) that matches the question, and every later
line that matches scores the same in BM25, often higher (a passage may hold several).
Logs, journals and histories are written in time order, so the first matching line is
the first event. So for such a question (`asks_first`), in each of the few long evicted
outputs that match it best, the passage holding the first line that matches as well as
any line does (its terms weighted by how few of the output's lines hold them) is
recall's "stated" passage (`proxy/recall.py: select` boosts it as it does a stated value,
`proxy/answers.py`). Where the question asks what came after an event ("after the X-band
transmitter switched itself off": `proxy/step.py: onward_terms`), the search starts after
the line that names that event best, when one names half its words or more.
"""

from __future__ import annotations

import math
import re
from collections import Counter

from proxy.step import onward_terms
from store.relevance import Hit, RelevanceIndex
from store.terms import terms, text_terms

# "the first X", "the very first X", "which was the first to open", "when does it first
# drop below": not "first name", "first of all", "at first" or an opening "First, …"
FIRST = re.compile(r"\b(?:the|its|their)\s+(?:very\s+)?first\b(?!\s+(?:name|names|of\s+all)\b)"
                   r"|\bfirst\s+(?:to|drop(?:s|ped)?|f[ae]ll|fails?|failed|went|goes|"
                   r"appear(?:s|ed)?|show(?:s|ed)?|hit|reach(?:es|ed)?|cross(?:es|ed)?|"
                   r"exceed(?:s|ed)?|happen(?:s|ed)?)\b", re.I)
TOP = 16  # the best matches whose outputs are looked at
OUTPUTS = 3  # ... at most this many of them, best first
LEVEL = 0.75  # a line matches "as well as any": its weight at least this share of the best
ORDINAL = frozenset(terms("first very"))


def asks_first(words: str) -> bool:
    return FIRST.search(words) is not None


def first_passages(index: RelevanceIndex, hits: list[Hit], question: str,
                   evicted: set[str] | frozenset[str]) -> frozenset[tuple[str, int]]:
    """(chunk id, piece) of the passage holding the first best-matching line in each of
    the `OUTPUTS` evicted outputs of two passages or more among the first `TOP` hits."""
    after = onward_terms(question)
    key = set(terms(question)) - after - ORDINAL
    out: set[tuple[str, int]] = set()
    looked: set[str] = set()
    for h in hits[:TOP]:
        if len(looked) >= OUTPUTS or h.chunk_id in looked or h.chunk_id not in evicted:
            continue
        looked.add(h.chunk_id)
        pieces = index.chunk_hits(h.chunk_id)
        if len(pieces) > 1:
            first = _first(pieces, key, after)
            if first is not None:
                out.add((h.chunk_id, first))
    return frozenset(out)


def _first(pieces: list[Hit], key: set[str], after: frozenset[str]) -> int | None:
    """The piece of the first line that matches `key` as well as any line does, after the
    line that names the `after` event best (if one names half its terms or more)."""
    lines = [(p.piece, set(text_terms(ln))) for p in pieces for ln in p.text.splitlines()]
    df = Counter(t for _, held in lines for t in held & key)
    if not df:
        return None
    weight = {t: math.log(1.0 + len(lines) / n) for t, n in df.items()}
    scores = [sum(weight[t] for t in held & key) for _, held in lines]
    start = 0
    if after:
        named = [len(held & after) for _, held in lines]
        most = max(named)
        if most * 2 >= len(after):
            start = named.index(most) + 1
    best = max(scores[start:], default=0.0)
    if best <= 0.0:
        return None
    return next(lines[j][0] for j in range(start, len(lines)) if scores[j] >= LEVEL * best)
