"""None: never evict. The proxy forwards the conversation as it came (useful as a control
in the simulator, or for a route whose upstream manages its own context). PERMANENT
chunks are, as with every policy, never evicted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

from policies import register
from policies.base import Chunk, Policy, PolicyContext, Ranked


@register
class NoEviction(Policy):
    """Ranks nothing, so nothing is ever evicted."""

    name = "none"
    reason: ClassVar[str] = "never evicts"

    def priority(self, chunk: Chunk, ctx: PolicyContext) -> float:
        return math.inf

    def rank(self, chunks: Sequence[Chunk], ctx: PolicyContext) -> list[Ranked]:
        return []
