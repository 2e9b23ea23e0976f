"""Hybrid: lowest importance first, oldest first within equal importance (HTM ADR-007,
"Working Memory Eviction Strategy": sort by `[importance, -recency]`, evict greedily).

Importance is `chunk.importance` when the caller set one, else a per-class default
(`class_importance`: STRUCTURAL 8, TRANSIENT 5, EPHEMERAL 1; PERMANENT is never ranked).
Score = importance; the ADR's secondary key, age, is the common tie-break of every policy
(insertion turn, then position), so an older chunk goes before a newer one of equal
importance. Like the ADR it ignores access frequency and size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from policies import register
from policies._common import BatchPolicy, ClassParam, class_map
from policies.base import Chunk, ChunkClass, PolicyContext

CLASS_IMPORTANCE = {ChunkClass.PERMANENT: 10.0, ChunkClass.STRUCTURAL: 8.0,
                    ChunkClass.TRANSIENT: 5.0, ChunkClass.EPHEMERAL: 1.0}


@register
class Hybrid(BatchPolicy):
    """Score = importance (explicit, else by class); ties oldest first."""

    name = "hybrid"
    reason: ClassVar[str] = "lowest importance, oldest first"

    def __init__(self, class_importance: ClassParam | None = None) -> None:
        self.class_importance = class_map("class_importance", class_importance,
                                          CLASS_IMPORTANCE)

    def scores(self, chunks: Sequence[Chunk], ctx: PolicyContext) -> list[float]:
        by_class = self.class_importance
        return [by_class[c.klass] if c.importance is None else float(c.importance)
                for c in chunks]
