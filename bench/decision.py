"""Eviction decision cost: chunking (warm caches) and fitting at 1,000 chunks."""

from __future__ import annotations

import random
from functools import partial

import proxy  # noqa: F401
from bench.harness import median_ms
from bench.overhead import payload
from policies import PolicyContext, available, get_policy
from proxy.analysis import MessageAnalyzer
from proxy.chunking import Chunker
from proxy.config import ClassificationSettings
from proxy.fitting import Fitter
from proxy.tokens import TokenCounter, encoding_for


def run(quick: bool = False) -> tuple[str, dict[str, float]]:
    reps = 20 if quick else 100
    msgs = payload(1000, 870)
    counter = TokenCounter(encoding_for("gpt-4o"))
    chunker = Chunker(MessageAnalyzer(counter), ClassificationSettings())
    fitter = Fitter(counter)
    conv = chunker.split(msgs)  # warms the per-message caches
    total = fitter.cost(conv, set())
    budget = total // 4
    figures: dict[str, float] = {"chunk_warm_ms": median_ms(lambda: chunker.split(msgs), reps)}
    rows = [f"| chunk + classify 1,000 messages (warm caches) | {figures['chunk_warm_ms']:.2f} |"]
    chunks = [p.chunk for p in conv.parts]
    for name in available():
        policy = get_policy(name)
        ctx = PolicyContext(turn=conv.turn, rng=random.Random(1))
        rank = median_ms(partial(policy.rank, chunks, ctx), reps)
        fit = median_ms(partial(fitter.fit, conv, set(), budget, int(budget * 0.85), policy,
                                 ctx), reps)
        figures[f"rank_{name}_ms"], figures[f"fit_{name}_ms"] = rank, fit
        rows.append(f"| `{name}`: rank 1,000 chunks / full fit to 25 % | {rank:.3f} / {fit:.2f} |")
    table = "| step | median ms |\n|---|---|\n" + "\n".join(rows)
    return table, figures


if __name__ == "__main__":
    print(run()[0])
