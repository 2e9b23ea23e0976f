"""LFU: evict the least frequently used chunk first (baseline of RWOE §7.2).

Score = `chunk.uses` (1 for entering the context + one per reference). Ties go to the least
recently used (`last_used`), then the oldest (turn, index). Frequency never decays, which
is the weakness the RWOE paper points at: an old, once-popular chunk stays forever.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from policies import register
from policies._common import BatchPolicy
from policies.base import Chunk, PolicyContext


@register
class LFU(BatchPolicy):
    """Score = number of uses; ties by last use, then age."""

    name = "lfu"
    reason: ClassVar[str] = "least frequently used"

    def scores(self, chunks: Sequence[Chunk], ctx: PolicyContext) -> list[float]:
        return [float(1 + len(c.refs)) for c in chunks]

    def tiebreak(self, chunks: Sequence[Chunk]) -> list[float]:
        return [float(max(c.refs) if c.refs else c.turn) for c in chunks]
