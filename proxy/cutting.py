"""The last resort of a fit: cut the tail's oversized tool results head-and-tail.

When even everything evictable gone leaves a request over its budget (a system prompt
and one huge tool result), the request is not refused while a cut makes it fit: the
middle of the tail's largest tool results is replaced by one marked line (`CUT_MARKER`)
naming the chunk, whose full text is offloaded and recallable like any eviction. Two
thirds of what is kept is the head (where outputs say what they are), a third the tail
(where they say how they ended).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from policies.base import ChunkClass
from proxy.chunking import RESULTS, Conversation, Part
from proxy.stubs import what
from proxy.tokens import TokenCounter

CUT_MARKER = ("[ctxwarden: {cut} tokens cut from the middle of this {what} to fit the "
              "context window; the full text is stored as chunk {id} and its relevant "
              "passages are recalled automatically]")
MIN_KEEP = 64  # tokens of head + tail worth keeping; below that a cut does not help


class Fitted(Protocol):
    """What `cut` reads and updates of a fit (`proxy.fitting.Fit`)."""

    evicted: set[str]
    tokens: int
    cuts: dict[str, str]
    cut_parts: list[Part]


def cut(counter: TokenCounter, cost: Callable[[Part], int], conv: Conversation,
        fit: Fitted, budget: int) -> None:
    """Cut the tail's tool results, largest first, head-and-tail until the fit is within
    `budget` (or nothing more can be cut); `cost` is what a part costs in the fit now.
    Deterministic: the same request, same cut."""
    tails = sorted((p for p in conv.parts if p.role in RESULTS
                    and p.chunk.klass is ChunkClass.PERMANENT
                    and p.chunk.id not in fit.evicted and isinstance(p.info.text, str)),
                   key=lambda p: (-p.info.content_tokens, p.chunk.index))
    for p in tails:
        over = fit.tokens - budget
        if over <= 0:
            return
        ids = counter.encoding.encode_ordinary(p.info.text)
        marker = CUT_MARKER.format(cut=len(ids), what=what(p), id=p.chunk.id)
        keep = max(len(ids) - over - counter.text(marker) - 4, MIN_KEEP)
        if keep >= len(ids):
            continue
        head = counter.encoding.decode(ids[: keep * 2 // 3])
        tail = counter.encoding.decode(ids[len(ids) - (keep - keep * 2 // 3):])
        marker = CUT_MARKER.format(cut=len(ids) - keep, what=what(p), id=p.chunk.id)
        text = f"{head}\n{marker}\n{tail}"
        framing = p.info.tokens - p.info.content_tokens
        before = cost(p)
        p.cut_tokens = framing + counter.text(text)
        fit.tokens += p.cut_tokens - before
        fit.cuts[p.chunk.id] = text
        fit.cut_parts.append(p)
