"""RWOE: relevance-weighted optimal eviction (seed paper "RWOE: Relevance-Decay Optimal Memory
Eviction for LLM Agents", §2–§4) and its randomised variant RWOE-R (§5.3).

Each evictable chunk gets its expected future value per token,

    r(t)   = r0 · exp(−λ_class · (t − τ)) · (1 + α · refs)
    P(ref) = clamp01(base(class) + 0.5 · cos + 0.3 · exp(−0.2 · (t − last ref)))
    EFV    = P(ref) · (r(t) + R/σ)

in turns: t = `ctx.turn`, τ = `chunk.turn`, refs = the distinct reference turns ≤ t (the
set S_i of §2.2), last ref = the latest of them, σ = `chunk.tokens`. The lowest EFV is
evicted first (PERMANENT never). `cos` is `ctx.similarity[chunk.id]` (0 when absent); the
recency term is 0 for a chunk not referenced yet. λ_class, base, α, r0 and 0.5, 0.3, 0.2
are `lambdas`, `base_rates`, `alpha`, `r0`, `semantic_weight`, `recency_weight` and
`recency_decay` (defaults: the paper's).

Reconstruction cost R, by `chunk.origin` (DESIGN.md: a tool result can be re-fetched, user
text cannot): R = k·σ + F, so R/σ = k + F/σ. `recon_cost` sets the multiple k per origin
(defaults: tool 1, i.e. R ≈ σ; assistant 2, since regenerating it costs output tokens;
user and system 10, i.e. "large"); `recon_fixed` adds an absolute cost F in tokens per
origin (default 0), for costs that do not scale with size (a slow tool, a human re-typing
a short instruction). Origins not listed use k = 1, F = 0.

Prompt cache (`cache_weight` β, default 0: the paper's order): an evictable chunk's EFV is
multiplied by 1 + β · (1 − i / n), i its message's position and n one past the last
evictable message's (`ctx.horizon`; the tail that is always sent is not ranked), so the
early conversation is worth more and an eviction breaks the provider's cached prefix later
(what is evicted goes from nearer the tail). Measured in docs/design-notes.md ("Budget and
cache"): at β = 2 the cache-prefix ratio +0.03 to +0.09 and facts kept within a fact or two
either way, but what goes is the latest work (the demo's late turn evicts the patch just
applied and keeps a document read on turn 1): a route's choice, not the default.

Deviation from the paper: P is also clamped at 0, since a negative cosine could otherwise
make P negative and invert the order (the most valuable chunk would go first).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from math import cos, exp, log, sin, sqrt, tau
from random import Random
from typing import Any, ClassVar

from policies import register
from policies._common import BatchPolicy, ClassParam, class_map, number
from policies.base import Chunk, ChunkClass, PolicyContext

P, S, T, E = (ChunkClass.PERMANENT, ChunkClass.STRUCTURAL, ChunkClass.TRANSIENT,
              ChunkClass.EPHEMERAL)
LAMBDAS = {P: 0.0, S: 0.01, T: 0.1, E: 1.0}
BASE_RATES = {P: 1.0, S: 0.6, T: 0.3, E: 0.05}
RECON_COST = {"tool": 1.0, "assistant": 2.0, "user": 10.0, "system": 10.0}


@register
class RWOE(BatchPolicy):
    """Evict the lowest expected future value per token first (RWOE §4.1)."""

    name = "rwoe"
    reason: ClassVar[str] = "lowest expected future value per token"

    def __init__(self, lambdas: ClassParam | None = None, alpha: float = 0.3,
                 base_rates: ClassParam | None = None, r0: float = 1.0,
                 recon_cost: Mapping[str, float] | None = None,
                 recon_fixed: Mapping[str, float] | None = None,
                 semantic_weight: float = 0.5, recency_weight: float = 0.3,
                 recency_decay: float = 0.2, cache_weight: float = 0.0) -> None:
        lam = class_map("lambdas", lambdas, LAMBDAS, lo=0)
        base = class_map("base_rates", base_rates, BASE_RATES, lo=0, hi=1)
        self.per_class = {k: (lam[k], base[k]) for k in ChunkClass}
        self.alpha = number("alpha", alpha, lo=0)
        self.r0 = number("r0", r0, lo=0)
        self.semantic_weight = number("semantic_weight", semantic_weight, lo=0)
        self.recency_weight = number("recency_weight", recency_weight, lo=0)
        self.recency_decay = number("recency_decay", recency_decay, lo=0)
        self.cache_weight = number("cache_weight", cache_weight, lo=0)
        mult = {**RECON_COST, **_origin_map("recon_cost", recon_cost)}
        fixed = _origin_map("recon_fixed", recon_fixed)
        self.recon = {o: (mult.get(o, 1.0), fixed.get(o, 0.0)) for o in {*mult, *fixed}}

    def scores(self, chunks: Sequence[Chunk], ctx: PolicyContext) -> list[float]:
        t = ctx.turn
        sim_get = ctx.similarity.get if ctx.similarity else None
        per_class, recon, default_recon = self.per_class, self.recon, (1.0, 0.0)
        r0, alpha, sw = self.r0, self.alpha, self.semantic_weight
        rw, rd = self.recency_weight, self.recency_decay
        out: list[float] = []
        for c in chunks:
            lam, p = per_class[c.klass]
            age = t - c.turn
            r = r0 * exp(-lam * age) if age > 0 else r0
            refs = c.refs
            if refs:  # the set S_i up to now (§2.2)
                past = set(refs) if max(refs) <= t else {s for s in refs if s <= t}
                if past:
                    r *= 1.0 + alpha * len(past)
                    p += rw * exp(-rd * (t - max(past)))
            if sim_get is not None:
                p += sw * sim_get(c.id, 0.0)
            if p > 1.0:
                p = 1.0
            elif p < 0.0:
                p = 0.0
            k, fixed = recon.get(c.origin, default_recon)  # R/σ = k + F/σ
            if fixed:
                k += fixed / max(c.tokens, 1)
            out.append(p * (r + k))
        beta = self.cache_weight
        if beta and out:  # the earlier a chunk, the more its place in the prefix is worth
            n = ctx.horizon or max(c.index for c in chunks) + 1
            out = [v * (1.0 + beta * (1.0 - c.index / n)) for v, c in zip(out, chunks,
                                                                        strict=True)]
        return out


@register
class RWOER(RWOE):
    """RWOE-R (§5.3): EFV + ε·N(0,1), drawn from `ctx.rng`, before sorting."""

    name = "rwoe-r"
    reason: ClassVar[str] = "lowest expected future value per token (randomised)"

    def __init__(self, epsilon: float = 0.1, **params: Any) -> None:
        super().__init__(**params)
        self.epsilon = number("epsilon", epsilon, lo=0)

    def scores(self, chunks: Sequence[Chunk], ctx: PolicyContext) -> list[float]:
        efv = super().scores(chunks, ctx)
        eps = self.epsilon
        return [s + eps * z for s, z in zip(efv, normals(ctx.rng, len(efv)), strict=True)]


def normals(rng: Random, n: int) -> list[float]:
    """n standard normal draws from `rng` (Box-Muller on rng.random(): under half the cost
    of n calls to rng.gauss, which is Python code)."""
    rand = rng.random
    out: list[float] = []
    for _ in range((n + 1) // 2):
        radius = sqrt(-2.0 * log(1.0 - rand()))
        angle = tau * rand()
        out += (radius * cos(angle), radius * sin(angle))
    del out[n:]
    return out


def _origin_map(name: str, given: Mapping[str, float] | None) -> dict[str, float]:
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        raise ValueError(f"{name} must map origins to numbers, got {given!r}")
    return {str(o): number(f"{name}[{o}]", v, lo=0) for o, v in given.items()}
