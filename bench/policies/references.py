"""The yardsticks: Bélády with future knowledge, and the exact offline optimum.

Why two: the RWOE paper's "Bélády" is beaten by RWOE (100.3 %), so it was not the optimum
of the paper's own objective. Bélády answers "how good is perfect knowledge of *when* a
chunk is needed, used greedily"; the optimum answers "how much utility was there to get".

Informed (a third yardstick, online): knows the generator's parameters (class mix and
weights, decay, λ, topic focus and shift) but not its draws, and evicts the lowest
expected future utility per token, Σ_{u ≥ t} P(referenced at u) · r_i(u) / σ_i. What it
leaves on the table is roughly the price of not knowing the future; it is a heuristic,
not a bound, so an online policy may beat it.

Bélády (size-aware, the cache literature's Belady-Size): at turn t evict first the chunk
whose next reference (≥ t) is farthest away times its size, i.e. the one holding the most
token-turns of budget until it is next useful; never referenced again = infinitely far.

Exact optimum: under the simulator's rules (simulate.py) a reference (i, t_k) scores only
if chunk i stays in context over the whole interval [a_k, t_k], where a_k is the turn it
last became available: its arrival for the first reference, t_{k−1} + 1 after the previous
one (kept or re-fetched, it is in the pool then). So the offline problem is: choose
intervals, each with a size σ_i and a value r_i(t_k), maximise the value such that at every
turn the chosen intervals covering it fit B minus the PERMANENT tokens already arrived.
That is an integer program with one binary per reference and one row per turn, solved
exactly by HiGHS (`scipy.optimize.milp`, relative gap 0); `brute_force` enumerates the
same model for the tests. (It is the unsplittable-flow-on-a-path problem, NP-hard because
it contains knapsack; the paper's Theorem 1 reduces from weighted interval scheduling,
which is polynomial, so it proves less than it says.)
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from bench.policies.workload import Session
from policies.base import Chunk, ChunkClass, PolicyContext, Ranked


class Belady:
    """Oracle evictor for one session: farthest next reference × size first."""

    name = "belady"

    def __init__(self, session: Session) -> None:
        self.next_refs = session.by_chunk

    def distance(self, chunk: Chunk, t: int) -> float:
        turns = self.next_refs.get(chunk.index, [])
        k = bisect_left(turns, t)
        return math.inf if k == len(turns) else float(turns[k] - t + 1)

    def select(self, chunks: Sequence[Chunk], need: int, ctx: PolicyContext) -> list[Ranked]:
        scored = [Ranked(c, self.distance(c, ctx.turn) * c.tokens) for c in chunks
                  if c.klass is not ChunkClass.PERMANENT]
        scored.sort(key=lambda r: (-r.score, -r.chunk.tokens, r.chunk.index))
        return _greedy(scored, need)


def _greedy(scored: list[Ranked], need: int) -> list[Ranked]:
    out: list[Ranked] = []
    freed = 0
    for r in scored:
        if freed >= need:
            break
        out.append(r)
        freed += r.chunk.tokens
    return out


class Informed:
    """Online evictor that knows the workload's parameters, not the session's draws."""

    name = "informed"

    def __init__(self, session: Session) -> None:
        p = self.p = session.params
        self.session = session
        lo, hi = p.chunks_per_turn
        #: reference weight one turn of arrivals adds, in expectation
        self.new_weight = sum(p.class_mix[k] * p.ref_weights[k] for k in p.class_mix) * (
            lo + hi) / 2

    def select(self, chunks: Sequence[Chunk], need: int, ctx: PolicyContext) -> list[Ranked]:
        p, t, k = self.p, ctx.turn, self.p.topics
        known = [c for c in self.session.chunks if c.turn < t]  # what references pick from
        total = sum(p.ref_weights[c.klass] for c in known)
        by_topic = [sum(p.ref_weights[c.klass] for c in known if c.topic == j) for j in range(k)]
        current = self.session.topic_of_turn.get(t, -1)
        scored = []
        for c in chunks:
            if c.klass is ChunkClass.PERMANENT:
                continue
            w, topic = p.ref_weights[c.klass], self.session.chunks[c.index].topic
            boost = 1 + p.alpha * (1 + sum(1 for r in c.refs if r < t))
            value = 0.0
            for u in range(t, p.turns + 1) if w > 0 else ():
                grown = (u - t) * self.new_weight
                q = (1 - p.topic_focus if k else 1.0) * w / max(total + grown, w)
                if k:  # P(turn u is on this chunk's topic): persist, else uniform
                    same = (1 - p.topic_shift) ** (u - t)
                    on = (same if topic == current else 0.0) + (1 - same) / k
                    q += p.topic_focus * on * w / max(by_topic[topic] + grown / k, w)
                relevance = p.r0 * math.exp(-p.decay[c.klass] * (u - c.turn)) * boost
                value += min(1.0, p.refs_per_turn * q) * relevance
            scored.append(Ranked(c, value / c.tokens))
        scored.sort(key=lambda r: (r.score, r.chunk.index))
        return _greedy(scored, need)


@dataclass(frozen=True, slots=True)
class Interval:
    chunk: int
    start: int
    end: int  # the reference turn
    tokens: int
    value: float


def intervals(session: Session) -> tuple[list[Interval], float, list[int]]:
    """(evictable reference intervals, utility PERMANENT chunks always earn, capacity per
    turn 1..T for evictable chunks)."""
    items: list[Interval] = []
    fixed = 0.0
    for i, turns in sorted(session.by_chunk.items()):
        c = session.chunks[i]
        start = c.turn
        for t in turns:
            value = session.utility(i, t)
            if c.klass is ChunkClass.PERMANENT:
                fixed += value
            else:
                items.append(Interval(i, start, t, c.tokens, value))
            start = t + 1
    caps, perm = [], 0
    for t in range(1, session.params.turns + 1):
        perm += sum(session.chunks[i].tokens for i in session.arrivals.get(t, ())
                    if session.chunks[i].klass is ChunkClass.PERMANENT)
        caps.append(max(0, session.budget - perm))
    return items, fixed, caps


@dataclass(frozen=True, slots=True)
class Solution:
    utility: float
    hits: int  # references an optimal schedule serves from context (PERMANENT included)
    references: int

    @property
    def reconstructions(self) -> int:
        return self.references - self.hits


def optimum(session: Session) -> Solution:
    """The largest utility any schedule can earn on this session (exact MILP), and how
    many references one optimal schedule serves."""
    items, fixed, caps = intervals(session)
    refs = sum(len(turns) for turns in session.by_chunk.values())
    perm_hits = sum(len(turns) for i, turns in session.by_chunk.items()
                    if session.chunks[i].klass is ChunkClass.PERMANENT)
    items = [it for it in items if it.tokens <= min(caps[it.start - 1:it.end])]
    if not items:
        return Solution(fixed, perm_hits, refs)
    a = np.zeros((len(caps), len(items)))
    for k, it in enumerate(items):
        a[it.start - 1:it.end, k] = it.tokens
    values = np.array([it.value for it in items])
    res = milp(-values, constraints=LinearConstraint(a, -np.inf, np.array(caps, float)),
               integrality=np.ones(len(items)), bounds=Bounds(0, 1),
               options={"mip_rel_gap": 0.0, "presolve": True})
    if res.status != 0 or res.x is None:
        raise RuntimeError(f"HiGHS did not prove an optimum: {res.message}")
    take = np.round(res.x)
    return Solution(fixed + float(values @ take), perm_hits + int(take.sum()), refs)


def brute_force(session: Session, limit: int = 18) -> float:
    """The same optimum by enumerating every subset of intervals (tiny sessions only)."""
    items, fixed, caps = intervals(session)
    if len(items) > limit:
        raise ValueError(f"{len(items)} intervals: too many to enumerate")
    best = 0.0
    for mask in itertools.product((0, 1), repeat=len(items)):
        load = [0] * len(caps)
        for take, it in zip(mask, items, strict=True):
            if take:
                for t in range(it.start - 1, it.end):
                    load[t] += it.tokens
        if all(x <= c for x, c in zip(load, caps, strict=True)):
            best = max(best, sum(it.value for take, it in zip(mask, items, strict=True)
                                 if take))
    return fixed + best
