"""Eviction policies: each policy's order, the seeds' worked cases, parameters, the registry."""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
from typing import Any

import pytest

from policies import UnknownPolicy, available, get_policy
from policies._common import make_ranked
from policies.base import Chunk, ChunkClass, Policy, PolicyContext, Ranked
from policies.decay import decay_curve, mnemex_score
from policies.rwoe import normals

P, S, T, E = (ChunkClass.PERMANENT, ChunkClass.STRUCTURAL, ChunkClass.TRANSIENT,
              ChunkClass.EPHEMERAL)
NAMES = ["decay", "hybrid", "lfu", "lru", "mask", "none", "rwoe", "rwoe-r", "truncate"]
HOUR, DAY = 3600, 86400


def ck(cid: str, tokens: int = 100, klass: ChunkClass = T, turn: int = 0, index: int = 0,
       **kw: Any) -> Chunk:
    return Chunk(cid, tokens, klass, turn, index=index, **kw)


def ids(ranked: list[Ranked]) -> list[str]:
    return [r.chunk.id for r in ranked]


def mixed(n: int = 60, seed: int = 3) -> list[Chunk]:
    """A shuffled conversation with every class, origin, references and ties."""
    rng = random.Random(seed)
    chunks = [ck(f"c{i}", rng.randint(1, 900), rng.choice(list(ChunkClass)), i // 3, i,
                 refs=[i // 3 + rng.randint(1, 12) for _ in range(rng.choice([0, 0, 1, 3]))],
                 origin=rng.choice(["tool", "assistant", "user", "system", "other"]),
                 importance=rng.choice([None, None, 2.0, 7.5]), strength=rng.choice([0.5, 1.0]))
              for i in range(n)]
    rng.shuffle(chunks)
    return chunks


def ctx_for(chunks: list[Chunk], turn: int = 15, seed: int = 1) -> PolicyContext:
    sim = {c.id: (hash(c.id) % 200 - 50) / 100 for c in chunks[::2]}
    return PolicyContext(turn=turn, similarity=sim, rng=random.Random(seed),
                         horizon=max(c.index for c in chunks) + 1)


# --- registry and parameters ---------------------------------------------------------------

def test_registry_names_and_unknown_policy() -> None:
    assert available() == NAMES
    with pytest.raises(UnknownPolicy) as err:
        get_policy("nope")
    assert str(err.value) == ("Unknown policy: nope (registered: decay, hybrid, lfu, lru, mask, "
                              "none, rwoe, rwoe-r, truncate)")
    with pytest.raises(TypeError, match="alpah"):
        get_policy("rwoe", alpah=0.3)
    assert all(get_policy(n).reason != "budget" for n in NAMES)


@pytest.mark.parametrize("name,params,word", [
    ("rwoe", {"alpha": -0.1}, "alpha"),
    ("rwoe", {"alpha": True}, "alpha"),
    ("rwoe", {"cache_weight": -1}, "cache_weight"),
    ("rwoe", {"lambdas": {"STRUCTURAL": -1}}, "lambdas"),
    ("rwoe", {"lambdas": {"BOGUS": 1.0}}, "lambdas"),
    ("rwoe", {"lambdas": [0.1]}, "lambdas"),
    ("rwoe", {"base_rates": {"transient": 1.5}}, "base_rates"),
    ("rwoe", {"r0": float("nan")}, "r0"),
    ("rwoe", {"recon_cost": {"tool": -1}}, "recon_cost"),
    ("rwoe", {"recon_fixed": {"user": "lots"}}, "recon_fixed"),
    ("rwoe", {"semantic_weight": "x"}, "semantic_weight"),
    ("rwoe", {"recency_weight": -1}, "recency_weight"),
    ("rwoe", {"recency_decay": float("inf")}, "recency_decay"),
    ("rwoe-r", {"epsilon": -0.1}, "epsilon"),
    ("rwoe-r", {"alpha": -1}, "alpha"),
    ("hybrid", {"class_importance": {"TRIVIAL": 1}}, "class_importance"),
    ("decay", {"model": "cubic"}, "model"),
    ("decay", {"beta": -1}, "beta"),
    ("decay", {"half_life": 0}, "half_life"),
    ("decay", {"alpha": 0}, "alpha"),
    ("decay", {"lam": 0.1}, "lam"),
    ("decay", {"model": "exponential", "lam": 0.1, "half_life": 3}, "lam"),
    ("decay", {"model": "exponential", "lam": -0.1}, "lam"),
    ("decay", {"model": "two_component", "weight": 1.5}, "weight"),
    ("decay", {"model": "two_component", "lam_fast": -1}, "lam_fast"),
    ("decay", {"model": "exponential", "lam_slow": 0.1}, "lam_slow"),
])
def test_bad_params_name_the_parameter(name: str, params: dict[str, Any], word: str) -> None:
    with pytest.raises(ValueError, match=rf"\b{word}\b"):
        get_policy(name, **params)


def test_params_from_yaml_shape() -> None:
    p = get_policy("rwoe", lambdas={"structural": 0.02, "TRANSIENT": 0}, base_rates={S: 0.7})
    assert p.per_class[S] == (0.02, 0.7) and p.per_class[T] == (0.0, 0.3)  # type: ignore[attr-defined]
    assert p.per_class[E] == (1.0, 0.05)  # type: ignore[attr-defined]


# --- properties every policy keeps -----------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_never_evicts_permanent_even_when_asked_for_everything(name: str) -> None:
    chunks = mixed()
    policy = get_policy(name)
    evicted = policy.select(chunks, 10**9, ctx_for(chunks))
    assert all(r.chunk.klass is not P for r in evicted)
    if name != "none":
        assert sorted(ids(evicted)) == sorted(c.id for c in chunks if c.klass is not P)


@pytest.mark.parametrize("name", [n for n in NAMES if n not in ("none", "rwoe-r")])
def test_fast_rank_matches_the_reference_rank(name: str) -> None:
    """The batch path orders exactly like `Policy.rank` over `priority`, shuffled input too."""
    chunks = mixed()
    policy = get_policy(name)
    fast = policy.rank(chunks, ctx_for(chunks))
    reference = Policy.rank(policy, chunks, ctx_for(chunks))
    if name == "lfu":  # LFU's extra tie-break (last use) is not in the generic sort key
        reference.sort(key=lambda r: (r.score, r.chunk.last_used, r.chunk.turn, r.chunk.index))
    assert fast == reference


def test_fast_ranked_records_are_ordinary_ranked() -> None:
    c = ck("a")
    (r,) = make_ranked([c], [0.5])
    assert r == Ranked(c, 0.5) and type(r) is Ranked
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.score = 1.0  # type: ignore[misc]


# --- baselines -------------------------------------------------------------------------------

def test_lru_by_last_use_then_age() -> None:
    chunks = [ck("old-used", turn=1, refs=[9]), ck("old", turn=1, index=2),
              ck("mid", turn=5, index=1), ck("new", turn=8), ck("older", turn=1, index=1),
              ck("sys", klass=P)]
    ranked = get_policy("lru").rank(chunks, PolicyContext(turn=10))
    assert ids(ranked) == ["older", "old", "mid", "new", "old-used"]
    assert [r.score for r in ranked] == [1.0, 1.0, 5.0, 8.0, 9.0]


def test_lfu_by_uses_then_last_use_then_age() -> None:
    chunks = [ck("hot", turn=1, refs=[2, 3, 4]), ck("new", turn=9), ck("old", turn=2),
              ck("once-late", turn=1, refs=[8]), ck("once-early", turn=3, refs=[5]),
              ck("oldest", turn=2, index=0)]
    chunks[2].index = 1
    ranked = get_policy("lfu").rank(chunks, PolicyContext(turn=10))
    assert ids(ranked) == ["oldest", "old", "new", "once-early", "once-late", "hot"]
    assert [r.score for r in ranked] == [1, 1, 1, 2, 2, 4]


def test_truncate_oldest_first_by_turn_then_index() -> None:
    chunks = [ck("b", turn=2, index=5), ck("a2", turn=1, index=3), ck("sys", klass=P),
              ck("c", turn=3, index=6, refs=[9]), ck("a1", turn=1, index=2)]
    ranked = get_policy("truncate").rank(chunks, PolicyContext(turn=10))
    assert ids(ranked) == ["a1", "a2", "b", "c"]
    assert get_policy("truncate").select(chunks, 150, PolicyContext(turn=10))[-1].chunk.id == "a2"


def test_none_never_evicts() -> None:
    chunks = mixed()
    policy = get_policy("none")
    assert policy.rank(chunks, ctx_for(chunks)) == []
    assert policy.select(chunks, 10**9, ctx_for(chunks)) == []


# --- hybrid: HTM ADR-007 ---------------------------------------------------------------------

NOW = 1000  # hours; a chunk's turn is its insertion hour


def memory(cid: str, importance: float, tokens: int, age_hours: int, index: int) -> Chunk:
    return ck(cid, tokens, T, NOW - age_hours, index, importance=importance)


def test_hybrid_adr007_use_case_2_importance_ties_evict_oldest() -> None:
    notes = [memory("note_3", 5.0, 1000, 1, 2), memory("note_1", 5.0, 1000, 5 * 24, 0),
             memory("note_2", 5.0, 1000, 3 * 24, 1)]
    evicted = get_policy("hybrid").select(notes, 2000, PolicyContext(turn=NOW))
    assert ids(evicted) == ["note_1", "note_2"]


def test_hybrid_adr007_use_case_1_greedy_keeps_going_until_4500_freed() -> None:
    # The ADR stops after 3,500 tokens and calls it enough; 3,500 < 4,500, so greedy
    # eviction (its own algorithm) must go on through user_pref and architecture_decision.
    wm = [memory("user_pref", 8.0, 100, 5 * 24, 0), memory("random_note", 1.0, 2000, 1, 1),
          memory("architecture_decision", 10.0, 3000, 3 * 24, 2),
          memory("debug_log", 2.0, 1500, 2 * 24, 3)]
    policy, ctx = get_policy("hybrid"), PolicyContext(turn=NOW)
    order = ["random_note", "debug_log", "user_pref", "architecture_decision"]
    assert ids(policy.rank(wm, ctx)) == order
    evicted = policy.select(wm, 4500, ctx)
    assert ids(evicted) == order
    assert sum(r.chunk.tokens for r in evicted) == 6600


def test_hybrid_adr007_tiers_and_class_importance() -> None:
    tiers = [memory("10-1h", 10.0, 1, 1, 0), memory("5-1h", 5.0, 1, 1, 1),
             memory("1-5d", 1.0, 1, 120, 2), memory("10-5d", 10.0, 1, 120, 3),
             memory("1-1h", 1.0, 1, 1, 4), memory("5-5d", 5.0, 1, 120, 5)]
    assert ids(get_policy("hybrid").rank(tiers, PolicyContext(turn=NOW))) == [
        "1-5d", "1-1h", "5-5d", "5-1h", "10-5d", "10-1h"]
    by_class = [ck("s", klass=S), ck("e", klass=E, turn=5), ck("t", klass=T),
                ck("pinned", klass=E, importance=9.0)]
    assert ids(get_policy("hybrid").rank(by_class, PolicyContext(turn=9))) == [
        "e", "t", "s", "pinned"]
    custom = get_policy("hybrid", class_importance={"TRANSIENT": 0.5})
    assert ids(custom.rank(by_class, PolicyContext(turn=9)))[0] == "t"


# --- decay: Mnemex ---------------------------------------------------------------------------

LAM = 2.673e-6  # 3-day half-life, per second


@pytest.mark.parametrize("n_use,dt,strength,expected", [
    (1, 6 * HOUR, 1.0, pytest.approx(0.944, abs=5e-4)),   # Example A
    (6, 2 * DAY, 1.0, pytest.approx(1.84, rel=0.01)),     # Example B
    (3, 5 * DAY, 1.5, pytest.approx(0.91, rel=0.01)),     # Example C
    (1, 21 * DAY, 1.0, pytest.approx(0.0078, rel=0.01)),  # Example D
])
def test_mnemex_worked_examples(n_use: int, dt: int, strength: float, expected: Any) -> None:
    assert mnemex_score(n_use, dt, strength, 0.6, "exponential", lam=LAM) == expected


def test_mnemex_models_and_half_life() -> None:
    power = decay_curve("power_law", half_life=3 * DAY, alpha=1.1)
    assert power(0) == 1.0 and power(3 * DAY) == pytest.approx(0.5)
    assert decay_curve("exponential", half_life=3 * DAY)(3 * DAY) == pytest.approx(0.5)
    assert mnemex_score(1, 30 * DAY, model="exponential", lam=LAM) == pytest.approx(0.001, abs=1e-4)
    two = decay_curve("two_component", lam_fast=1.603e-5, lam_slow=1.147e-6, weight=0.7)
    assert two(DAY) == pytest.approx(0.7 * math.exp(-1.603e-5 * DAY)
                                      + 0.3 * math.exp(-1.147e-6 * DAY))
    assert power(30 * DAY) > decay_curve("exponential", half_life=3 * DAY)(30 * DAY)  # heavier tail


def test_decay_policy_scores_in_turns() -> None:
    chunks = [ck("stale", turn=0), ck("fresh", turn=9), ck("used", turn=0, refs=[3, 6, 9]),
              ck("weak", turn=9, strength=0.2), ck("sys", klass=P)]
    policy, ctx = get_policy("decay"), PolicyContext(turn=10)
    ranked = policy.rank(chunks, ctx)
    assert ids(ranked) == ["weak", "stale", "fresh", "used"]
    assert ranked[1].score == pytest.approx(mnemex_score(1, 10, half_life=10))
    assert ranked[1].score == pytest.approx(0.5)  # Δt = one half-life (10 turns)
    assert ranked[3].score == pytest.approx(4**0.6 * mnemex_score(1, 1))
    exp = get_policy("decay", model="exponential", lam=math.log(2) / 5, beta=0.0)
    assert exp.rank(chunks, ctx)[1].score == pytest.approx(0.25)


# --- RWOE ------------------------------------------------------------------------------------

def test_rwoe_efv_by_hand() -> None:
    c = ck("x", 200, T, turn=2, refs=[4, 6, 12])  # the reference at turn 12 is in the future
    ctx = PolicyContext(turn=10, similarity={"x": 0.4})
    r = math.exp(-0.1 * 8) * (1 + 0.3 * 2)
    p = 0.3 + 0.5 * 0.4 + 0.3 * math.exp(-0.2 * (10 - 6))
    assert get_policy("rwoe").priority(c, ctx) == pytest.approx(p * (r + 1.0))
    twice = ck("x", 200, T, turn=2, refs=[6, 4, 6])  # S_i is a set of turns
    assert get_policy("rwoe").priority(twice, ctx) == get_policy("rwoe").priority(c, ctx)
    user = ck("u", 200, S, turn=2, origin="user")
    assert get_policy("rwoe").priority(user, ctx) == pytest.approx(0.6 * (math.exp(-0.08) + 10))
    fixed = get_policy("rwoe", recon_cost={"tool": 0}, recon_fixed={"tool": 50}, r0=0)
    assert fixed.priority(ck("t", 200, S, turn=10), ctx) == pytest.approx(0.6 * 50 / 200)


def test_rwoe_cache_weight_evicts_nearer_the_tail_so_the_cached_prefix_lasts() -> None:
    """Two tool results a few turns apart: by the paper's EFV the older goes first, and
    the provider's cached prefix breaks right after the system prompt. With
    `cache_weight` an earlier chunk's EFV is worth more (× 1 + β · (1 − i / n)): the
    newer goes first and the prefix up to it holds. β = 0 is the paper's order."""
    chunks = [ck("system", 50, P, 0, 0), ck("early", 400, T, 1, 1), ck("late", 400, T, 4, 8),
              ck("latest", 50, P, 5, 9)]
    ctx = PolicyContext(turn=5)
    assert ids(get_policy("rwoe").select(chunks, 400, ctx)) == ["early"]
    assert ids(get_policy("rwoe", cache_weight=0).select(chunks, 400, ctx)) == ["early"]
    weighted = get_policy("rwoe", cache_weight=2.0)
    assert ids(weighted.select(chunks, 400, ctx)) == ["late"]
    plain, late = get_policy("rwoe").priority(chunks[2], ctx), weighted.rank(chunks, ctx)
    n = 9  # one past the last evictable message (the PERMANENT tail is not ranked)
    assert [r.score for r in late if r.chunk.id == "late"] == [
        pytest.approx(plain * (1 + 2.0 * (1 - 8 / n)))]


def test_rwoe_cache_weight_scores_a_chunk_alike_in_any_subset_given_the_horizon() -> None:
    """The weight needs n; `ctx.horizon` (the pipeline's: one past the last evictable
    message) fixes it, so the restore pass, ranking only evicted chunks, and `priority`,
    scoring one, agree with the full ranking. Without it n comes from the chunks given."""
    chunks = [ck("a", 400, T, 1, 1), ck("b", 400, T, 2, 4), ck("c", 400, T, 3, 7)]
    policy, ctx = get_policy("rwoe", cache_weight=2.0), PolicyContext(turn=5, horizon=10)
    whole = {r.chunk.id: r.score for r in policy.rank(chunks, ctx)}
    assert {r.chunk.id: r.score for r in policy.rank(chunks[:2], ctx)} == {
        k: whole[k] for k in "ab"}
    assert [policy.priority(c, ctx) for c in chunks] == [whole[k] for k in "abc"]
    plain = get_policy("rwoe").priority(chunks[1], ctx)
    assert whole["b"] == pytest.approx(plain * (1 + 2 * (1 - 4 / 10)))
    free = PolicyContext(turn=5)  # n = 5: one past the only chunk given
    assert policy.priority(chunks[1], free) == pytest.approx(plain * (1 + 2 * (1 - 4 / 5)))


def test_rwoe_probability_is_clamped_to_0_1() -> None:
    ctx = PolicyContext(turn=10, similarity={"s": 0.9, "e": -0.5})
    policy = get_policy("rwoe")
    assert policy.priority(ck("s", klass=S, turn=10, refs=[10]), ctx) == pytest.approx(1.3 + 1)
    assert policy.priority(ck("e", klass=E, turn=9), ctx) == 0.0


def test_rwoe_drops_failed_tool_result_before_structural_fact() -> None:
    chunks = [ck("goal", 50, P, 0), ck("fact", 400, S, 3, 1), ck("traceback", 400, E, 3, 2),
              ck("latest", 50, P, 5, 3)]
    ctx = PolicyContext(turn=5)
    assert ids(get_policy("rwoe").select(chunks, 400, ctx)) == ["traceback"]
    assert ids(get_policy("rwoe").select(chunks, 10**6, ctx)) == ["traceback", "fact"]


def test_rwoe_orders_by_class_decay_refs_and_origin() -> None:
    chunks = [ck("structural", klass=S, turn=1), ck("ephemeral", klass=E, turn=9),
              ck("transient-old", turn=1), ck("transient-new", turn=9, index=1),
              ck("transient-cited", turn=1, index=1, refs=[8, 9]),
              ck("user", klass=T, turn=1, index=2, origin="user")]
    ranked = get_policy("rwoe").rank(chunks, PolicyContext(turn=10))
    assert ids(ranked) == ["ephemeral", "transient-old", "transient-new", "transient-cited",
                           "structural", "user"]
    flat = get_policy("rwoe", lambdas={"TRANSIENT": 0})
    scores = {r.chunk.id: r.score for r in flat.rank(chunks, PolicyContext(turn=10))}
    assert scores["transient-old"] == scores["transient-new"]


def test_rwoe_r_is_seeded_noise_on_rwoe() -> None:
    chunks = mixed()
    rwoe_r = get_policy("rwoe-r")
    first = rwoe_r.rank(chunks, ctx_for(chunks, seed=7))
    assert first == rwoe_r.rank(chunks, ctx_for(chunks, seed=7))
    assert first != rwoe_r.rank(chunks, ctx_for(chunks, seed=8))
    plain = {c.id: get_policy("rwoe").priority(c, ctx_for(chunks)) for c in chunks}
    evictable = [c for c in chunks if c.klass is not P]
    noise = dict(zip([c.id for c in evictable], normals(random.Random(7), len(evictable)),
                     strict=True))
    for r in first:
        assert r.score == pytest.approx(plain[r.chunk.id] + 0.1 * noise[r.chunk.id])
    calm = get_policy("rwoe-r", epsilon=0.0, alpha=0.5)
    assert calm.rank(chunks, ctx_for(chunks)) == get_policy("rwoe", alpha=0.5).rank(
        chunks, ctx_for(chunks))


def test_normals_are_standard_normal() -> None:
    draws = normals(random.Random(0), 20001)
    assert len(draws) == 20001
    assert abs(statistics.fmean(draws)) < 0.03 and abs(statistics.pstdev(draws) - 1) < 0.03
