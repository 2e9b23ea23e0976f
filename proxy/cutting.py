"""The last resort of a fit: cut the tail's oversized tool results head-and-tail.

When even everything evictable gone leaves a request over its budget (a system prompt
and one huge tool result), the request is not refused while a cut makes it fit: the
middle of the tail's largest tool results is replaced by one marked line (`CUT_MARKER`)
naming the chunk, whose full text is offloaded and recallable like any eviction. The
results of parallel calls share the room evenly (`_level`). Two thirds of what is kept
is the head (where outputs say what they are), a third the tail (where they say how
they ended).
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
    """Cut the tail's tool results head-and-tail until the fit is within `budget` (or
    nothing more can be cut); `cost` is what a part costs in the fit now. The room the
    tail's results have is shared out evenly (`_level`): the results of parallel calls
    each keep about the same, a small one whole, rather than the first ones in the list
    keeping MIN_KEEP tokens and the last one the rest. Deterministic: the same request,
    same cut."""
    tails = sorted((p for p in conv.parts if p.role in RESULTS
                    and p.chunk.klass is ChunkClass.PERMANENT
                    and p.chunk.id not in fit.evicted and isinstance(p.info.text, str)),
                   key=lambda p: (-p.info.content_tokens, p.chunk.index))
    level = _level([cost(p) for p in tails], fit.tokens - budget)
    for floor in (level, None):  # evenly first; then whatever is still over, largest first
        for p in tails:
            over = fit.tokens - budget
            if over <= 0:
                return
            _cut_one(counter, cost, p, fit, over, floor)


def _level(costs: list[int], over: int) -> int | None:
    """The cost each result is cut down to when the results, `over` the budget by this
    much, share what is left evenly (those under it stay whole); None: nothing over."""
    if over <= 0 or not costs:
        return None
    left = sum(costs) - over
    ordered = sorted(costs)
    for i, c in enumerate(ordered):
        share = left // (len(ordered) - i)
        if c > share:
            return max(share, 0)
        left -= c
    return None


def _cut_one(counter: TokenCounter, cost: Callable[[Part], int], p: Part, fit: Fitted,
             over: int, level: int | None) -> None:
    framing = p.info.tokens - p.info.content_tokens
    ids = counter.encoding.encode_ordinary(p.info.text)  # a second cut: from the whole
    marker = CUT_MARKER.format(cut=len(ids), what=what(p), id=p.chunk.id)
    overhead = counter.text(marker) + 4
    if p.chunk.id in fit.cuts:  # cut already: keeps this much of its text beside a marker
        now = cost(p) - framing - overhead
        keep = max(now - over, MIN_KEEP)
    else:
        now = len(ids)
        keep = max(now - over - overhead, MIN_KEEP)
    if level is not None:
        keep = max(keep, level - framing - overhead)
    if keep >= now:
        return
    head = counter.encoding.decode(ids[: keep * 2 // 3])
    tail = counter.encoding.decode(ids[len(ids) - (keep - keep * 2 // 3):])
    marker = CUT_MARKER.format(cut=len(ids) - keep, what=what(p), id=p.chunk.id)
    cut_text = f"{head}\n{marker}\n{tail}"
    before = cost(p)
    p.cut_tokens = framing + counter.text(cut_text)
    fit.tokens += p.cut_tokens - before
    fit.cuts[p.chunk.id] = cut_text
    if not any(q is p for q in fit.cut_parts):
        fit.cut_parts.append(p)
