"""A question that matches a tool call asks about what the call returned.

An agent says what it is about to do before each call ("Running the first staging plan
against the new module layout", "First lint pass to see how bad it is", "Checking the
manifest") and a colleague's question later uses those words ("on that first staging
plan, how many resources was Terraform going to tear down?"). The call's message is
short, so it is the question's best match; but it holds no answer, and the output it
asked for (a 9,000-character plan, a clippy run, `Cargo.toml`) matches the question only
weakly, in passages that are not the answer's: the plan's count is in its closing
summary line, the manifest's toolchain in its first lines. So when a call's message is
among a question's best matches (`matched_calls`), recalled or still in context beside
its results' stubs, each evicted result of that call comes back too, its first and last
passages (a file's head, a log's closing summary), room allowing. Measured in
docs/design-notes.md.
"""

from __future__ import annotations

from collections.abc import Callable

from proxy.chunking import Conversation
from proxy.recall import HEADER, ChunkMeta, Recalled
from store.relevance import Hit, RelevanceIndex

MAX_CALLS = 2  # calls whose results come back: the best matched
TOP = 5  # ... among the question's best matches, in context or evicted
EXTRA = 512  # tokens their passages may take beyond recall's budget (two passages or so)


def results_of(conv: Conversation) -> dict[str, list[str]]:
    """Chunk id of each message that makes tool calls -> its results' chunk ids."""
    parts = conv.parts
    return {parts[head].chunk.id: [parts[i].chunk.id for i in found]
            for head, found in conv.groups.items() if found}


def matched_calls(hits: list[Hit], results: dict[str, list[str]], floor: float) -> list[str]:
    """The calls among the question's first `TOP` matches (best first) at `floor` or
    more, `MAX_CALLS` at most: a call still in context counts as one recalled does (its
    results evicted, their stubs name only the chunks)."""
    out: list[str] = []
    for h in hits[:TOP]:
        if h.chunk_id in results and h.strength >= floor and h.chunk_id not in out:
            out.append(h.chunk_id)
    return out[:MAX_CALLS]


def with_results(chosen: list[Recalled], calls: list[str], results: dict[str, list[str]],
                 index: RelevanceIndex, evicted: set[str], meta: dict[str, ChunkMeta],
                 count: Callable[[str], int], budget: int) -> list[Recalled]:
    """`chosen` (best first) with the first and last passages of each matched call's
    evicted results (see the module): after the call where it was chosen, else first.
    They take what is left of `budget` and `EXTRA` tokens beyond it (the fit makes that
    room when the user asks now); what recall chose stays."""
    have = {(r.hit.chunk_id, r.hit.piece) for r in chosen}
    room = budget + EXTRA - sum(r.tokens for r in chosen)

    def passages(call: str) -> list[Recalled]:
        nonlocal room
        out = []
        for cid in results.get(call, ()):
            m = meta.get(cid)
            if cid not in evicted or m is None:
                continue
            pieces = index.chunk_hits(cid)
            for h in dict.fromkeys(pieces[:1] + pieces[-1:]):
                tokens = count(h.text) + HEADER
                if (cid, h.piece) in have or not h.text.strip() or tokens > room:
                    continue
                have.add((cid, h.piece))
                room -= tokens
                out.append(Recalled(h, m.turn, m.role, m.klass, tokens,
                                    f"the result of a call the question matched ({call})"))
        return out

    shown = {r.hit.chunk_id for r in chosen}
    out: list[Recalled] = []
    for call in calls:  # calls in context: their results lead
        if call not in shown:
            out += passages(call)
    for r in chosen:
        out.append(r)
        if r.hit.chunk_id in calls:
            out += passages(r.hit.chunk_id)
    return out
