"""`LanceStore`: evicted chunks, passages with vectors and the decision log in LanceDB.

Never forget, fast hot path: `offload` commits the raw chunks (table `chunks`) and
returns; the background `EmbedWorker` splits, embeds and writes `passages` later. Recall
sees embedded passages only (plus, with `hybrid`, exact identifier matches among them).
Every write is a `merge_insert` on a content id, so a resent history or a retried request
writes nothing twice. The same code runs on a directory or an object-store URI
(`s3://…`, `gs://…`, `az://…`); only a local path gets its directory created.

Failure: any LanceDB error while writing surfaces as `StoreUnavailable` (503
`store_unavailable`); a failed commit leaves the tables as they were. Recall degrades to
nothing (the request is still valid without it) and logs why.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import lancedb
import pyarrow as pa
import structlog

from store import schema as S
from store.base import Event, EvictedChunk, Passage, RecallQuery, latest_evicted, summarise
from store.commits import GroupCommit
from store.embed import Embedder
from store.errors import StoreUnavailable, unavailable
from store.search import fill, id_matches, id_terms, nearest
from store.worker import EmbedWorker, Row, compact, ensure_indexes, unembedded, warm_up

log = structlog.get_logger("ctxwarden.store")
OPTIMIZE_EVERY = 64  # commits per table between compactions (LanceDB: "> 20 operations")


def _unavailable(what: str, exc: BaseException) -> StoreUnavailable:
    log.error("store_unavailable", op=what, error=type(exc).__name__, detail=str(exc)[:300])
    return unavailable(f"The context store cannot {what} right now ({type(exc).__name__});"
                            " nothing was dropped from the conversation.")


class LanceStore:
    def __init__(self, uri: str | Path, embedder: Embedder, *, passage_tokens: int = 96,
                 hybrid: bool = True, storage_options: dict[str, str] | None = None,
                 read_consistency_interval: timedelta | None = None,
                 max_pending: int = 10_000, background: bool = True) -> None:
        self.uri = str(uri)
        self.embedder = embedder
        self.passage_tokens = passage_tokens
        self.hybrid = hybrid
        self.background = background  # False: a reader (ctxwarden log), never embeds
        self._storage_options = storage_options
        self._consistency = read_consistency_interval
        self._db: Any = None
        self._tables: dict[str, Any] = {}
        self._commits: dict[str, int] = {}
        self._open_lock = asyncio.Lock()
        self._passages_lock = asyncio.Lock()
        self._dim: int | None = None  # the stored vectors' size, once the table exists
        self._warm: asyncio.Task[None] | None = None
        self._group = GroupCommit(self._commit)
        self.worker = EmbedWorker(self._embed_chunks, self._unembedded, max_pending=max_pending)

    # -- opening ---------------------------------------------------------------------------
    async def _ready(self) -> None:
        if self._db is not None:
            return
        async with self._open_lock:
            if self._db is not None:
                return
            try:
                if "://" not in self.uri or self.uri.startswith("file://"):
                    Path(self.uri.removeprefix("file://")).mkdir(parents=True, exist_ok=True)
                db = await lancedb.connect_async(self.uri, storage_options=self._storage_options,
                                                 read_consistency_interval=self._consistency)
                for name, sch in ((S.CHUNKS, S.CHUNK_SCHEMA), (S.EVENTS, S.EVENT_SCHEMA)):
                    self._tables[name] = await db.create_table(name, schema=sch, exist_ok=True)
                    await ensure_indexes(self._tables[name], name, S.INDEXED[name])
                self._db = db
                await self._passages()
            except Exception as exc:
                self._db = None
                raise _unavailable("open", exc) from exc
            if self.background:
                self.worker.start()
                self._warm = asyncio.get_running_loop().create_task(warm_up(self.embedder))

    async def _passages(self, dim: int | None = None) -> Any:
        """The passages table; created (by the worker) once the vector size is known."""
        tbl = self._tables.get(S.PASSAGES)
        if tbl is not None:
            return tbl
        async with self._passages_lock:  # recall and the worker may both get here first
            return await self._open_passages(dim)

    async def _open_passages(self, dim: int | None) -> Any:
        tbl = self._tables.get(S.PASSAGES)
        if tbl is not None:
            return tbl
        try:
            tbl = await self._db.open_table(S.PASSAGES)
        except ValueError:  # not created yet
            if dim is None:
                return None
            tbl = await self._db.create_table(S.PASSAGES, schema=S.passage_schema(dim),
                                              exist_ok=True)
        self._dim = (await tbl.schema()).field("vector").type.list_size
        await ensure_indexes(tbl, S.PASSAGES, S.INDEXED[S.PASSAGES])
        self._tables[S.PASSAGES] = tbl
        return tbl

    async def _merge(self, name: str, rows: list[dict[str, Any]], sch: pa.Schema) -> None:
        await self._group.merge(name, rows, sch)  # concurrent writes share one commit

    async def _commit(self, name: str, rows: list[dict[str, Any]], sch: pa.Schema) -> None:
        tbl = self._tables[name]
        data = pa.Table.from_pylist(rows, schema=sch)
        await tbl.merge_insert("id").when_not_matched_insert_all().execute(data)
        self._commits[name] = self._commits.get(name, 0) + 1

    # -- the Store protocol ----------------------------------------------------------------
    async def offload(self, chunks: Sequence[EvictedChunk]) -> None:
        """Durable when it returns (committed); embedding happens later, in the worker."""
        if not chunks:
            return
        await self._ready()
        rows = S.chunk_rows(chunks)
        try:
            await self._merge(S.CHUNKS, rows, S.CHUNK_SCHEMA)
        except Exception as exc:
            raise _unavailable("store evicted chunks", exc) from exc
        self.worker.submit(rows)

    async def log(self, events: Sequence[Event]) -> None:
        if not events:
            return
        await self._ready()
        try:
            await self._merge(S.EVENTS, S.event_rows(events), S.EVENT_SCHEMA)
        except Exception as exc:
            raise _unavailable("log decisions", exc) from exc

    async def recall(self, query: RecallQuery) -> list[Passage]:
        if query.budget_tokens <= 0 or query.top_k <= 0 or not query.text.strip():
            return []
        try:
            await self._ready()
            tbl = await self._passages()
            if tbl is None:
                return []
            vec = (await self.embedder.embed([query.text]))[0]
            where = (S.eq("tenant_key", S.tenant_key(query.tenant)) if query.cross_session
                     else S.eq("scope", S.scope_key(query.tenant, query.session)))
            cands = await nearest(tbl, vec, where, query)
            terms = id_terms(query.text) if self.hybrid else []
            if terms:
                cands += await id_matches(tbl, vec, where, terms, query)
        except Exception as exc:
            log.warning("recall_failed", error=type(exc).__name__, detail=str(exc)[:300])
            return []
        return fill(cands, query)

    async def evicted_ids(self, tenant: str, session: str) -> set[str]:
        """Chunks whose latest evict/restore event is an evict: sticky across restarts."""
        rows = await self._rows(S.EVENTS, S.eq("scope", S.scope_key(tenant, session))
                                + " AND action IN ('evict', 'restore')",
                                ["chunk_id", "action", "turn", "time"], "read evictions")
        return latest_evicted((r["turn"], r["time"], r["chunk_id"], r["action"]) for r in rows)

    async def events(self, tenant: str, session: str) -> list[Event]:
        rows = await self._rows(S.EVENTS, S.eq("scope", S.scope_key(tenant, session)), None,
                                "read events")
        return [S.row_event(r) for r in sorted(rows, key=lambda r: (r["turn"], r["time"]))]

    async def sessions(self, tenant: str | None = None) -> list[dict[str, Any]]:
        where = S.eq("tenant_key", S.tenant_key(tenant)) if tenant is not None else None
        rows = await self._rows(S.EVENTS, where, ["tenant", "session", "turn", "time", "action",
                                                  "tokens"], "list sessions")
        return summarise(rows)

    async def fetch(self, tenant: str, session: str,
                    chunk_ids: Sequence[str]) -> list[EvictedChunk]:
        """The original text of offloaded chunks (exact, not re-rendered passages)."""
        keys = [S.chunk_key(tenant, session, c) for c in dict.fromkeys(chunk_ids)]
        if not keys:
            return []
        rows = await self._rows(S.CHUNKS, "id IN (" + ", ".join(f"'{k}'" for k in keys) + ")",
                                None, "read chunks")
        order = {k: i for i, k in enumerate(keys)}
        return [S.row_chunk(r) for r in sorted(rows, key=lambda r: order[r["id"]])]

    async def _rows(self, name: str, where: str | None, columns: list[str] | None,
                    what: str) -> list[dict[str, Any]]:
        await self._ready()
        try:
            q = self._tables[name].query()
            q = q.where(where) if where is not None else q
            rows: list[dict[str, Any]] = await (q.select(columns) if columns else q).to_list()
            return rows
        except Exception as exc:
            raise _unavailable(what, exc) from exc

    async def flush(self, timeout: float | None = 300.0) -> None:
        """Wait until every offloaded chunk is embedded and searchable (tests, benchmarks)."""
        await self._ready()
        await self.worker.flush(timeout)

    async def close(self, timeout: float = 2.0) -> None:
        """Drain the embedding queue briefly, stop the worker, drop the handles. A short
        wait is enough: every offloaded chunk is already durable, and the next start's scan
        embeds what is left, so Ctrl-C never waits on MiniLM."""
        await self.worker.stop(timeout)
        if self._warm is not None and not self._warm.done():
            self._warm.cancel()
        for tbl in self._tables.values():
            tbl.close()
        self._tables.clear()
        if self._db is not None:
            self._db.close()
            self._db = None

    # -- the background half ---------------------------------------------------------------
    async def _embed_chunks(self, chunks: list[Row]) -> None:
        pieces = await asyncio.to_thread(S.passage_rows, chunks, self.passage_tokens)
        vectors = await self.embedder.embed([p["text"] for p in pieces])
        dim = int(vectors.shape[1])
        await self._passages(dim)
        if dim != self._dim:
            raise RuntimeError(f"the embedder gives {dim}-d vectors but {self.uri} holds "
                               f"{self._dim}-d ones; point store.path at a new store")
        rows = [{**p, "vector": v} for p, v in zip(pieces, vectors, strict=True)]
        await self._merge(S.PASSAGES, rows, S.passage_schema(dim))
        await self._maintain()

    async def _unembedded(self, limit: int) -> list[Row]:
        await self._ready()
        return await unembedded(self._tables[S.CHUNKS], await self._passages(), limit)

    async def _maintain(self) -> None:
        for name, n in list(self._commits.items()):
            if n >= OPTIMIZE_EVERY:
                self._commits[name] = 0
                await compact(self._tables[name], name)

    async def stats(self) -> dict[str, int]:
        """Row counts per table and the embedding backlog (health checks, tests, benchmarks)."""
        await self._ready()
        out = {name: int(await tbl.count_rows()) for name, tbl in self._tables.items()}
        return {S.PASSAGES: 0, **out, "backlog": self.worker.backlog}
