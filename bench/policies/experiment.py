"""Experiments: every registered policy, Bélády and the optimum over the same sessions.

Why ratios of totals: a session where the optimum earns little would swing a mean of
per-session ratios; Σ utility(policy) / Σ utility(optimum) weighs each reference once.
The worst single session is kept beside it (`worst_pct_optimum`) so a policy that is good
on average but collapses somewhere still shows. The policy "none" is left out: it never
evicts, so it cannot honour a budget and its utility would not be comparable.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.policies.references import Belady, Informed, optimum
from bench.policies.simulate import simulate
from bench.policies.workload import WorkloadParams, generate
from policies import available, get_policy

KEYS = ("policy", "utility_pct_optimum", "utility_pct_belady", "reconstructions_per_turn",
        "ms_per_turn")
REFERENCES = ("informed", "belady", "optimum")  # yardsticks, not proxy policies
RATIOS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
#: RWOE with a reconstruction cost that does not grow with size (R = 100 tokens for a tool
#: result instead of R = σ), so EFV really is per token: the variant docs/policies.md shows
Spec = tuple[str, str, dict[str, Any]]  # (label, registered name, constructor parameters)
SIZE_AWARE: Spec = ("rwoe-sized", "rwoe",
                    {"recon_cost": {"tool": 0}, "recon_fixed": {"tool": 100}})
VARIANTS: dict[str, Spec] = {SIZE_AWARE[0]: SIZE_AWARE}


def policy_names() -> list[str]:
    return [p for p in available() if p != "none"]


def specs(policies: Sequence[str | Spec] | None = None) -> list[Spec]:
    """Registered policies by name (default: all but "none"), named variants (VARIANTS), or
    explicit (label, name, params) triples."""
    return [p if not isinstance(p, str) else VARIANTS.get(p, (p, p, {}))
            for p in policies or policy_names()]


@dataclass
class Experiment:
    params: WorkloadParams
    sessions: int
    seed: int
    rows: list[dict[str, Any]]  # KEYS exactly: what policies.json holds
    worst_pct_optimum: dict[str, float] = field(default_factory=dict)
    references_per_turn: float = 0.0
    over_budget_turns: int = 0


def run(params: WorkloadParams, sessions: int, seed: int,
        policies: Sequence[str | Spec] | None = None, bar: Any = None) -> Experiment:
    """`sessions` sessions of `params` (session i of `seed`, see workload.generate)."""
    live = {label: get_policy(name, **kw) for label, name, kw in specs(policies)}
    names = list(live)
    utility: dict[str, float] = defaultdict(float)
    recon: dict[str, int] = defaultdict(int)
    times: dict[str, list[float]] = defaultdict(list)
    worst: dict[str, float] = defaultdict(lambda: math.inf)
    refs = over = 0
    for i in range(sessions):
        s = generate(params, seed, i)
        best = optimum(s)
        utility["optimum"] += best.utility
        recon["optimum"] += best.reconstructions
        evictors: dict[str, Any] = {**live, "informed": Informed(s), "belady": Belady(s)}
        for name, ev in evictors.items():
            o = simulate(s, ev, f"{seed}:{i}")
            utility[name] += o.utility
            recon[name] += o.reconstructions
            if name in live:
                times[name] += o.decision_ms
            elif name == "belady":  # PERMANENT alone over B: the same for all, counted once
                over += o.over_budget_turns
            if best.utility > 0:
                worst[name] = min(worst[name], 100 * o.utility / best.utility)
        refs += best.references
        if bar is not None:
            bar.update()
    turns = max(1, sessions * params.turns)
    rows = []
    for name in [*names, *REFERENCES]:
        rows.append({
            "policy": name,
            "utility_pct_optimum": _pct(utility[name], utility["optimum"]),
            "utility_pct_belady": _pct(utility[name], utility["belady"]),
            "reconstructions_per_turn": round(recon[name] / turns, 3),
            "ms_per_turn": round(statistics.median(times[name]), 4) if times[name] else None,
        })
    return Experiment(params, sessions, seed, rows,
                      {k: round(v, 2) for k, v in worst.items() if math.isfinite(v)},
                      round(refs / turns, 3), over)


def _pct(a: float, b: float) -> float:
    return round(100 * a / b, 2) if b > 0 else 100.0


def sweep(params: WorkloadParams, sessions: int, seed: int, ratios: tuple[float, ...] = RATIOS,
          policies: Sequence[str | Spec] | None = None, bar: Any = None,
          ) -> dict[str, list[float]]:
    """Utility as % of the optimum per policy (and Bélády) at each budget ratio."""
    out: dict[str, list[float]] = defaultdict(list)
    for r in ratios:
        exp = run(params.with_(budget_ratio=r), sessions, seed, policies, bar=bar)
        for row in exp.rows:
            if row["policy"] != "optimum":
                out[row["policy"]].append(row["utility_pct_optimum"])
    return dict(out)
