"""Calibrate recall's gate (`recall.min_relevance`) on the generated agent sessions.

    .venv/bin/python -m bench.recall_gate 0.30 0.25 0.20
    .venv/bin/python -m bench.recall_gate 0.25 --question 0.25 0.15 0.10 0.05

In process (no HTTP, no embedder: the lexical path alone), back to back, the full plan's
sessions of bench/agentloop.py. Per threshold: facts kept by kind (the answer token in
the forwarded request), how often a user message that asks about a fact gets a fresh
recall and how often one that asks nothing does (the false alarms), turns that carry a
recall block, and the mean cache-prefix ratio. docs/design-notes.md quotes its table.
"""

from __future__ import annotations

import argparse
import asyncio
from collections import Counter
from typing import Any

import orjson

import proxy  # noqa: F401  (offline defaults)
from bench import agentloop
from bench.replay import Meter
from proxy.config import Settings
from proxy.errors import ProxyError
from proxy.pipeline import Pipeline
from store.base import MemoryStore


def settings(min_relevance: float, question: float | None = None) -> Settings:
    q = min_relevance if question is None else question
    return Settings(store={"path": ":memory:"}, routes=[{
        "name": "a", "model": "a-*", "context_window": agentloop.WINDOW,
        "max_output_tokens": agentloop.MAX_OUT,
        "recall": {"min_relevance": min_relevance, "question_min_relevance": q},
        "upstream": {"model": "openai/gpt-4o", "api_base": "http://127.0.0.1:9/v1",
                     "api_key": "unused"}}])


async def measure(w: agentloop.Workload, st: Settings) -> dict[str, Any]:
    """Every back-to-back session of `w` through `Pipeline.prepare` on `st`'s first route:
    facts asked and kept by kind, recalls on questions and on other user turns, turns
    carrying a block, and the mean cache-prefix ratio."""
    pipeline = Pipeline(st, MemoryStore())
    c: Counter[str] = Counter()
    ratios: list[float] = []
    for i, s in enumerate(w.b2b):
        questions = s.question_requests()
        for k in range(2, len(s.messages) + 1):
            last = s.messages[k - 1]["role"]
            if last not in ("user", "tool") or (k < len(s.messages)
                                                and s.messages[k]["role"] == "tool"):
                continue  # the agent calls the model after a user message or all results
            body = {"model": "a-1", "messages": s.messages[:k], "tools": s.tools}
            try:
                prep = await pipeline.prepare(body, st.routes[0], "bench", f"s{i}")
            except ProxyError:
                c["refused"] += 1
                continue
            c["turns"] += 1
            c["carry"] += prep.recalled > 0
            ratios.append(prep.prefix_ratio)
            fact = questions.get(k)
            fresh = any(e.action == "recall" for e in prep.events)
            if last == "user":
                c[("ask" if fact else "other") + ("_recall" if fresh else "")] += 1
            if fact is not None:
                c["asked_" + fact.kind] += 1
                c["kept_" + fact.kind] += fact.answer in orjson.dumps(
                    prep.body["messages"]).decode()
    await pipeline.close()
    return {"counts": c, "prefix": sum(ratios) / max(1, len(ratios))}


def row(min_relevance: float, question: float, r: dict[str, Any]) -> str:
    c: Counter[str] = r["counts"]
    kinds = ("tool", "user", "constraint")
    kept = sum(c["kept_" + k] for k in kinds)
    asked = sum(c["asked_" + k] for k in kinds)
    others = c["other"] + c["other_recall"]
    asks = c["ask"] + c["ask_recall"]
    return (f"| {min_relevance:.2f} | {question:.2f} | {kept / asked:.2f} | "
            + " / ".join(f"{c['kept_' + k]}" for k in kinds) + f" of {c['asked_tool']} | "
            f"{c['ask_recall']} of {asks} | {c['other_recall']} of {others} | "
            f"{c['carry'] / c['turns']:.2f} | {r['prefix']:.3f} |")


async def main(thresholds: list[float], questions: list[float] | None) -> None:
    w = agentloop.workload(agentloop.FULL, Meter())
    print("| min_relevance | question_min_relevance | facts kept | tool / user / constraint "
          "| questions that recall | other user turns that recall | turns carrying recall "
          "| prefix ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for t in thresholds:
        for q in questions or [t]:
            print(row(t, q, await measure(w, settings(t, q))), flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("thresholds", type=float, nargs="+", help="min_relevance values")
    ap.add_argument("--question", type=float, nargs="+",
                    help="question_min_relevance values (default: each min_relevance)")
    a = ap.parse_args()
    asyncio.run(main(a.thresholds, a.question))
