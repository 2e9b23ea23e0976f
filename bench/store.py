"""Store benchmark: recall latency at 10k/100k passages, embed throughput, offload latency,
and whether identifier matching or LanceDB full-text search (BM25) helps recall.

    .venv/bin/python -m bench.store [--quick]

Recall latency goes through `LanceStore.recall()` with the query vector already cached
(the search alone); the uncached query embedding is timed on its own. The 10k/100k
passages are synthetic rows written straight into the `passages` table, laid out as
real offloads lay them out (a chunk's passages contiguous, sessions interleaved by chunk).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import proxy  # noqa: F401  (offline defaults first)
from store import schema as S
from store.base import EvictedChunk, RecallQuery
from store.embed import SentenceTransformerEmbedder
from store.lance import LanceStore
from store.split import split_text

DIM, TENANT = 384, "acme"
UNRELATED = ("How do I bake sourdough bread at home?", "What is the capital of Australia?",
             "Write a Python function that reverses a list.",
             "What is the status of my pizza order?")  # shares words with every record


def _pct(ms: list[float]) -> tuple[float, float]:
    ms = sorted(ms)
    return statistics.median(ms), ms[max(0, round(0.95 * len(ms)) - 1)]


def _docs(seed: int, n: int) -> tuple[str, list[str], list[tuple[str, str]]]:
    """A reservations JSON tool output, its ids, and (note, paraphrased question) needles."""
    rnd = random.Random(seed)
    notes = [("Travelling with her cat Whiskers in a soft carrier under the seat.",
              "Does the passenger bring an animal on board?"),
             ("Severely allergic to peanuts; needs a nut-free meal.",
              "Does the traveller have any food allergies?"),
             ("Uses a wheelchair, assistance required at the gate.",
              "Does anyone need mobility help at the airport?"),
             ("Flying to her own wedding: any delay is unacceptable to her.",
              "Why would a late arrival be a disaster for this client?")]
    rows: list[dict[str, Any]] = [
        {"reservation_id": "".join(rnd.choices("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789", k=6)),
         "user_id": f"user_{rnd.randrange(10**4)}", "origin": rnd.choice(["JFK", "LAX", "SFO"]),
         "destination": rnd.choice(["MIA", "SEA", "DEN", "ORD"]), "status": "confirmed",
         "cabin": rnd.choice(["economy", "business"]), "flight": f"HAT{rnd.randrange(1000):03d}"}
        for _ in range(n)]
    for (note, _), i in zip(notes, rnd.sample(range(n), len(notes)), strict=False):
        rows[i]["notes"] = note
    return json.dumps(rows, indent=2), [r["reservation_id"] for r in rows], notes


async def embed_throughput(quick: bool) -> list[str]:
    emb = SentenceTransformerEmbedder()  # its own cache: nothing here is embedded twice
    await emb.load()
    out = []
    for size in (96, 256):
        texts = [p.text for p in split_text(_docs(size, 900)[0], size)][: 48 if quick else 160]
        t = time.perf_counter()
        await emb.embed(texts)
        dt = time.perf_counter() - t
        tok = sum(p.tokens for p in split_text("\n".join(texts), 10**6))
        out.append(f"| embed throughput, MiniLM, {size}-token passages | "
                   f"{len(texts) / dt:.1f} passages/s ({tok / dt:,.0f} tokens/s) |")
    qs = [f"what happened to flight HAT{i} yesterday?" for i in range(20 if quick else 60)]
    times = []
    for q in qs:
        t = time.perf_counter()
        await emb.embed([q])
        times.append((time.perf_counter() - t) * 1000)
    p50, p95 = _pct(times)
    out.append(f"| query embedding, uncached (short question) | p50 {p50:.1f} ms, "
               f"p95 {p95:.1f} ms |")
    return out


async def offload_latency(root: Path, quick: bool) -> list[str]:
    store = LanceStore(root / "offload", SentenceTransformerEmbedder(), background=False)
    text = _docs(1, 40)[0]  # ≈ 2.5k tokens, one tool result
    times = []
    for i in range(40 if quick else 200):
        c = EvictedChunk(TENANT, f"s{i % 7}", f"c{i}", i, "tool", "TRANSIENT", 2500, text)
        t = time.perf_counter()
        await store.offload([c])
        times.append((time.perf_counter() - t) * 1000)
    await store.close()
    p50, p95 = _pct(times[5:])
    return [f"| offload one 2.5k-token chunk (durable commit, no embedding) | p50 {p50:.1f} ms, "
            f"p95 {p95:.1f} ms |"]


def _synthetic(start: int, n: int, sessions: int, rng: np.random.Generator) -> pa.Table:
    v = rng.normal(size=(n, DIM)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    idx = range(start, start + n)
    sess = [f"s{(i // 10) % sessions}" for i in idx]  # 10 passages per chunk, contiguous
    cols: dict[str, Any] = {
        "id": [S.hkey("p", str(i)) for i in idx], "chunk_key": [f"k{i // 10}" for i in idx],
        "scope": [S.scope_key(TENANT, s) for s in sess], "tenant_key": [S.tenant_key(TENANT)] * n,
        "tenant": [TENANT] * n, "session": sess, "chunk_id": [f"c{i // 10}" for i in idx],
        "passage_id": [f"c{i // 10}#{i % 10}" for i in idx], "ordinal": [i % 10 for i in idx],
        "turn": [i // 1000 for i in idx], "role": ["tool"] * n, "class": ["TRANSIENT"] * n,
        "text": [f"passage {i} ref R{i:06d} " + "lorem ipsum dolor sit amet " * 12 for i in idx],
        "tokens": [90] * n, "vector": pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), DIM),
        "time": [0.0] * n}
    return pa.table(cols, schema=S.passage_schema(DIM))


async def recall_latency(root: Path, total: int, quick: bool) -> list[str]:
    emb = SentenceTransformerEmbedder()
    store = LanceStore(root / f"recall{total}", emb, background=False)
    await store.offload([EvictedChunk(TENANT, "s0", "seed", 0, "tool", "T", 1, "seed")])
    tbl = await store._passages(DIM)
    rng, sessions = np.random.default_rng(0), 100
    for start in range(0, total, 25_000):
        await tbl.add(_synthetic(start, min(25_000, total - start), sessions, rng))
    await tbl.optimize()
    kinds = {"session (of 100)": {}, "session, query names an id": {"id": True},
             "whole tenant (cross_session)": {"cross_session": True}}
    out = []
    for kind, opt in kinds.items():
        qs = [RecallQuery(TENANT, f"s{i % sessions}", f"what did the tool say about item {i}"
                          + (f" R{rng.integers(total):06d}" if opt.get("id") else ""),
                          frozenset(), 1000, min_similarity=0.0,
                          cross_session=bool(opt.get("cross_session"))) for i in range(10)]
        await emb.embed([q.text for q in qs])  # cached: time the search, not the model
        times = []
        for i in range(40 if quick else 200):
            t = time.perf_counter()
            found = await store.recall(qs[i % len(qs)])
            times.append((time.perf_counter() - t) * 1000)
            assert found, "recall found nothing"
        p50, p95 = _pct(times)
        out.append(f"| recall at {total:,} passages, {kind} | p50 {p50:.1f} ms, "
                   f"p95 {p95:.1f} ms |")
    await store.close()
    return out


async def _bm25_fused(store: LanceStore, q: RecallQuery) -> list[str]:
    """Vector top-k fused with BM25 top-k (LanceDB native FTS) by reciprocal rank, top-k."""
    tbl = await store._passages()
    bm25 = await (await tbl.search(q.text, query_type="fts")).where(
        S.eq("scope", S.scope_key(q.tenant, q.session))).select(["text", "_score"]).limit(
        q.top_k).to_list()
    score: dict[str, float] = {}
    for ranked in ([p.text for p in await store.recall(q)], [r["text"] for r in bm25]):
        for rank, text in enumerate(ranked):
            score[text] = score.get(text, 0.0) + 1 / (60 + rank)
    return sorted(score, key=lambda t: -score[t])[: q.top_k]


async def hybrid_eval(root: Path, quick: bool) -> list[str]:
    """Hit rate (the target record is in what recall returns, top_k 4) per method."""
    from lancedb.index import FTS

    emb = SentenceTransformerEmbedder()
    stores = {h: LanceStore(root / f"hy{h}", emb, hybrid=h) for h in (False, True)}
    cases: list[tuple[str, str, str, str]] = []  # (kind, session, question, must contain)
    for k in range(2 if quick else 5):
        doc, ids, notes = _docs(100 + k, 120)
        for st in stores.values():
            await st.offload([EvictedChunk(TENANT, f"s{k}", f"res{k}", 2, "tool", "T", 1, doc)])
        cases += [("id", f"s{k}", f"Please cancel reservation {rid} for me.", rid)
                  for rid in random.Random(k).sample(ids, 5)]
        cases += [("paraphrase", f"s{k}", q, note) for note, q in notes]
        cases += [("unrelated", f"s{k}", q, "") for q in UNRELATED]
    for st in stores.values():
        await st.flush()
    await (await stores[False]._passages()).create_index("text", config=FTS(stem=False))
    hits: dict[tuple[str, str], list[bool]] = {}
    for kind, session, question, needle in cases:
        q = RecallQuery(TENANT, session, question, frozenset(), 4000, top_k=4,
                        min_similarity=0.2)
        got = {"vector only": [p.text for p in await stores[False].recall(q)],
               "vector + id match (default)": [p.text for p in await stores[True].recall(q)]}
        got["vector + BM25 (FTS), RRF"] = await _bm25_fused(stores[False], q)
        for method, texts in got.items():
            ok = any(needle in t for t in texts) if needle else not texts
            hits.setdefault((method, kind), []).append(ok)
    for st in stores.values():
        await st.close()
    return [f"| {'nothing recalled' if kind == 'unrelated' else 'needle recalled'}, {kind} "
            f"questions, {method} | {sum(v) / len(v):.0%} ({sum(v)}/{len(v)}) |"
            for (method, kind), v in sorted(hits.items(), key=lambda kv: kv[0][1])]


async def run(quick: bool = False) -> str:
    with tempfile.TemporaryDirectory(prefix="ctxwarden-bench-") as tmp:
        root = Path(tmp)
        rows = await embed_throughput(quick)
        rows += await offload_latency(root, quick)
        for total in (10_000, 100_000):
            rows += await recall_latency(root, total, quick)
        rows += await hybrid_eval(root, quick)
    return "\n".join(["| store (2 CPU cores) | result |", "|---|---|", *rows])


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    print(asyncio.run(run(ap.parse_args().quick)))
