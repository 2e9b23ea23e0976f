"""What a turn leaves behind: the chunks it evicts or cuts and the events of its
decisions (one durable store call, proxy/writes.py), each with a short
preview; and the forwarded prompt's fingerprints, to measure how much of it repeats the
session's previous prompt (what a provider's prefix cache can serve)."""

from __future__ import annotations

from typing import Any

from proxy.chunking import Conversation
from proxy.fitting import Fit
from proxy.recall import Block, RecallResult
from proxy.runtime import RouteRuntime
from store.base import Event, EvictedChunk
from store.media import Media


def record(rt: RouteRuntime, conv: Conversation, fit: Fit, recall: RecallResult,
           tenant: str, session: str,
           messages: list[dict[str, Any]]) -> tuple[list[EvictedChunk], list[Event]]:
    """Evicted and cut chunks with their events, restore and recall events: what this
    turn writes, in one durable store call (`Writes.write`, proxy/writes.py)."""
    policy = rt.route.policy
    gone = [(d.part, d.score, "evict", d.reason) for d in fit.new]
    gone += [(p, 0.0, "cut", f"tool output over the window: head and tail kept, "
              f"{p.chunk.tokens - (p.cut_tokens or 0)} tokens cut")
             for p in fit.cut_parts]
    chunks = [EvictedChunk(tenant, session, p.chunk.id, p.chunk.turn, p.role,
                           p.chunk.klass.value, p.chunk.tokens, p.info.text,
                           Media.of(messages[p.chunk.index]))
              for p, _, _, _ in gone]
    events = [Event(tenant, session, conv.logged, p.chunk.id, p.chunk.klass.value,
                    p.chunk.tokens, round(score, 6), action, reason, policy,
                    preview=preview(p.info.text)) for p, score, action, reason in gone]
    events += [Event(tenant, session, conv.logged, d.part.chunk.id, d.part.chunk.klass.value,
                     d.part.chunk.tokens, round(d.score, 6), "restore", d.reason, policy,
                     preview=preview(d.part.info.text)) for d in fit.restored]
    events += recall.events(tenant, session, conv.logged, policy)
    return chunks, events


def preview(text: str, width: int = 100) -> str:
    """The text's first `width` characters, whitespace collapsed. Reads a bounded head
    (a cold history evicts ~900 chunks at once: splitting each whole cost ~10 ms)."""
    head = text[: width * 8]
    flat = " ".join(head.split())
    if len(flat) <= width and len(head) < len(text):  # mostly blank head: read it all
        flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def fingerprints(conv: Conversation, costs: list[int], fit: Fit,
                 blocks: list[Block]) -> list[tuple[str, int]]:
    """(identity, tokens) of each forwarded message, to measure prompt-cache reuse."""
    on = {b.host: b for b in blocks}
    out = []
    for p, cost in zip(conv.parts, costs, strict=True):
        if cost:
            mark = "/stub" if p.chunk.id in fit.evicted else ("/cut" if p.cut_tokens else "")
            b = on.get(p.chunk.id)
            if b is not None:
                mark += "/recall:" + ",".join(f"{r.hit.chunk_id}.{r.hit.piece}"
                                              for r in b.passages)
                cost += b.tokens
            out.append((p.chunk.id + mark, cost))
    return out


def prefix_ratio(prev: list[tuple[str, int]], cur: list[tuple[str, int]]) -> float:
    """Share of this prompt's tokens that repeat the previous prompt message for message:
    what a provider's prefix cache can serve."""
    total = sum(c for _, c in cur)
    if not prev or not total:
        return 0.0
    same = 0
    for (a, _), (b, cost) in zip(prev, cur, strict=False):
        if a != b:
            break
        same += cost
    return same / total
