"""Decay: Mnemex's temporal decay score (seed "Temporal Decay Scoring Algorithm", v0.2.0),

    score = n_use^β · f(Δt) · s          Δt = t − last_used,  lowest score evicted first

with n_use = `chunk.uses` (1 + references), s = `chunk.strength` and f one of the seed's
three models:

- "power_law" (default): f = (1 + Δt/t0)^−α, t0 = H / (2^{1/α} − 1), so f(H) = ½;
- "exponential": f = e^{−λΔt}, λ = `lam`, else ln 2 / H;
- "two_component": f = w·e^{−λ_f Δt} + (1 − w)·e^{−λ_s Δt}.

Mnemex counts seconds; in the proxy Δt counts turns, so H (`half_life`) is in turns
(default 10). The other defaults are Mnemex's: α = 1.1, β = 0.6, and for two_component
w = 0.7 with fast and slow half-lives at Mnemex's ratios to H (12 h and 7 d against 3 d:
H/6 and 7H/3). `mnemex_score` is the same formula as a pure function in any time unit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import exp, log
from typing import ClassVar

from policies import register
from policies._common import BatchPolicy, number
from policies.base import Chunk, PolicyContext

LN2 = log(2)
HALF_LIFE = 10.0
MODELS = {"power_law": ("alpha",), "exponential": ("lam",),
          "two_component": ("lam_fast", "lam_slow", "weight")}


def decay_curve(model: str = "power_law", half_life: float | None = None,
                alpha: float | None = None, lam: float | None = None,
                lam_fast: float | None = None, lam_slow: float | None = None,
                weight: float | None = None) -> Callable[[float], float]:
    """f(Δt) of one model; a parameter of another model is a ValueError naming it."""
    if model not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)}, got {model!r}")
    given = {"alpha": alpha, "lam": lam, "lam_fast": lam_fast, "lam_slow": lam_slow,
             "weight": weight}
    for key, value in given.items():
        if value is not None and key not in MODELS[model]:
            owner = next(m for m, keys in MODELS.items() if key in keys)
            raise ValueError(f"{key} applies only to model={owner!r}, not {model!r}")
    h = number("half_life", HALF_LIFE if half_life is None else half_life, lo=0, lo_open=True)
    if model == "power_law":
        a = number("alpha", 1.1 if alpha is None else alpha, lo=0.01)
        t0 = h / (2.0 ** (1.0 / a) - 1.0)
        return lambda dt: (1.0 + dt / t0) ** -a
    if model == "exponential":
        if lam is not None and half_life is not None:
            raise ValueError("lam and half_life both set: give one of them")
        k = LN2 / h if lam is None else number("lam", lam, lo=0)
        return lambda dt: exp(-k * dt)
    fast = LN2 / (h / 6) if lam_fast is None else number("lam_fast", lam_fast, lo=0)
    slow = LN2 / (h * 7 / 3) if lam_slow is None else number("lam_slow", lam_slow, lo=0)
    w = 0.7 if weight is None else number("weight", weight, lo=0, hi=1)
    return lambda dt: w * exp(-fast * dt) + (1.0 - w) * exp(-slow * dt)


def mnemex_score(n_use: float, dt: float, strength: float = 1.0, beta: float = 0.6,
                 model: str = "power_law", half_life: float | None = None,
                 alpha: float | None = None, lam: float | None = None,
                 lam_fast: float | None = None, lam_slow: float | None = None,
                 weight: float | None = None) -> float:
    """n_use^β · f(Δt) · s, Δt in the unit of `half_life` / `lam` (seconds in the seed)."""
    f = decay_curve(model, half_life, alpha, lam, lam_fast, lam_slow, weight)
    use: float = float(n_use) ** number("beta", beta, lo=0)
    return use * f(max(0.0, dt)) * strength


@register
class Decay(BatchPolicy):
    """Score = Mnemex decay score in turns; lowest first."""

    name = "decay"
    reason: ClassVar[str] = "lowest decayed use score"

    def __init__(self, model: str = "power_law", beta: float = 0.6,
                 half_life: float | None = None, alpha: float | None = None,
                 lam: float | None = None, lam_fast: float | None = None,
                 lam_slow: float | None = None, weight: float | None = None) -> None:
        self.model = model
        self.beta = number("beta", beta, lo=0)
        self.curve = decay_curve(model, half_life, alpha, lam, lam_fast, lam_slow, weight)

    def scores(self, chunks: Sequence[Chunk], ctx: PolicyContext) -> list[float]:
        t, beta, f = ctx.turn, self.beta, self.curve
        decayed: dict[float, float] = {}  # f(Δt) per distinct Δt: turns repeat a lot
        out: list[float] = []
        for c in chunks:
            refs = c.refs
            if refs:
                dt, use = t - max(refs), (1.0 + len(refs)) ** beta
            else:
                dt, use = t - c.turn, 1.0
            if dt < 0:
                dt = 0
            fdt = decayed.get(dt)
            if fdt is None:
                fdt = decayed[dt] = f(dt)
            out.append(use * fdt * c.strength)
        return out
