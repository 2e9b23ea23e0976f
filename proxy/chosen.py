"""What a passage recall has chosen shows, brings along and gives back (proxy/recall.py
`select` chooses them): the rest of a small output a question clearly matched
(`rest_of`), a table's header over a later passage's rows (`headed`), and the lines a
passage took from its neighbour (`excerpt.continued`, `excerpt.preceded`) given back
when that neighbour is chosen too (`unrepeated`, `unbegun`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from proxy.excerpt import focus, without_taken
from store.relevance import Hit
from store.terms import text_terms

HEADER = 16  # tokens a passage's header line in a block is counted at


@dataclass(frozen=True, slots=True)
class Recalled:
    hit: Hit
    turn: int
    role: str
    klass: str
    tokens: int
    why: str  # the log's reason: the terms it shares, or its cosine


@dataclass(frozen=True, slots=True)
class ChunkMeta:
    turn: int
    role: str
    klass: str


def rest_of(h: Hit, every: list[Hit], m: ChunkMeta, seen: set[str], count: Any,
            most: float, room: int) -> list[Recalled]:
    """The other passages of `h`'s output (`every`, in order), when the whole output is at
    most `most` tokens and they fit in `room`: a question that clearly matched a small
    table's header or the call that printed it ("the single biggest monthly bill") is
    answered by a row that shares none of its words. On the written-apart sets, 64 of
    114 misses had a passage of the answer's output recalled, the answer ranked 20th or
    lower among the question's matches (docs/design-notes.md). Nothing when another
    passage of it is already chosen (`seen`: brought along once)."""
    if any(x.text in seen for x in every if x.piece != h.piece):
        return []
    sizes, total = [], 0
    for x in every:  # counted until over: a long log's passages are not all counted
        sizes.append(count(x.text))
        total += sizes[-1]
        if total > most:
            return []
    rest = [Recalled(x, m.turn, m.role, m.klass, n + HEADER,
                     f"the rest of a small output a clear match of it came from "
                     f"(passage {h.piece + 1} of {len(every)})")
            for x, n in zip(every, sizes, strict=True) if x.piece != h.piece and x.text.strip()]
    return rest if sum(r.tokens for r in rest) <= room else []


def on_one_line(text: str, qterms: set[str]) -> int:
    """The most query terms one line of `text` holds (`spark.executor.memory 28g` holds
    two of "executor memory"; `spark.memory.fraction` and `spark.executor.cores` one)."""
    return max((len(qterms.intersection(text_terms(line))) for line in text.splitlines()),
               default=0)


def unrepeated(out: list[Recalled], extended: dict[tuple[str, int], tuple[str, str]],
               count: Any) -> list[Recalled]:
    """A passage that took the next one's first lines along (`continued`) gives them back
    when that passage is recalled too: the block shows them right after, once. So does
    one cut to the budget (`focus`) after it took them: the lines it kept of them go."""
    chosen = {(r.hit.chunk_id, r.hit.piece) for r in out}
    for i, r in enumerate(out):
        ext = extended.get((r.hit.chunk_id, r.hit.piece))
        if ext is None or (r.hit.chunk_id, r.hit.piece + 1) not in chosen:
            continue
        plain, full = ext
        text = plain if r.hit.text == full else without_taken(r.hit.text, plain, full)
        if text != r.hit.text:
            out[i] = replace(r, hit=replace(r.hit, text=text), tokens=count(text) + HEADER)
    return out


def unbegun(out: list[Recalled], leads: dict[tuple[str, int], str], count: Any
            ) -> list[Recalled]:
    """A passage that took its record's first lines from the passage before (`preceded`:
    `leads`) gives them back when that passage is recalled too: the block shows them at
    its end, once."""
    chosen = {(r.hit.chunk_id, r.hit.piece) for r in out}
    for i, r in enumerate(out):
        lead = leads.get((r.hit.chunk_id, r.hit.piece))
        if lead and (r.hit.chunk_id, r.hit.piece - 1) in chosen and r.hit.text.startswith(lead):
            text = r.hit.text[len(lead):]
            out[i] = replace(r, hit=replace(r.hit, text=text), tokens=count(text) + HEADER)
    return out


def headless(h: Hit, header: Callable[[str], str] | None) -> bool:
    """A table's first passage focused down past its header line (a window of it, "… |
    queue | searches | wait_p50 | …"): its rows say nothing without it, and it would
    stand where `headed` puts the whole header over a later passage's rows."""
    if h.piece or header is None:
        return False
    head = header(h.chunk_id)
    return bool(head) and head not in h.text


def headed(out: list[Recalled], header: Callable[[str], str], qterms: set[str],
           count: Any, budget: int) -> list[Recalled]:
    """The first chosen passage of a table, when it is not the table's first, shows the
    table's header line first, then "…" for the rows left out: a row of values
    ("| ap-southeast-2 | ranked | 4,596 | 48.7 s | 283.4 s |") says which number is the
    p95 wait only under its header. Where the budget has no room for it, the passage
    keeps fewer of its lines, those that match first (`focus`)."""
    first: dict[str, int] = {}  # chunk id -> its first passage chosen (shown first)
    for r in out:
        first[r.hit.chunk_id] = min(r.hit.piece, first.get(r.hit.chunk_id, r.hit.piece))
    used = sum(r.tokens for r in out)
    for i, r in enumerate(out):
        if r.hit.piece == 0 or first[r.hit.chunk_id] != r.hit.piece:
            continue
        head = header(r.hit.chunk_id)
        if not head or r.hit.text.startswith(head):
            continue
        top = f"{head}\n…\n"
        room = budget - (used - r.tokens) - HEADER
        body = r.hit.text
        if count(top + body) > room:
            body = focus(body, qterms, room - count(top), count, r.hit.rows)
        if body:
            text = top + body
            tokens = count(text) + HEADER
            used += tokens - r.tokens
            out[i] = replace(r, hit=replace(r.hit, text=text), tokens=tokens)
    return out
