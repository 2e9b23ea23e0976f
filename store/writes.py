"""`Writer`: every LanceDB commit of `LanceStore`, and the compaction they call for.

Three callers: the journal's replay of the write-ahead log (`replay`: chunks first), a
store without a log (`direct`: chunks and attachments, then the events, committed before
it returns), and the embedding worker's passages (`embed`). Every write is a
`merge_insert` on a content id, so a row written twice is stored once; concurrent writes
to one table share one commit (store/commits.py), and a lost commit race is retried
(`store.shared.retrying`). Every `OPTIMIZE_EVERY` commits a table is compacted.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pyarrow as pa

from store import schema as S
from store.commits import GroupCommit
from store.embed import Embedder
from store.errors import EventsUnrecorded, StoreUnavailable
from store.shared import retrying
from store.tables import LOGGED, SCHEMAS, Tables, store_unavailable
from store.worker import Row, compact

OPTIMIZE_EVERY = 64  # commits per table between compactions (LanceDB: "> 20 operations")


class Writer:
    def __init__(self, tables: Tables) -> None:
        self._t = tables
        self._commits: dict[str, int] = {}
        self._group = GroupCommit(self._commit)

    async def merge(self, name: str, rows: list[dict[str, Any]], sch: pa.Schema) -> None:
        if name in (S.TURNS, S.ATTACHMENTS) and await self._t.newer(self._t.db, name) is None:
            raise RuntimeError(f"the {name} table cannot be created in {self._t.uri}")
        await self._group.merge(name, rows, sch)  # concurrent writes share one commit

    async def _commit(self, name: str, rows: list[dict[str, Any]], sch: pa.Schema) -> None:
        tbl = self._t.handles[name]
        data = S.arrow(name, rows, sch)
        if name in (S.TURNS, S.EVENTS):
            # the latest summary of a turn replaces the one before; an event's latest copy
            # keeps its time: a chunk evicted, restored and evicted again within one turn
            # (parallel sub-calls, a retry with another max_tokens) is evicted, as sent
            await retrying(lambda: tbl.merge_insert("id").when_matched_update_all()
                           .when_not_matched_insert_all().execute(data), name)
        else:  # everything else is written once: a repeat (a replay) changes nothing
            await retrying(lambda: tbl.merge_insert("id").when_not_matched_insert_all()
                           .execute(data), name)
        self._commits[name] = self._commits.get(name, 0) + 1

    async def embed(self, chunks: list[Row], embedder: Embedder, passage_tokens: int) -> None:
        """The worker's: the chunks' passages with their vectors into `passages`."""
        pieces = await asyncio.to_thread(S.passage_rows, chunks, passage_tokens)
        vectors = await embedder.embed([p["text"] for p in pieces])
        dim = int(vectors.shape[1])
        await self._t.passages(dim)
        if dim != self._t.dim:
            raise RuntimeError(f"the embedder gives {dim}-d vectors but {self._t.uri} holds "
                               f"{self._t.dim}-d ones; point store.path at a new store")
        rows = [{**p, "vector": v} for p, v in zip(pieces, vectors, strict=True)]
        await self.merge(S.PASSAGES, rows, S.passage_schema(dim))
        await self.maintain()

    async def direct(self, rows: dict[str, list[Row]], what: str) -> None:
        """Without a log: committed to LanceDB before it returns. Chunks and attachments
        side by side, then the events, so the decision log never holds an eviction whose
        chunk failed. Chunks stored and events not: `EventsUnrecorded` (nothing is lost,
        the caller keeps the events and retries them)."""
        async def one(name: str) -> None:
            try:
                if name in (S.CHUNKS, S.EVENTS):
                    await self._t.upgrade(name)  # a no-op once the columns are there
                await self.merge(name, rows[name], SCHEMAS[name])
            except Exception as exc:
                raise store_unavailable("log decisions" if name == S.EVENTS else what,
                                        exc) from exc

        first = [n for n in LOGGED if n != S.EVENTS and rows.get(n)]
        done = await asyncio.gather(*(one(n) for n in first), return_exceptions=True)
        failed = next((e for e in done if isinstance(e, BaseException)), None)
        if failed is not None:
            raise failed
        if rows.get(S.EVENTS):
            try:
                await one(S.EVENTS)
            except StoreUnavailable as exc:
                if S.CHUNKS not in first:
                    raise
                raise EventsUnrecorded(exc.message) from exc

    async def replay(self, rows: dict[str, list[Row]]) -> None:
        """The journal's apply: logged rows into LanceDB (chunks first), then upkeep."""
        for name in LOGGED:
            if rows.get(name):
                await self.merge(name, rows[name], SCHEMAS[name])
        await self.maintain()

    async def maintain(self) -> None:
        """Compact a table every OPTIMIZE_EVERY commits. The log's replay and the embed
        worker run this at once: each table's counter is read when its turn comes, not
        from a list taken before the first compaction, which compacted a table the other
        caller was compacting (LanceDB: "Rewrite preempted by concurrent Rewrite")."""
        for name in list(self._commits):
            if self._commits.get(name, 0) >= OPTIMIZE_EVERY:
                self._commits[name] = 0
                await compact(self._t.handles[name], name)
