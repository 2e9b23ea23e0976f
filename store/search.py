"""Recall's pure parts: identifier terms, candidate ranking, filling the recall budget.

Why identifier matching beside vectors: agent sessions are full of ids (reservation
codes, user ids, flight numbers, paths). A sentence embedding of a JSON blob barely
moves with the one id inside it, so "cancel reservation ZFA04Y" does not single out the
passage that holds ZFA04Y among fifty similar reservations; an exact substring match
does. An id match outranks any vector match and is recalled even below the similarity
floor, because the query named it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from store.base import Passage, RecallQuery

# Candidate ids: 4-64 characters of a safe charset (no quotes, no backslash, no spaces)
# with a digit and a letter (ZFA04Y, HAT136, mia_li_3668, a1b2c3d4, v2.3.1), or 5-12
# capitals (RYHQES). A term found in many passages is a word, not an id (see id_matches).
_TERM = re.compile(r"(?<![A-Za-z0-9_\-.@/])[A-Za-z0-9][A-Za-z0-9_\-.@/]{2,62}[A-Za-z0-9]")
_DIGIT = re.compile(r"\d")
_ALPHA = re.compile(r"[A-Za-z]")
_CAPS = re.compile(r"[A-Z]{5,12}")
MAX_TERMS = 8
COLUMNS = ["chunk_id", "passage_id", "text", "turn", "role", "class", "tokens"]


def id_terms(text: str) -> list[str]:
    """Identifier-looking tokens of the query, in order, at most MAX_TERMS."""
    out: list[str] = []
    for m in _TERM.finditer(text):
        t = m.group(0)
        if ((_DIGIT.search(t) and _ALPHA.search(t)) or _CAPS.fullmatch(t)) and t not in out:
            out.append(t)
            if len(out) == MAX_TERMS:
                break
    return out


def contains_any(column: str, terms: Iterable[str]) -> str:
    """`(contains(col, 't1') OR …)`; terms come from `id_terms`, so no quote can occur,
    and quotes are doubled anyway."""
    parts = [f"contains({column}, '{t.replace(chr(39), chr(39) * 2)}')" for t in terms]
    return "(" + " OR ".join(parts) + ")"


@dataclass(slots=True)
class Candidate:
    passage: Passage
    id_hits: int = 0  # how many of the query's id terms it contains


def candidate(row: dict[str, Any], similarity: float, terms: Iterable[str] = ()) -> Candidate:
    text = str(row["text"])
    p = Passage(chunk_id=row["chunk_id"], passage_id=row["passage_id"], text=text,
                similarity=similarity, turn=int(row["turn"]), role=row["role"],
                klass=row["class"], tokens=int(row["tokens"]))
    return Candidate(p, sum(1 for t in terms if t in text))


def fill(cands: Iterable[Candidate], q: RecallQuery) -> list[Passage]:
    """Best first (id hits, then similarity); skip what is in context, blank or a repeat;
    take what fits the budget, at most `top_k`."""
    best: dict[str, Candidate] = {}
    for c in cands:  # the vector and the id search may both find a passage
        prev = best.get(c.passage.passage_id)
        if prev is None or (c.id_hits, c.passage.similarity) > (prev.id_hits,
                                                               prev.passage.similarity):
            best[c.passage.passage_id] = c
    ranked = sorted(best.values(), key=lambda c: (-c.id_hits, -c.passage.similarity,
                                                  c.passage.passage_id))
    out: list[Passage] = []
    seen: set[str] = set()
    used = 0
    for c in ranked:
        p = c.passage
        if p.chunk_id in q.exclude_chunk_ids or not p.text.strip() or p.text in seen:
            continue
        if c.id_hits == 0 and p.similarity < q.min_similarity:
            continue
        if used + p.tokens > q.budget_tokens:
            continue
        out.append(p)
        seen.add(p.text)
        used += p.tokens
        if len(out) >= q.top_k:
            break
    return out


async def nearest(tbl: Any, vec: Any, where: str, q: RecallQuery) -> list[Candidate]:
    """Cosine top-k above the floor; over-fetch while in-context chunks crowd it out."""
    limit = 4 * q.top_k + 16
    while True:
        rows = await (tbl.query().nearest_to(vec).distance_type("cosine")
                      .distance_range(upper_bound=1.0 - q.min_similarity).where(where)
                      .select([*COLUMNS, "_distance"]).limit(limit).to_list())
        kept = [r for r in rows if r["chunk_id"] not in q.exclude_chunk_ids]
        if len(kept) >= 2 * q.top_k or len(rows) < limit or limit >= 4096:
            return [candidate(r, 1.0 - float(r["_distance"])) for r in kept]
        limit *= 4


async def id_matches(tbl: Any, vec: Any, where: str, terms: list[str],
                     q: RecallQuery) -> list[Candidate]:
    """Passages containing one of the query's identifiers, with their true cosine. A term in
    more than 2·top_k passages is too common to single anything out and is dropped."""
    rows = await (tbl.query().where(f"{where} AND {contains_any('text', terms)}")
                  .select([*COLUMNS, "vector"]).limit(4 * q.top_k + 16).to_list())
    rare = [t for t in terms if sum(t in r["text"] for r in rows) <= 2 * q.top_k]
    return [candidate(r, float(np.dot(np.asarray(r["vector"], dtype=np.float32), vec)), rare)
            for r in rows if r["chunk_id"] not in q.exclude_chunk_ids
            and any(t in r["text"] for t in rare)]
