"""What a fitted conversation costs and sends (proxy/fitting.py decides what is evicted).

Token accounting is exact for what will be sent:
- a tool result that is evicted becomes a stub (its pairing with the call survives);
- an assistant `tool_calls` message is dropped only with all its results (the group goes);
- any other evicted message is dropped.
A part cut head-and-tail (proxy/cutting.py) costs its cut. Stubs and what they cost:
proxy/stubs.py.
"""

from __future__ import annotations

from typing import Any

from policies.base import ChunkClass
from proxy.chunking import RESULTS, Conversation, Part
from proxy.stubs import StubCosts
from proxy.tokens import REPLY_PRIMING, TokenCounter


class Accounting:
    """Costs (`cost`, `part_cost`) and the messages sent (`assemble`) for a set of evicted
    chunks; each evicted result's stub is made and counted once (`stubs`)."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self.stubs = StubCosts(counter)  # each evicted result's stub, once

    def stub(self, part: Part) -> str:
        return self.stubs.text(part)

    def stub_cost(self, part: Part) -> int:
        return self.stubs.cost(part)

    def cost(self, conv: Conversation, evicted: set[str]) -> int:
        total = REPLY_PRIMING
        for p in conv.parts:
            total += self.part_cost(conv, p, evicted)
        return total

    def part_cost(self, conv: Conversation, p: Part, evicted: set[str]) -> int:
        if p.chunk.id not in evicted:
            if p.role in RESULTS and p.group is not None:
                head = conv.parts[p.group].chunk.id
                if head in evicted and conv.dropped(p.group, evicted):
                    return 0
            return p.chunk.tokens if p.cut_tokens is None else p.cut_tokens
        if p.group is None:
            return 0
        if p.role == "assistant":
            return 0 if conv.dropped(p.group, evicted) else p.chunk.tokens
        return 0 if conv.dropped(p.group, evicted) else self.stub_cost(p)

    def assemble(self, conv: Conversation, messages: list[dict[str, Any]],
                 evicted: set[str], cuts: dict[str, str] | None = None,
                 ) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for p, msg in zip(conv.parts, messages, strict=True):
            cost = self.part_cost(conv, p, evicted)
            if cost == 0:
                continue
            if p.chunk.id in evicted and p.role in RESULTS:
                out.append({**msg, "content": self.stub(p)})
            elif cuts and p.chunk.id in cuts:
                out.append({**msg, "content": cuts[p.chunk.id]})
            else:
                out.append(msg)
        return out

    @staticmethod
    def _affected(conv: Conversation, part: Part) -> list[Part]:
        if part.group is None:
            return [part]
        head = conv.parts[part.group]
        return [head, *(conv.parts[j] for j in conv.groups.get(part.group, ()))]


def permanent(conv: Conversation) -> int:
    """What the request costs at least: the reply's priming and its PERMANENT parts."""
    return REPLY_PRIMING + sum(p.chunk.tokens for p in conv.parts
                               if p.chunk.klass is ChunkClass.PERMANENT)
