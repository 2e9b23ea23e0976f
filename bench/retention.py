"""Needle retention: is a fact from long ago in the request when the user asks for it?

Generated coding-agent sessions (bench/sessions.py) whose history is 3–10× the window hold
needles ("the deployment ticket for src/mod_12.py is QUEUE-48213") in tool outputs. Each
session is replayed request by request through the real pipeline over a real LanceStore
and MiniLM; then every needle's question is asked as the next user message, and the
needle counts as retained if its key is anywhere in the forwarded request (still in
context, or recalled). Beside it: truncation (oldest first, no store, no recall) and RWOE
without recall, on the same sessions.

    .venv/bin/python -m bench.retention [--quick]
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import orjson

import proxy  # noqa: F401  (offline defaults)
from bench.replay import route
from bench.sessions import Session, generate, requests_of
from proxy.config import Settings
from proxy.pipeline import Pipeline
from store.base import MemoryStore, Store
from store.embed import get_embedder
from store.lance import LanceStore

WINDOW = 4000


@dataclass
class Retention:
    needles: int = 0
    retained: int = 0
    recalled: int = 0  # retained only because recall put it back
    probe_ms: list[float] = field(default_factory=list)

    @property
    def share(self) -> float:
        return self.retained / self.needles if self.needles else 0.0


def sessions(quick: bool) -> list[Session]:
    rng = random.Random(7)
    n = 4 if quick else 12
    out = []
    for i in range(n):
        # generate() overshoots its target by ~22 %: this spans 3× … 10× the window
        ratio = 2.5 + (5.7 * i) / max(1, n - 1)
        out.append(generate(rng, int(WINDOW * ratio), needle_every=5))
    return out


async def run_policy(data: list[Session], policy: str, recall: bool,
                     store: Store) -> Retention:
    r = route(WINDOW, policy=policy, recall=recall)
    pipeline = Pipeline(Settings(routes=[r]), store)
    res = Retention()
    for k, s in enumerate(data):
        sid = f"gen-{policy}-{recall}-{k}"
        for msgs in requests_of(s.messages):
            await pipeline.prepare({"model": "x", "messages": msgs}, r, "bench", sid)
        if isinstance(store, LanceStore):
            await store.flush()  # a real session has seconds between turns; the worker ~1
        for needle in s.needles:
            probe = [*s.messages, {"role": "user", "content": needle.question}]
            t0 = time.perf_counter()
            prepared = await pipeline.prepare({"model": "x", "messages": probe}, r, "bench",
                                              sid)
            res.probe_ms.append((time.perf_counter() - t0) * 1000)
            res.needles += 1
            sent = prepared.body["messages"]
            if needle.key.encode() in orjson.dumps(sent):
                res.retained += 1
                res.recalled += needle.key in str(sent[-1].get("content"))
    return res


async def run(quick: bool = False) -> str:
    data = sessions(quick)
    history = [sum(len(orjson.dumps(m)) for m in s.messages) // 4 for s in data]
    rows = []
    with tempfile.TemporaryDirectory(prefix="ctxw-retention-") as tmp:
        store = LanceStore(Path(tmp) / "db", get_embedder("sentence-transformers",
                                                          "all-MiniLM-L6-v2"))
        try:
            for label, policy, recall, st in (
                    ("truncate (oldest first, no recall)", "truncate", False, MemoryStore()),
                    ("rwoe, recall off", "rwoe", False, MemoryStore()),
                    ("rwoe + recall (LanceDB, MiniLM, hybrid ids)", "rwoe", True, store)):
                res = await run_policy(data, policy, recall, st)
                rows.append((label, res))
        finally:
            await store.close()
    needles = rows[0][1].needles
    lines = [f"{len(data)} generated sessions, history {min(history):,}–{max(history):,} "
             f"tokens ({min(history) / WINDOW:.1f}–{max(history) / WINDOW:.1f}× a {WINDOW:,}-"
             f"token window), {needles} needles asked after the last turn.", "",
             "| policy | needles retained | by recall | probe request p50 (ms) |",
             "|---|---|---|---|"]
    for label, res in rows:
        lines.append(f"| {label} | **{res.share:.1%}** ({res.retained}/{res.needles}) | "
                     f"{res.recalled} | {statistics.median(res.probe_ms):.1f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(asyncio.run(run(quick="--quick" in sys.argv)))
