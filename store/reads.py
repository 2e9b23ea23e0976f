"""`Reader`: `LanceStore`'s reads: recall, the decision log, chunks, media, turns, counts.

Readers take the journal's rows (logged, maybe not replayed yet) *before* querying
LanceDB: a row leaves the journal only once it is committed, so it is in one of them; a
row in both for a moment is read once (`_union`). Recall sees embedded passages only
(plus, with `hybrid`, exact identifier matches among them) and degrades to nothing, with
a log line saying why; any other read LanceDB fails raises `StoreUnavailable`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog

from store import schema as S
from store.base import (
    TURN,
    Event,
    EvictedChunk,
    Passage,
    RecallQuery,
    Turn,
    latest_evicted,
    summarise,
)
from store.embed import Embedder
from store.journal import Journal
from store.media import NO_MEDIA, Media
from store.search import fill, id_matches, id_terms, nearest
from store.tables import LOGGED, Tables, store_unavailable
from store.worker import Row

log = structlog.get_logger("ctxwarden.store")
QUERY_EMBED_TIMEOUT = 30.0  # s; a recall gives up on a query vector not ready by then


class Reader:
    def __init__(self, tables: Tables, journal: Journal,
                 ready: Callable[[], Awaitable[None]]) -> None:
        self._t = tables
        self._journal = journal
        self._ready = ready  # the store's: open it on first use

    async def recall(self, query: RecallQuery, embedder: Embedder,
                     hybrid: bool) -> list[Passage]:
        if query.budget_tokens <= 0 or query.top_k <= 0 or not query.text.strip():
            return []
        try:
            await self._ready()
            tbl = await self._t.passages()
            if tbl is None:
                return []
            vecs = await _query_vector(embedder, query.text)
            if vecs is None:
                log.warning("recall_skipped", reason="query embedding not ready")
                return []
            vec = vecs[0]
            where = (S.eq("tenant_key", S.tenant_key(query.tenant)) if query.cross_session
                     else S.eq("scope", S.scope_key(query.tenant, query.session)))
            cands = await nearest(tbl, vec, where, query)
            terms = id_terms(query.text) if hybrid else []
            if terms:
                cands += await id_matches(tbl, vec, where, terms, query)
        except Exception as exc:
            log.warning("recall_failed", error=type(exc).__name__, detail=str(exc)[:300])
            return []
        return fill(cands, query)

    async def evicted_ids(self, tenant: str, session: str) -> set[str]:
        """Chunks whose latest evict/restore event is an evict: sticky across restarts."""
        await self._ready()
        scope = S.scope_key(tenant, session)
        logged = self._journal.scope_rows(S.EVENTS, scope)
        rows = await self.rows(S.EVENTS, S.eq("scope", scope)
                               + " AND action IN ('evict', 'restore')",
                               ["chunk_id", "action", "turn", "time"], "read evictions")
        return latest_evicted((r["turn"], r["time"], r["chunk_id"], r["action"])
                              for r in (*rows, *logged))

    async def events(self, tenant: str, session: str) -> list[Event]:
        await self._ready()
        scope = S.scope_key(tenant, session)
        logged = self._journal.scope_rows(S.EVENTS, scope)
        rows = _union(await self.rows(S.EVENTS, S.eq("scope", scope), None, "read events"),
                      logged)
        return [S.row_event(r) for r in sorted(rows, key=lambda r: (r["turn"], r["time"]))]

    async def sessions(self, tenant: str | None = None) -> list[dict[str, Any]]:
        await self._ready()
        tkey = S.tenant_key(tenant) if tenant is not None else None
        logged = self._journal.all_rows(S.EVENTS, tkey)
        where = S.eq("tenant_key", tkey) if tkey is not None else None
        rows = await self.rows(S.EVENTS, where, ["id", "tenant", "session", "turn", "time",
                                                 "action", "tokens"], "list sessions")
        # a session that evicted nothing has its turns only
        turns = self._journal.all_rows(S.TURNS, tkey)
        if S.TURNS in self._t.handles:
            turns = _union(await self.rows(S.TURNS, where, ["id", "tenant", "session", "turn",
                                                            "time"], "list sessions"), turns)
        return summarise(_union(rows, logged) + [{**r, "action": TURN, "tokens": 0}
                                                  for r in turns])

    async def fetch(self, tenant: str, session: str,
                    chunk_ids: Sequence[str]) -> list[EvictedChunk]:
        """The original text of offloaded chunks (exact, not re-rendered passages)."""
        keys = [S.chunk_key(tenant, session, c) for c in dict.fromkeys(chunk_ids)]
        if not keys:
            return []
        await self._ready()
        found = self._journal.by_id(S.CHUNKS, keys)
        rest = [k for k in keys if k not in found]
        if rest:
            rows = await self.rows(S.CHUNKS, "id IN (" + ", ".join(f"'{k}'" for k in rest)
                                   + ")", None, "read chunks")
            found.update((r["id"], r) for r in rows)
        return [S.row_chunk(found[k]) for k in keys if k in found]

    async def media(self, tenant: str, session: str, chunk_id: str) -> Media:
        """The chunk's message skeleton and its attachments with their bytes (logged ones
        included); NO_MEDIA for a text-only or unknown chunk."""
        await self._ready()
        key = S.chunk_key(tenant, session, chunk_id)
        logged = [r for r in self._journal.scope_rows(S.ATTACHMENTS,
                                                      S.scope_key(tenant, session))
                  if r["chunk_key"] == key]
        chunk = self._journal.by_id(S.CHUNKS, [key]).get(key)
        if chunk is None:
            rows = await self.rows(S.CHUNKS, S.eq("id", key), None, "read chunks")
            chunk = rows[0] if rows else None
        if chunk is None or not chunk.get("message"):
            return NO_MEDIA
        rows = logged
        if S.ATTACHMENTS in self._t.handles:
            rows = _union(await self.rows(S.ATTACHMENTS, S.eq("chunk_key", key), None,
                                          "read attachments"), logged)
        parts = sorted((S.row_attachment(r) for r in rows), key=lambda a: a.index)
        return Media(chunk["message"], tuple(parts))

    async def turns(self, tenant: str, session: str) -> list[Turn]:
        """The session's turn summaries, by turn (logged ones included)."""
        await self._ready()
        scope = S.scope_key(tenant, session)
        logged = self._journal.scope_rows(S.TURNS, scope)
        rows = logged
        if S.TURNS in self._t.handles:  # a turn summarised again: the log's is the later
            stored = await self.rows(S.TURNS, S.eq("scope", scope), None, "read turns")
            rows = list({r["id"]: r for r in [*stored, *logged]}.values())
        return [S.row_turn(r) for r in sorted(rows, key=lambda r: (r["turn"], r["time"]))]

    async def rows(self, name: str, where: str | None, columns: list[str] | None,
                   what: str) -> list[dict[str, Any]]:
        await self._ready()
        try:
            q = self._t.handles[name].query()
            q = q.where(where) if where is not None else q
            rows: list[dict[str, Any]] = await (q.select(columns) if columns else q).to_list()
            return rows
        except Exception as exc:
            raise store_unavailable(what, exc) from exc

    async def counts(self) -> dict[str, float]:
        """Row counts per table, logged rows not replayed yet included (`LanceStore.stats`)."""
        out: dict[str, float] = {S.PASSAGES: 0}
        for name, tbl in list(self._t.handles.items()):  # a table may open meanwhile
            logged = list(self._journal.rows[name]) if name in LOGGED else None
            out[name] = int(await tbl.count_rows()) + await _missing(tbl, logged)
        return out


async def _query_vector(embedder: Embedder, text: str) -> Any:
    """The query's vector ahead of the worker's backlog (`embed_within`, urgent) when the
    embedder can; the caller's own deadline (recall.timeout_ms) is the real bound."""
    within = getattr(embedder, "embed_within", None)
    if within is None:
        return await embedder.embed([text])
    return await within([text], QUERY_EMBED_TIMEOUT)


async def _missing(tbl: Any, ids: list[str] | None) -> int:
    """How many of these logged ids the table does not hold yet."""
    if not ids:
        return 0
    have = 0
    for i in range(0, len(ids), 256):  # ids are hex digests: safe to inline
        part = ", ".join(f"'{k}'" for k in ids[i:i + 256])
        have += int(await tbl.count_rows(f"id IN ({part})"))
    return len(ids) - have


def _union(rows: list[Row], logged: list[Row]) -> list[Row]:
    """LanceDB's rows and the journal's, each id once (a row may be in both for a moment):
    the journal's copy, which is the newer where a row is written again (events, turns)."""
    seen = {r["id"] for r in logged}
    return [r for r in rows if r["id"] not in seen] + logged
