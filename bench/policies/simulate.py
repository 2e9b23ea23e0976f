"""Run one eviction policy over one generated session, turn by turn (RWOE paper §2.4).

Why a model this strict: the figures must compare the proxy's real policy classes with an
oracle and an exact optimum under the same rules, so the rules are written down once:

turn t = 1 … T
  1. pool = context kept at t−1  ∪  chunks arriving at t  ∪  chunks missed at t−1;
  2. if the pool is over the budget B, the policy's own `select(chunks, need, ctx)` frees
     `need = tokens − B` (PERMANENT is never offered), with `ctx.turn = t`, the references
     seen before t in `Chunk.refs`, `ctx.similarity` for the current topic when the
     workload has one, and a per-(session, turn) seeded `ctx.rng`; the rest is C(t);
  3. each chunk referenced at t scores r_i(t) (§2.1, SRB counting references ≤ t) if it is
     in C(t); otherwise it is a *reconstruction*: one per (chunk, turn) reference that
     misses, the chunk is re-fetched and rejoins the pool at t+1 (the policy may evict it
     again), and it scores nothing at t.

Utility = Σ_t Σ_{i ∈ C(t) referenced at t} r_i(t), the objective of §2.4. Decision time is
the wall time of `select` on the turns that needed one.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from bench.policies.workload import Session
from policies.base import Chunk, ChunkClass, PolicyContext, Ranked


class Evictor(Protocol):
    """What the simulator calls: `Policy.select`, or an oracle with the same shape."""

    def select(self, chunks: Sequence[Chunk], need: int, ctx: PolicyContext) -> list[Ranked]:
        ...


@dataclass
class Outcome:
    utility: float = 0.0
    hits: int = 0
    references: int = 0
    reconstructions: int = 0
    turns: int = 0
    decision_ms: list[float] = field(default_factory=list)
    over_budget_turns: int = 0  # PERMANENT alone exceeded B (nobody can help it)
    peak_tokens: int = 0


def views(session: Session) -> list[Chunk]:
    """Fresh policy-side records, one per generated chunk (refs start empty)."""
    origin = session.params.origin
    return [Chunk(c.id, c.tokens, c.klass, c.turn, index=c.index,
                  origin="system" if c.klass is ChunkClass.PERMANENT else origin)
            for c in session.chunks]


def simulate(session: Session, evictor: Evictor, rng_key: str = "0") -> Outcome:
    chunks = views(session)
    out = Outcome(turns=session.params.turns)
    context: set[int] = set()
    missed: set[int] = set()
    budget = session.budget
    for t in range(1, session.params.turns + 1):
        pool = context | missed | set(session.arrivals.get(t, ()))
        total = sum(chunks[i].tokens for i in pool)
        if total > budget:
            ctx = PolicyContext(turn=t, similarity=session.similarity.get(t, {}),
                                rng=random.Random(f"{rng_key}:{t}"))
            offered = [chunks[i] for i in sorted(pool)]
            start = time.perf_counter()
            evicted = evictor.select(offered, total - budget, ctx)
            out.decision_ms.append((time.perf_counter() - start) * 1000.0)
            for r in evicted:
                pool.discard(r.chunk.index)
            total = sum(chunks[i].tokens for i in pool)
            out.over_budget_turns += total > budget
        out.peak_tokens = max(out.peak_tokens, total)
        context, missed = pool, set()
        for i in session.refs.get(t, ()):
            out.references += 1
            if i in context:
                out.utility += session.utility(i, t)
                out.hits += 1
            else:
                out.reconstructions += 1
                missed.add(i)
            chunks[i].refs.append(t)
    return out
