"""LRU: evict the least recently used chunk first (baseline of RWOE §7.2).

A chunk is used when it enters the context and whenever a later turn references it, so its
score is `chunk.last_used` (latest reference turn, else insertion turn); ties go oldest
first. Recency is all it sees: no class, size or reconstruction cost (RWOE §4.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from policies import register
from policies._common import BatchPolicy
from policies.base import Chunk, PolicyContext


@register
class LRU(BatchPolicy):
    """Score = last use turn; lowest first."""

    name = "lru"
    reason: ClassVar[str] = "least recently used"

    def scores(self, chunks: Sequence[Chunk], ctx: PolicyContext) -> list[float]:
        return [float(max(c.refs) if c.refs else c.turn) for c in chunks]
