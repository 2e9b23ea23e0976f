"""The one extension point for eviction: a `Policy` ranks chunks, lowest priority first.

A policy never edits a conversation. It sees `Chunk` records (class, size, insertion turn,
reference turns, optional similarity to the current step) and answers with a ranking of
the evictable ones, each with the score that put it there. Callers walk the ranking
greedily: the proxy's pipeline does it with its own token accounting (stubs, tool-call
groups); `Policy.select` does the plain version used by tests and the simulator.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar


class ChunkClass(enum.StrEnum):
    """Decay classes of the RWOE paper, §2.3."""

    PERMANENT = "PERMANENT"
    STRUCTURAL = "STRUCTURAL"
    TRANSIENT = "TRANSIENT"
    EPHEMERAL = "EPHEMERAL"


@dataclass(slots=True)
class Chunk:
    """One evictable unit of context, as policies see it."""

    id: str
    tokens: int
    klass: ChunkClass
    turn: int  # insertion turn τ
    index: int = 0  # position in the conversation (ties: earlier is older)
    refs: list[int] = field(default_factory=list)  # turns at which it was referenced
    origin: str = "tool"  # system | user | assistant | tool: drives reconstruction cost
    importance: float | None = None  # explicit importance (hybrid); None = from class
    strength: float = 1.0  # Mnemex s

    @property
    def last_used(self) -> int:
        return max(self.refs) if self.refs else self.turn

    @property
    def uses(self) -> int:
        return 1 + len(self.refs)


@dataclass(slots=True)
class PolicyContext:
    """What a policy may know when it ranks: the present, not the future."""

    turn: int
    similarity: Mapping[str, float] = field(default_factory=dict)  # chunk id -> cos(query)
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    #: one past the last position a policy may rank (0: one past the last chunk it is
    #: given), so a position-weighted score is the same whichever subset is ranked
    horizon: int = 0


@dataclass(frozen=True, slots=True)
class Ranked:
    chunk: Chunk
    score: float


class Policy:
    """Base class: subclasses set `name` and implement `priority` (lower = evict first).

    Ties break oldest first (insertion turn, then position), so every policy is
    deterministic unless it adds noise on purpose (rwoe-r).
    """

    name: ClassVar[str] = ""
    #: the reason written to the eviction log
    reason: ClassVar[str] = "budget"
    #: ... for what `forced` evicts (None: `reason`)
    forced_reason: ClassVar[str | None] = None

    def priority(self, chunk: Chunk, ctx: PolicyContext) -> float:
        raise NotImplementedError

    def forced(self, chunks: Sequence[Chunk], ctx: PolicyContext) -> list[Ranked]:
        """Chunks this policy evicts whether or not the request is over budget (observation
        masking does; budget-driven policies return nothing)."""
        return []

    def rank(self, chunks: Sequence[Chunk], ctx: PolicyContext) -> list[Ranked]:
        """Evictable chunks (never PERMANENT), best eviction candidate first."""
        scored = [
            Ranked(c, self.priority(c, ctx)) for c in chunks if c.klass is not ChunkClass.PERMANENT
        ]
        scored.sort(key=lambda r: (r.score, r.chunk.turn, r.chunk.index))
        return scored

    def select(self, chunks: Sequence[Chunk], need: int, ctx: PolicyContext) -> list[Ranked]:
        """Greedy: evict from the front of the ranking until `need` tokens are freed."""
        evicted: list[Ranked] = []
        freed = 0
        for r in self.rank(chunks, ctx):
            if freed >= need:
                break
            evicted.append(r)
            freed += r.chunk.tokens
        return evicted
