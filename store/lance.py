"""`LanceStore`: evicted chunks, passages with vectors and the decision log in LanceDB.

Never forget, fast hot path: `record` (and `offload`, `log`) appends the rows to the
store's write-ahead log (store/wal.py) and returns once that is fsynced, grouped across
concurrent requests; no LanceDB commit is on the request path. The journal
(store/journal.py) replays the log into the `chunks` and `events` tables in the
background and on start; readers see logged rows at once, replayed or not. The
background `EmbedWorker` splits, embeds and writes `passages` later. Recall sees embedded
passages only (plus, with `hybrid`, exact identifier matches among them). Every write is a
`merge_insert` on a content id, so a resent history, a retried request or a record
replayed twice writes nothing twice. The same code runs on a directory or an object-store
URI (`s3://…`, `gs://…`, `az://…`); only a local path gets its directory created.

The log lives in `<store>/_wal` for a local store. For an object-store URI it must be on
local disk: `wal_dir`, by default `./data/wal/<digest of the URI>` (relative to the working
directory; not under /tmp, which a reboot may empty). Give each replica its own.
`background=False` (a reader such as `ctxwarden log`, or a one-shot tool) has no
replayer: it reads the log but writes straight to LanceDB, committed before it returns.
So does `wal=False` on an object store (replicas sharing it, docs/deploy.md): no local
log at all; a record's chunks commit before its events, a lost commit race is retried
(`store.shared.retrying`), and the object store's timeouts are bounded (`with_timeouts`).

Failure: a log that cannot be written (read-only or full disk) and, without a log, any
LanceDB error while writing surface as `StoreUnavailable` (the proxy answers 503
`store_unavailable`), with nothing of that call stored; a failing LanceDB only delays the
replay (retried with backoff, the rows stay readable). Recall degrades to nothing (the
request is still valid without it) and logs why.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import lancedb
import pyarrow as pa
import structlog

from store import schema as S
from store.base import (
    Event,
    EvictedChunk,
    Passage,
    RecallQuery,
    Turn,
    latest_evicted,
    summarise,
    with_media,
)
from store.commits import GroupCommit
from store.embed import Embedder
from store.errors import EventsUnrecorded, StoreUnavailable, unavailable
from store.journal import Journal
from store.media import NO_MEDIA, Media
from store.search import fill, id_matches, id_terms, nearest
from store.shared import is_object_store, retrying, with_timeouts
from store.wal import Loaded, WriteAheadLog
from store.worker import (
    EmbedWorker,
    Row,
    compact,
    ensure_columns,
    ensure_indexes,
    unembedded,
    warm_up,
)

log = structlog.get_logger("ctxwarden.store")
OPTIMIZE_EVERY = 64  # commits per table between compactions (LanceDB: "> 20 operations")
QUERY_EMBED_TIMEOUT = 30.0  # s; a recall gives up on a query vector not ready by then
# tables written through the log, in replay order
LOGGED = (S.CHUNKS, S.ATTACHMENTS, S.EVENTS, S.TURNS)
SCHEMAS = {S.CHUNKS: S.CHUNK_SCHEMA, S.ATTACHMENTS: S.ATTACHMENT_SCHEMA,
           S.EVENTS: S.EVENT_SCHEMA, S.TURNS: S.TURN_SCHEMA}


def _unavailable(what: str, exc: BaseException) -> StoreUnavailable:
    log.error("store_unavailable", op=what, error=type(exc).__name__, detail=str(exc)[:300])
    return unavailable(f"The context store cannot {what} right now ({type(exc).__name__});"
                            " nothing was dropped from the conversation.")


class LanceStore:
    def __init__(self, uri: str | Path, embedder: Embedder, *, passage_tokens: int = 96,
                 hybrid: bool = True, storage_options: dict[str, str] | None = None,
                 read_consistency_interval: timedelta | None = None,
                 max_pending: int = 10_000, background: bool = True,
                 wal: bool | None = None, wal_dir: str | Path | None = None,
                 replay: bool = True) -> None:
        """`wal` (default: `background`): durable in the write-ahead log, replayed into
        LanceDB in the background; False: every write is a LanceDB commit. `wal_dir`: the
        log's directory (default above). `replay=False`: log but never replay in this
        process (a crash between the two, in tests)."""
        self.uri = str(uri)
        self.embedder = embedder
        self.passage_tokens = passage_tokens
        self.hybrid = hybrid
        self.background = background  # False: a reader (ctxwarden log), never embeds
        self._storage_options = with_timeouts(self.uri, storage_options)
        self._consistency = read_consistency_interval
        self._db: Any = None
        self._tables: dict[str, Any] = {}
        self._commits: dict[str, int] = {}
        self._upgraded: set[str] = set()  # tables known to have every column of ours
        self._open_lock = asyncio.Lock()
        self._passages_lock = asyncio.Lock()
        self._dim: int | None = None  # the stored vectors' size, once the table exists
        self._warm: asyncio.Task[None] | None = None
        self._group = GroupCommit(self._commit)
        self.worker = EmbedWorker(self._embed_chunks, self._unembedded, max_pending=max_pending)
        self.wal_dir = Path(wal_dir) if wal_dir is not None else default_wal_dir(self.uri)
        writes_log = background if wal is None else wal
        self.journal = Journal(WriteAheadLog(self.wal_dir, writer=writes_log), self._replay,
                               LOGGED, replay=replay and writes_log)
        self._logged = writes_log  # writes go to the log (else straight to LanceDB)
        # a replica of a shared store: no log of its own (`wal_dir` would keep one)
        self._shared = not writes_log and background and is_object_store(self.uri)

    # -- opening ---------------------------------------------------------------------------
    async def open(self) -> None:
        """Open now rather than on first use: the log is replayed and the worker embeds what
        an earlier process left without passages (a SIGTERM, a crash) while no request has
        come yet (`ctxwarden serve` opens its store at start). Raises StoreUnavailable."""
        await self._ready()

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
                for name in (S.CHUNKS, S.EVENTS):
                    self._tables[name] = await _table(db, name)
                    if self._logged or self.background:  # a reader leaves the store as is
                        await self._upgrade(name)
                    await ensure_indexes(self._tables[name], name, S.INDEXED[name])
                await self._open_newer(db, S.ATTACHMENTS)
                await self._open_turns(db)
                await self._open_passages(None, db)
                # a replica on a shared store has no log of its own to read
                loaded = (Loaded() if self._shared else
                          await asyncio.to_thread(self.journal.wal.load))
                self._db = db
            except Exception as exc:
                self._tables.clear()
                raise _unavailable("open", exc) from exc
            if loaded.records:
                log.info("wal_loaded", records=len(loaded.records), segments=loaded.segments,
                         claimed=loaded.claimed, torn=loaded.torn, corrupt=loaded.corrupt)
            self.journal.load(loaded)  # its chunks reach the worker through `_unembedded`
            self.journal.start()
            if self.background:
                self.worker.start()
                self._warm = asyncio.get_running_loop().create_task(warm_up(self.embedder))

    async def _open_turns(self, db: Any) -> Any:
        return await self._open_newer(db, S.TURNS)

    async def _open_newer(self, db: Any, name: str) -> Any:
        """A table newer than the store (turns, attachments): a read-only store made
        before it existed still opens, and shows only the rows in the log."""
        tbl = self._tables.get(name)
        if tbl is None:
            try:
                tbl = await _table(db, name)
            except Exception as exc:
                log.warning("store_table_unavailable", table=name, error=type(exc).__name__,
                            detail=str(exc)[:200])
                return None
            await ensure_indexes(tbl, name, S.INDEXED[name])
            self._tables[name] = tbl
        return tbl

    async def _upgrade(self, name: str) -> None:
        """Columns added since the table was made (chunks.message, events.media): a writer
        adds them when it opens the store (its rows carry them), a direct writer before
        its first write; a reader never changes the store, and reads older rows without
        them as text-only."""
        if name in self._upgraded:
            return
        added = await ensure_columns(self._tables[name], SCHEMAS[name])
        self._upgraded.add(name)
        if added:
            log.info("store_upgraded", table=name, columns=added)

    async def _passages(self, dim: int | None = None) -> Any:
        """The passages table; created (by the worker) once the vector size is known."""
        tbl = self._tables.get(S.PASSAGES)
        if tbl is not None:
            return tbl
        async with self._passages_lock:  # recall and the worker may both get here first
            return await self._open_passages(dim)

    async def _open_passages(self, dim: int | None, db: Any = None) -> Any:
        tbl = self._tables.get(S.PASSAGES)
        if tbl is not None:
            return tbl
        db = db if db is not None else self._db
        try:
            tbl = await db.open_table(S.PASSAGES)
        except ValueError:  # not created yet
            if dim is None:
                return None
            tbl = await db.create_table(S.PASSAGES, schema=S.passage_schema(dim),
                                        exist_ok=True)
        self._dim = (await tbl.schema()).field("vector").type.list_size
        await ensure_indexes(tbl, S.PASSAGES, S.INDEXED[S.PASSAGES])
        self._tables[S.PASSAGES] = tbl
        return tbl

    async def _merge(self, name: str, rows: list[dict[str, Any]], sch: pa.Schema) -> None:
        if name in (S.TURNS, S.ATTACHMENTS) and await self._open_newer(self._db, name) is None:
            raise RuntimeError(f"the {name} table cannot be created in {self.uri}")
        await self._group.merge(name, rows, sch)  # concurrent writes share one commit

    async def _commit(self, name: str, rows: list[dict[str, Any]], sch: pa.Schema) -> None:
        tbl = self._tables[name]
        data = S.arrow(name, rows, sch)
        await retrying(lambda: tbl.merge_insert("id").when_not_matched_insert_all()
                       .execute(data), name)
        self._commits[name] = self._commits.get(name, 0) + 1

    # -- the Store protocol ----------------------------------------------------------------
    async def record(self, chunks: Sequence[EvictedChunk], events: Sequence[Event]) -> None:
        """What a request evicts and why, durable when it returns: one log append (one
        fsync, shared with concurrent requests); embedding happens later, in the worker."""
        if not chunks and not events:
            return
        chunk_rows = S.chunk_rows(chunks)
        await self._write({S.CHUNKS: chunk_rows, S.ATTACHMENTS: S.attachment_rows(chunks),
                           S.EVENTS: S.event_rows(with_media(chunks, events))},
                          "store evicted chunks" if chunks else "log decisions")
        if chunk_rows:
            self.worker.submit(chunk_rows)

    async def offload(self, chunks: Sequence[EvictedChunk]) -> None:
        """Durable when it returns; embedding happens later, in the worker."""
        await self.record(chunks, ())

    async def log(self, events: Sequence[Event]) -> None:
        await self.record((), events)

    async def log_turns(self, turns: Sequence[Turn]) -> None:
        """Turn summaries into their own table, durable when it returns (the log, like
        `record`); the first summary of a (tenant, session, turn) stays."""
        if turns:
            await self._write({S.TURNS: S.turn_rows(turns)}, "log turn summaries")

    async def _write(self, rows: dict[str, list[Row]], what: str) -> None:
        await self._ready()
        if not self._logged:
            await self._direct(rows, what)
            return
        try:
            await self.journal.record(rows)
        except Exception as exc:
            raise _unavailable(what, exc) from exc

    async def _direct(self, rows: dict[str, list[Row]], what: str) -> None:
        """Without a log: committed to LanceDB before it returns. Chunks and attachments
        side by side, then the events, so the decision log never holds an eviction whose
        chunk failed. Chunks stored and events not: `EventsUnrecorded` (nothing is lost,
        the caller keeps the events and retries them)."""
        async def one(name: str) -> None:
            try:
                if name in (S.CHUNKS, S.EVENTS):
                    await self._upgrade(name)  # a no-op once the columns are there
                await self._merge(name, rows[name], SCHEMAS[name])
            except Exception as exc:
                raise _unavailable("log decisions" if name == S.EVENTS else what,
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

    async def _replay(self, rows: dict[str, list[Row]]) -> None:
        """The journal's apply: logged rows into LanceDB (chunks first), then upkeep."""
        for name in LOGGED:
            if rows.get(name):
                await self._merge(name, rows[name], SCHEMAS[name])
        await self._maintain()

    async def recall(self, query: RecallQuery) -> list[Passage]:
        if query.budget_tokens <= 0 or query.top_k <= 0 or not query.text.strip():
            return []
        try:
            await self._ready()
            tbl = await self._passages()
            if tbl is None:
                return []
            vecs = await self._query_vector(query.text)
            if vecs is None:
                log.warning("recall_skipped", reason="query embedding not ready")
                return []
            vec = vecs[0]
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

    async def _query_vector(self, text: str) -> Any:
        """The query's vector ahead of the worker's backlog (`embed_within`, urgent) when the
        embedder can; the caller's own deadline (recall.timeout_ms) is the real bound."""
        within = getattr(self.embedder, "embed_within", None)
        if within is None:
            return await self.embedder.embed([text])
        return await within([text], QUERY_EMBED_TIMEOUT)

    # Readers take the journal's rows (logged, maybe not replayed yet) *before* querying
    # LanceDB: a row leaves the journal only once it is committed, so it is in one of them.
    async def evicted_ids(self, tenant: str, session: str) -> set[str]:
        """Chunks whose latest evict/restore event is an evict: sticky across restarts."""
        await self._ready()
        scope = S.scope_key(tenant, session)
        logged = self.journal.scope_rows(S.EVENTS, scope)
        rows = await self._rows(S.EVENTS, S.eq("scope", scope)
                                + " AND action IN ('evict', 'restore')",
                                ["chunk_id", "action", "turn", "time"], "read evictions")
        return latest_evicted((r["turn"], r["time"], r["chunk_id"], r["action"])
                              for r in (*rows, *logged))

    async def events(self, tenant: str, session: str) -> list[Event]:
        await self._ready()
        scope = S.scope_key(tenant, session)
        logged = self.journal.scope_rows(S.EVENTS, scope)
        rows = _union(await self._rows(S.EVENTS, S.eq("scope", scope), None, "read events"),
                      logged)
        return [S.row_event(r) for r in sorted(rows, key=lambda r: (r["turn"], r["time"]))]

    async def sessions(self, tenant: str | None = None) -> list[dict[str, Any]]:
        await self._ready()
        tkey = S.tenant_key(tenant) if tenant is not None else None
        logged = self.journal.all_rows(S.EVENTS, tkey)
        where = S.eq("tenant_key", tkey) if tkey is not None else None
        rows = await self._rows(S.EVENTS, where, ["id", "tenant", "session", "turn", "time",
                                                  "action", "tokens"], "list sessions")
        return summarise(_union(rows, logged))

    async def fetch(self, tenant: str, session: str,
                    chunk_ids: Sequence[str]) -> list[EvictedChunk]:
        """The original text of offloaded chunks (exact, not re-rendered passages)."""
        keys = [S.chunk_key(tenant, session, c) for c in dict.fromkeys(chunk_ids)]
        if not keys:
            return []
        await self._ready()
        found = self.journal.by_id(S.CHUNKS, keys)
        rest = [k for k in keys if k not in found]
        if rest:
            rows = await self._rows(S.CHUNKS, "id IN (" + ", ".join(f"'{k}'" for k in rest)
                                    + ")", None, "read chunks")
            found.update((r["id"], r) for r in rows)
        return [S.row_chunk(found[k]) for k in keys if k in found]

    async def media(self, tenant: str, session: str, chunk_id: str) -> Media:
        """The chunk's message skeleton and its attachments with their bytes (logged ones
        included); NO_MEDIA for a text-only or unknown chunk."""
        await self._ready()
        key = S.chunk_key(tenant, session, chunk_id)
        logged = [r for r in self.journal.scope_rows(S.ATTACHMENTS, S.scope_key(tenant, session))
                  if r["chunk_key"] == key]
        chunk = self.journal.by_id(S.CHUNKS, [key]).get(key)
        if chunk is None:
            rows = await self._rows(S.CHUNKS, S.eq("id", key), None, "read chunks")
            chunk = rows[0] if rows else None
        if chunk is None or not chunk.get("message"):
            return NO_MEDIA
        rows = logged
        if S.ATTACHMENTS in self._tables:
            rows = _union(await self._rows(S.ATTACHMENTS, S.eq("chunk_key", key), None,
                                           "read attachments"), logged)
        parts = sorted((S.row_attachment(r) for r in rows), key=lambda a: a.index)
        return Media(chunk["message"], tuple(parts))

    async def turns(self, tenant: str, session: str) -> list[Turn]:
        """The session's turn summaries, by turn (logged ones included)."""
        await self._ready()
        scope = S.scope_key(tenant, session)
        logged = self.journal.scope_rows(S.TURNS, scope)
        rows = logged
        if S.TURNS in self._tables:
            rows = _union(await self._rows(S.TURNS, S.eq("scope", scope), None, "read turns"),
                          logged)
        return [S.row_turn(r) for r in sorted(rows, key=lambda r: (r["turn"], r["time"]))]

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
        """Wait until everything recorded is in LanceDB and every chunk is embedded and
        searchable (tests, benchmarks)."""
        await self._ready()
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        await self.journal.drain(timeout)
        await self.worker.flush(None if deadline is None else max(0.0, deadline - loop.time()))

    async def close(self, timeout: float = 1.0) -> None:
        """Replay for up to `timeout` s, stop the embedding at once, drop the handles.
        Nothing waits on the embedding backlog (issue 11: SIGTERM took 6-10 s behind it):
        what is recorded is durable in the log (the next start replays it) or in LanceDB
        without passages yet (the next start's worker scans for those and embeds them)."""
        started = time.monotonic()
        await self.journal.stop(timeout)
        unembedded = self.worker.backlog
        await self.worker.stop()
        if self._warm is not None and not self._warm.done():
            self._warm.cancel()
        for tbl in self._tables.values():
            tbl.close()
        self._tables.clear()
        if self._db is not None:
            self._db.close()
            self._db = None
            if self.background:  # a serving store; a reader (`ctxwarden log`) stays quiet
                log.info("store_closed", seconds=round(time.monotonic() - started, 3),
                         wal_pending=self.journal.backlog, unembedded=unembedded)

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
        """Chunks without passages: logged ones first (not in LanceDB yet), then LanceDB's."""
        await self._ready()
        return await unembedded(self._tables[S.CHUNKS], await self._passages(), limit,
                                logged=list(self.journal.rows[S.CHUNKS].values()))

    async def _maintain(self) -> None:
        for name, n in list(self._commits.items()):
            if n >= OPTIMIZE_EVERY:
                self._commits[name] = 0
                await compact(self._tables[name], name)

    async def stats(self) -> dict[str, float]:
        """Row counts per table (logged rows not replayed yet included), the embedding
        backlog and lag, and the log's (health checks, /admin/store, /metrics, tests):

            chunks, events, passages   rows
            backlog                    chunks waiting to be embedded
            embed_lag_s                age of the oldest of them (0 when none)
            embed_queue                texts queued in the embedder (its own process)
            wal_pending                log records not in LanceDB yet
            wal_lag_s                  age of the oldest of them (0 when none)
        """
        await self._ready()
        out: dict[str, float] = {S.PASSAGES: 0}
        for name, tbl in list(self._tables.items()):  # a table may open meanwhile
            logged = list(self.journal.rows[name]) if name in LOGGED else None
            out[name] = int(await tbl.count_rows()) + await self._missing(tbl, logged)
        return {**out, **self.lag()}

    def lag(self) -> dict[str, float]:
        """The background work's backlog and lag, without touching LanceDB (metrics)."""
        queue = getattr(self.embedder, "queued", 0)
        return {"backlog": self.worker.backlog, "embed_lag_s": round(self.worker.lag, 3),
                "embed_queue": int(queue() if callable(queue) else queue),
                "wal_pending": self.journal.backlog, "wal_lag_s": round(self.journal.lag, 3)}

    @staticmethod
    async def _missing(tbl: Any, ids: list[str] | None) -> int:
        """How many of these logged ids the table does not hold yet."""
        if not ids:
            return 0
        have = 0
        for i in range(0, len(ids), 256):  # ids are hex digests: safe to inline
            part = ", ".join(f"'{k}'" for k in ids[i:i + 256])
            have += int(await tbl.count_rows(f"id IN ({part})"))
        return len(ids) - have


async def _table(db: Any, name: str) -> Any:
    """Open a table, or create it: `create_table(exist_ok=True)` refuses one whose schema
    is older than ours (columns are added by `_upgrade`)."""
    try:
        return await db.open_table(name)
    except ValueError:  # not created yet; replicas started together race to create it
        return await retrying(lambda: db.create_table(name, schema=SCHEMAS[name],
                                                      exist_ok=True), name)


def _union(rows: list[Row], logged: list[Row]) -> list[Row]:
    """LanceDB's rows and the journal's, each id once (a row may be in both for a moment)."""
    seen = {r["id"] for r in rows}
    return rows + [r for r in logged if r["id"] not in seen]


def default_wal_dir(uri: str) -> Path:
    """`<store>/_wal` for a local store; `./data/wal/<digest>` for an object-store URI."""
    if "://" not in uri or uri.startswith("file://"):
        return Path(uri.removeprefix("file://")) / "_wal"
    return Path("data") / "wal" / S.hkey("wal", uri)[:16]
