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

import structlog

from store import schema as S
from store.base import Event, EvictedChunk, Passage, RecallQuery, Turn, with_media
from store.embed import Embedder
from store.journal import Journal
from store.media import Media
from store.reads import Reader
from store.shared import is_object_store, with_timeouts
from store.tables import LOGGED, Tables, store_unavailable
from store.wal import Loaded, WriteAheadLog, default_wal_dir
from store.worker import EmbedWorker, Row, unembedded, warm_up
from store.writes import Writer

log = structlog.get_logger("ctxwarden.store")


class LanceStore:
    """The Store API; LanceDB's tables are opened by `store.tables.Tables`, written by
    `store.writes.Writer` and read by `store.reads.Reader`."""

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
        self._t = Tables(self.uri, with_timeouts(self.uri, storage_options),
                         read_consistency_interval)
        self._writer = Writer(self._t)
        self._open_lock = asyncio.Lock()
        self._warm: asyncio.Task[None] | None = None
        self.worker = EmbedWorker(self._embed_chunks, self._unembedded, max_pending=max_pending)
        self.wal_dir = Path(wal_dir) if wal_dir is not None else default_wal_dir(self.uri)
        writes_log = background if wal is None else wal
        self.journal = Journal(WriteAheadLog(self.wal_dir, writer=writes_log), self._replay,
                               LOGGED, replay=replay and writes_log)
        self._reads = Reader(self._t, self.journal, self._ready)
        self._logged = writes_log  # writes go to the log (else straight to LanceDB)
        # a replica of a shared store: no log of its own (`wal_dir` would keep one)
        self._shared = not writes_log and background and is_object_store(self.uri)

    @property
    def _tables(self) -> dict[str, Any]:
        """The open tables by name (tests reach into them)."""
        return self._t.handles

    # -- opening ---------------------------------------------------------------------------
    async def open(self) -> None:
        """Open now rather than on first use: the log is replayed and the worker embeds what
        an earlier process left without passages (a SIGTERM, a crash) while no request has
        come yet (`ctxwarden serve` opens its store at start). Raises StoreUnavailable."""
        await self._ready()

    async def _ready(self) -> None:
        if self._t.db is not None:
            return
        async with self._open_lock:
            if self._t.db is not None:
                return
            try:
                db = await self._t.connect(upgrade=self._logged or self.background)
                # a replica on a shared store has no log of its own to read
                loaded = (Loaded() if self._shared else
                          await asyncio.to_thread(self.journal.wal.load))
                self._t.db = db
            except Exception as exc:
                self._t.handles.clear()
                raise store_unavailable("open", exc) from exc
            if loaded.records:
                log.info("wal_loaded", records=len(loaded.records), segments=loaded.segments,
                         claimed=loaded.claimed, torn=loaded.torn, corrupt=loaded.corrupt)
            self.journal.load(loaded)  # its chunks reach the worker through `_unembedded`
            self.journal.start()
            if self.background:
                self.worker.start()
                self._warm = asyncio.get_running_loop().create_task(warm_up(self.embedder))

    async def _passages(self, dim: int | None = None) -> Any:
        """The passages table; created (by the worker) once the vector size is known."""
        return await self._t.passages(dim)

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
        `record`); the latest summary of a (tenant, session, turn) stays."""
        if turns:
            await self._write({S.TURNS: S.turn_rows(turns)}, "log turn summaries")

    async def _write(self, rows: dict[str, list[Row]], what: str) -> None:
        await self._ready()
        if not self._logged:  # committed to LanceDB before it returns (`Writer.direct`)
            await self._writer.direct(rows, what)
            return
        try:
            await self.journal.record(rows)
        except Exception as exc:
            raise store_unavailable(what, exc) from exc

    async def _replay(self, rows: dict[str, list[Row]]) -> None:
        """The journal's apply: logged rows into LanceDB (chunks first), then upkeep."""
        await self._writer.replay(rows)

    # reads: the journal's rows, then LanceDB's (store/reads.py)
    async def recall(self, query: RecallQuery) -> list[Passage]:
        return await self._reads.recall(query, self.embedder, self.hybrid)

    async def evicted_ids(self, tenant: str, session: str) -> set[str]:
        return await self._reads.evicted_ids(tenant, session)

    async def events(self, tenant: str, session: str) -> list[Event]:
        return await self._reads.events(tenant, session)

    async def sessions(self, tenant: str | None = None) -> list[dict[str, Any]]:
        return await self._reads.sessions(tenant)

    async def fetch(self, tenant: str, session: str,
                    chunk_ids: Sequence[str]) -> list[EvictedChunk]:
        return await self._reads.fetch(tenant, session, chunk_ids)

    async def media(self, tenant: str, session: str, chunk_id: str) -> Media:
        return await self._reads.media(tenant, session, chunk_id)

    async def turns(self, tenant: str, session: str) -> list[Turn]:
        return await self._reads.turns(tenant, session)

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
        # the handles, then the connection; a reader (`ctxwarden log`) stays quiet
        if self._t.close() and self.background:
            log.info("store_closed", seconds=round(time.monotonic() - started, 3),
                     wal_pending=self.journal.backlog, unembedded=unembedded)

    # -- the background half ---------------------------------------------------------------
    async def _embed_chunks(self, chunks: list[Row]) -> None:
        await self._writer.embed(chunks, self.embedder, self.passage_tokens)

    async def _unembedded(self, limit: int) -> list[Row]:
        """Chunks without passages: logged ones first (not in LanceDB yet), then LanceDB's."""
        await self._ready()
        return await unembedded(self._t.handles[S.CHUNKS], await self._passages(), limit,
                                logged=list(self.journal.rows[S.CHUNKS].values()))

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
        return {**await self._reads.counts(), **self.lag()}

    def lag(self) -> dict[str, float]:
        """The background work's backlog and lag, without touching LanceDB (metrics)."""
        queue = getattr(self.embedder, "queued", 0)
        return {"backlog": self.worker.backlog, "embed_lag_s": round(self.worker.lag, 3),
                "embed_queue": int(queue() if callable(queue) else queue),
                "wal_pending": self.journal.backlog, "wal_lag_s": round(self.journal.lag, 3)}
