"""Which lexical index serves relevance on the request path (issue 10, item 1).

Per agent turn the index must take the turn's new chunks and answer one query over every
passage of the session, with nothing waiting in the background. Measured per turn on
tau-bench airline histories (the real text of tool outputs and messages, cut into the
same ~900-character passages), at several session sizes:

- `ctxwarden` — store/relevance.py: an incremental inverted index in Python;
- `bm25s` — sparse-matrix BM25; its index is built whole, so a turn rebuilds it;
- `tantivy` — Rust engine: add the new documents, commit, reload the searcher, search;
- `lancedb-fts` — LanceDB's full-text index on a table in a temp dir: add rows, rebuild
  the FTS index (new rows are not searchable fast until then), search.

Candidates not installed are skipped (requirements.lock pins bm25s and tantivy).

    .venv/bin/python -m bench.relevance [--quick]
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness import median_ms
from store.relevance import RelevanceIndex
from store.terms import passages

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "tau-bench-gpt-4o-airline.json"
QUERIES = ["which reservation was the trip to Denver", "cancel the flight booked for May",
           "what is the user's membership level", "baggage allowance for economy"]


def corpus(n_passages: int) -> list[str]:
    """Passages from tau-bench messages, in conversation order, until `n_passages`."""
    trajs = json.loads(DATA.read_text())
    out: list[str] = []
    for t in trajs:
        for m in t["traj"]:
            text = m.get("content") or json.dumps(m.get("tool_calls") or "")
            out += passages(str(text))
            if len(out) >= n_passages:
                return out[:n_passages]
    return out


def ours(docs: list[str], new: list[str], q: str) -> Callable[[], Any]:
    idx = RelevanceIndex()
    for i, d in enumerate(docs):
        idx.add(f"d{i}", d)
    turns = iter(range(1_000_000))

    def turn() -> Any:
        t = next(turns)
        for j, d in enumerate(new):
            idx.add(f"n{t}-{j}", d)
        return idx.search(q)
    return turn


def ours_query_only(docs: list[str], q: str) -> Callable[[], Any]:
    idx = RelevanceIndex()
    for i, d in enumerate(docs):
        idx.add(f"d{i}", d)
    return lambda: idx.search(q)


def bm25s_turn(docs: list[str], new: list[str], q: str) -> Callable[[], Any] | None:
    try:
        import bm25s
    except ImportError:
        return None

    def turn() -> Any:
        retriever = bm25s.BM25()
        retriever.index(bm25s.tokenize(docs + new, show_progress=False), show_progress=False)
        return retriever.retrieve(bm25s.tokenize([q], show_progress=False), k=10,
                                  show_progress=False)
    return turn


def tantivy_turn(docs: list[str], new: list[str], q: str) -> Callable[[], Any] | None:
    try:
        import tantivy
    except ImportError:
        return None
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("body", stored=False)
    schema = sb.build()
    index = tantivy.Index(schema)
    writer = index.writer(heap_size=15_000_000, num_threads=1)
    for d in docs:
        writer.add_document(tantivy.Document(body=d))
    writer.commit()
    query = index.parse_query(q.replace("'", " "), ["body"])

    def turn() -> Any:
        for d in new:
            writer.add_document(tantivy.Document(body=d))
        writer.commit()
        index.reload()
        return index.searcher().search(query, 10).hits
    return turn


def lancedb_turn(docs: list[str], new: list[str], q: str, tmp: str) -> Callable[[], Any] | None:
    try:
        import lancedb
    except ImportError:
        return None
    from lancedb.index import FTS

    db = lancedb.connect(tmp)
    tbl = db.create_table("p", data=[{"id": i, "text": d} for i, d in enumerate(docs)],
                          mode="overwrite")
    tbl.create_index("text", config=FTS(), replace=True)
    counter = [len(docs)]

    def turn() -> Any:
        rows = [{"id": counter[0] + j, "text": d} for j, d in enumerate(new)]
        counter[0] += len(new)
        tbl.add(rows)
        tbl.create_index("text", config=FTS(), replace=True)
        return tbl.search(q, query_type="fts").limit(10).to_list()
    return turn


def measure(quick: bool) -> list[tuple[str, int, float | None]]:
    sizes = [100, 300] if quick else [100, 300, 1000]
    repeat = 5 if quick else 15
    out: list[tuple[str, int, float | None]] = []
    pool = corpus(max(sizes) + 8)
    for n in sizes:
        docs, new, q = pool[:n], pool[n:n + 4], QUERIES[n % len(QUERIES)]
        with tempfile.TemporaryDirectory() as tmp:
            cands: dict[str, Callable[[], Any] | None] = {
                "ctxwarden (query only)": ours_query_only(docs, q),
                "ctxwarden (add 4 + query)": ours(docs, new, q),
                "bm25s (rebuild + query)": bm25s_turn(docs, new, q),
                "tantivy (add 4, commit, reload, query)": tantivy_turn(docs, new, q),
                "lancedb-fts (add 4, reindex, query)": lancedb_turn(docs, new, q, tmp),
            }
            for name, fn in cands.items():
                out.append((name, n, None if fn is None else median_ms(fn, repeat)))
    return out


def run(quick: bool = False) -> str:
    rows = measure(quick)
    sizes = sorted({n for _, n, _ in rows})
    names = list(dict.fromkeys(name for name, _, _ in rows))
    lines = ["| per turn, median ms | " + " | ".join(f"{n} passages" for n in sizes) + " |",
             "|---|" + "---:|" * len(sizes)]
    for name in names:
        cells = []
        for n in sizes:
            v = next(v for nm, s, v in rows if nm == name and s == n)
            cells.append("not installed" if v is None else f"{v:.2f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(asyncio.run(asyncio.to_thread(run, "--quick" in sys.argv)))
