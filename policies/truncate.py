"""Truncate: drop the oldest chunks first, by insertion turn then position (the TRUNCATE
baseline of RWOE §7.2, what most agent loops do by hand). Score = insertion turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from policies import register
from policies._common import BatchPolicy
from policies.base import Chunk, PolicyContext


@register
class Truncate(BatchPolicy):
    """Score = insertion turn; ties by position in the conversation."""

    name = "truncate"
    reason: ClassVar[str] = "oldest first"

    def scores(self, chunks: Sequence[Chunk], ctx: PolicyContext) -> list[float]:
        return [float(c.turn) for c in chunks]
