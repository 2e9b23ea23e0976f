"""Observation masking: tool outputs older than the last `keep` become a one-line
placeholder naming the offloaded chunk, whether or not the request is over budget.

Lindenbauer et al., "The Complexity Trap: Simple Observation Masking Is as Efficient as
LLM Summarization for Agent Context Management" (arXiv 2508.21433): on SWE-bench Verified
it matched LLM summarization at about half the cost of no management. It is the simple
baseline RWOE must beat. In the proxy the placeholder is the tool-result stub (the call's
pairing survives), the output itself is offloaded and recallable like any eviction.

When masking is not enough to fit, the rest goes oldest first, as `truncate` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from policies import register
from policies._common import BatchPolicy, make_ranked, number
from policies.base import Chunk, ChunkClass, PolicyContext, Ranked


@register
class Mask(BatchPolicy):
    """Forced: every tool output but the newest `keep`; then oldest first."""

    name = "mask"
    forced_reason: ClassVar[str | None] = (
        "observation masked (older than the last tool outputs kept)")
    reason: ClassVar[str] = "oldest first: masking alone did not fit the budget"

    def __init__(self, keep: int = 10) -> None:
        self.keep = int(number("keep", keep, lo=0))

    def forced(self, chunks: Sequence[Chunk], ctx: PolicyContext) -> list[Ranked]:
        tools = [c for c in chunks if c.origin == "tool"]
        tools.sort(key=lambda c: (c.turn, c.index))
        old = [c for c in tools[: max(0, len(tools) - self.keep)]
               if c.klass is not ChunkClass.PERMANENT]
        return make_ranked(old, [float(c.turn) for c in old])

    def scores(self, chunks: Sequence[Chunk], ctx: PolicyContext) -> list[float]:
        return [float(c.turn) for c in chunks]
