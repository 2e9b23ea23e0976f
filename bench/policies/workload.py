"""Synthetic agent sessions for the policy benchmark: RWOE paper §7.1 (uniform) and §7.3 B.

Why every knob is a named field: the paper gives its workload in one paragraph and leaves
sizes, reference targets and the adversarial setup unstated, so the figures only mean
something next to the exact parameters that produced them. `UNIFORM` follows §7.1 to the
letter where it is specific (20 turns, 4–12 chunks a turn, class mix 10/25/45/20 %, budget
50 % of the generated content, Poisson(λ=2) references a turn to existing chunks, class
biased); where it is silent we chose, and say so here:

- sizes: uniform integers in `size_range` tokens (50–500), times `size_factor[class]`;
- class bias: a reference picks an existing chunk with weight `ref_weights[class]`; the
  defaults are the paper's own class base rates P(ref) (§4.3: 1.0 / 0.6 / 0.3 / 0.05);
- true relevance: r0 = 1 and the §2.3 decay rates `decay`; SRB α = 0.3 (§2.2);
- no semantic signal (`topics = 0`): §7.3 says its uniform content did not separate by
  embedding either.

`ADVERSARIAL` is our reading of §7.3 B ("tight budget, mixed-class chunks, semantically
distinct content including structural facts, transient plans, ephemeral spam"): budget 25 %,
40 % EPHEMERAL spam at twice the size that nobody references, and six topics; a turn works
on one topic (switching with probability `topic_shift`), `topic_focus` of its references go
to chunks of that topic, and the policy sees cos(chunk, current topic) as
`PolicyContext.similarity`, the signal RWOE's P(ref) uses (§4.2). Returning to a topic
re-references its old STRUCTURAL facts in a burst, the failure case of §7.4.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace
from typing import Any

from policies.base import ChunkClass

P, S, T, E = (ChunkClass.PERMANENT, ChunkClass.STRUCTURAL, ChunkClass.TRANSIENT,
              ChunkClass.EPHEMERAL)


@dataclass(frozen=True)
class WorkloadParams:
    name: str = "uniform"
    turns: int = 20
    chunks_per_turn: tuple[int, int] = (4, 12)  # inclusive
    class_mix: dict[ChunkClass, float] = field(
        default_factory=lambda: {P: 0.10, S: 0.25, T: 0.45, E: 0.20})
    size_range: tuple[int, int] = (50, 500)  # tokens, inclusive
    size_factor: dict[ChunkClass, float] = field(
        default_factory=lambda: {P: 1.0, S: 1.0, T: 1.0, E: 1.0})
    budget_ratio: float = 0.5  # budget = ratio × all tokens generated in the session
    refs_per_turn: float = 2.0  # Poisson mean
    ref_weights: dict[ChunkClass, float] = field(
        default_factory=lambda: {P: 1.0, S: 0.6, T: 0.3, E: 0.05})
    ref_recency: float = 0.0  # reference weight × e^(−ref_recency · age): 0 = any age alike
    r0: float = 1.0
    alpha: float = 0.3
    decay: dict[ChunkClass, float] = field(
        default_factory=lambda: {P: 0.0, S: 0.01, T: 0.1, E: 1.0})
    origin: str = "tool"  # what a policy is told about reconstruction cost (R = σ)
    topics: int = 0  # 0 = no semantic signal
    topic_focus: float = 0.0  # share of references that go to the current topic
    topic_shift: float = 0.0  # per-turn probability the agent moves to another topic
    topic_dim: int = 32
    topic_noise: float = 0.5  # spread of a chunk's vector around its topic

    def with_(self, **changes: Any) -> WorkloadParams:
        return replace(self, **changes)


UNIFORM = WorkloadParams()
ADVERSARIAL = WorkloadParams(
    name="adversarial", class_mix={P: 0.05, S: 0.25, T: 0.30, E: 0.40},
    size_factor={P: 1.0, S: 1.0, T: 1.0, E: 2.0}, budget_ratio=0.25,
    ref_weights={P: 1.0, S: 0.6, T: 0.3, E: 0.0}, topics=6, topic_focus=0.7,
    topic_shift=0.3)
WORKLOADS = {"uniform": UNIFORM, "adversarial": ADVERSARIAL}


@dataclass(frozen=True, slots=True)
class SimChunk:
    id: str
    tokens: int
    klass: ChunkClass
    turn: int  # arrival τ
    index: int  # arrival order
    topic: int = -1
    vec: tuple[float, ...] = ()


@dataclass
class Session:
    """One generated session: arrivals and references per turn (1-based), the budget."""

    params: WorkloadParams
    chunks: list[SimChunk]
    arrivals: dict[int, list[int]]  # turn -> chunk indexes
    refs: dict[int, list[int]]  # turn -> distinct chunk indexes referenced then
    budget: int
    similarity: dict[int, dict[str, float]] = field(default_factory=dict)  # turn -> id -> cos
    drawn: dict[int, int] = field(default_factory=dict)  # turn -> Poisson draw (pre-dedup)
    topic_of_turn: dict[int, int] = field(default_factory=dict)  # the current step's topic
    by_chunk: dict[int, list[int]] = field(init=False)  # chunk index -> its reference turns

    def __post_init__(self) -> None:
        self.by_chunk = {}
        for t in sorted(self.refs):
            for i in self.refs[t]:
                self.by_chunk.setdefault(i, []).append(t)

    @property
    def total_tokens(self) -> int:
        return sum(c.tokens for c in self.chunks)

    def utility(self, i: int, t: int) -> float:
        """r_i(t) of §2.1: r0 · e^(−λ(t−τ)) · (1 + α·|{s ∈ S_i : s ≤ t}|)."""
        c, p = self.chunks[i], self.params
        seen = sum(1 for s in self.by_chunk.get(i, ()) if s <= t)
        return p.r0 * math.exp(-p.decay[c.klass] * (t - c.turn)) * (1.0 + p.alpha * seen)


def _poisson(rng: random.Random, lam: float) -> int:
    """Knuth's method: exact and seeded by `rng` (λ is small here)."""
    limit, k, prod = math.exp(-lam), 0, rng.random()
    while prod > limit:
        k += 1
        prod *= rng.random()
    return k


def _unit(rng: random.Random, dim: int) -> list[float]:
    v = [rng.gauss(0.0, 1.0) for _ in range(dim)]
    n = math.sqrt(sum(x * x for x in v)) or 1.0
    return [x / n for x in v]


def _cos(a: tuple[float, ...] | list[float], b: tuple[float, ...] | list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def generate(params: WorkloadParams, seed: int, index: int) -> Session:
    """Session `index` of seed `seed`: the same pair gives the same session whatever else
    is generated, so 5 sessions are the first 5 of 500."""
    rng = random.Random(f"{params.name}:{seed}:{index}")
    classes = list(params.class_mix)
    mix = [params.class_mix[k] for k in classes]
    centroids = [_unit(rng, params.topic_dim) for _ in range(params.topics)]
    topic = rng.randrange(params.topics) if params.topics else -1
    chunks: list[SimChunk] = []
    arrivals: dict[int, list[int]] = {}
    refs: dict[int, list[int]] = {}
    similarity: dict[int, dict[str, float]] = {}
    drawn: dict[int, int] = {}
    topic_of_turn: dict[int, int] = {}
    for t in range(1, params.turns + 1):
        if params.topics and t > 1 and rng.random() < params.topic_shift:
            topic = rng.choice([k for k in range(params.topics) if k != topic] or [topic])
        existing = len(chunks)  # references go to chunks that arrived before this turn
        topic_of_turn[t] = topic
        drawn[t] = _poisson(rng, params.refs_per_turn)
        refs[t] = _references(rng, params, chunks[:existing], topic, t, drawn[t])
        arrivals[t] = []
        for _ in range(rng.randint(*params.chunks_per_turn)):
            klass = rng.choices(classes, mix)[0]
            size = round(rng.randint(*params.size_range) * params.size_factor[klass])
            vec: tuple[float, ...] = ()
            ctopic = rng.randrange(params.topics) if params.topics else -1
            if params.topics:
                noise = _unit(rng, params.topic_dim)
                raw = [c + params.topic_noise * n for c, n in zip(centroids[ctopic], noise,
                                                                 strict=True)]
                norm = math.sqrt(sum(x * x for x in raw)) or 1.0
                vec = tuple(x / norm for x in raw)
            arrivals[t].append(len(chunks))
            chunks.append(SimChunk(f"c{len(chunks)}", max(1, size), klass, t, len(chunks),
                                   ctopic, vec))
        if params.topics:
            similarity[t] = {c.id: _cos(c.vec, centroids[topic]) for c in chunks}
    budget = max(1, round(params.budget_ratio * sum(c.tokens for c in chunks)))
    return Session(params, chunks, arrivals, refs, budget, similarity, drawn, topic_of_turn)


def _references(rng: random.Random, params: WorkloadParams, existing: list[SimChunk],
                topic: int, t: int, n: int) -> list[int]:
    """`n` (a Poisson(refs_per_turn) draw) picks of distinct existing chunks, class-biased
    (and biased to recent ones by `ref_recency`) and, with probability `topic_focus`,
    restricted to the current topic."""
    weights = [params.ref_weights[c.klass] * math.exp(-params.ref_recency * (t - c.turn))
               for c in existing]
    if not existing or not any(weights):
        return []
    out: list[int] = []
    for _ in range(n):
        pool = range(len(existing))
        if params.topics and rng.random() < params.topic_focus:
            on_topic = [i for i in pool if existing[i].topic == topic and weights[i] > 0]
            pool = on_topic or pool  # type: ignore[assignment]
        w = [weights[i] for i in pool]
        if any(w):
            pick = existing[rng.choices(list(pool), w)[0]].index
            if pick not in out:
                out.append(pick)
    return out
