"""The one background task that embeds what `record` already made durable.

Why a separate worker: MiniLM costs tens of milliseconds per passage on a small CPU, and
a request must not wait for it; `record` returns once the raw chunk is durable (in the
write-ahead log) and only hands the chunk over here. The hand-over is a hint, not the
source of truth: the queue is bounded, and when it overflows, when a write fails, or at
start-up after a crash, the worker re-scans the store for chunks that have no passages
yet (`scan`: the log's, then LanceDB's), so nothing durable is left unembedded for long.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta
from typing import Any

import structlog
from lancedb.index import BTree

from store.quiet import QUIET, WRITE_REST_S

log = structlog.get_logger("ctxwarden.store")

Row = dict[str, Any]


class EmbedWorker:
    def __init__(self, handle: Callable[[list[Row]], Awaitable[None]],
                 scan: Callable[[int], Awaitable[list[Row]]], *, max_pending: int = 10_000,
                 batch: int = 8, max_backoff: float = 30.0) -> None:
        self._handle = handle
        self._scan = scan
        self._max_pending = max_pending
        self._batch = batch
        self._max_backoff = max_backoff
        self._pending: OrderedDict[str, Row] = OrderedDict()
        self._need_scan = True  # start-up: chunks a crash left unembedded
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.failures = 0
        self.done = 0  # chunks embedded and written (benchmarks read it)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="embed-worker")

    def submit(self, rows: Iterable[Row]) -> None:
        """Never blocks: past `max_pending` the rows are left for the next scan."""
        for r in rows:
            if len(self._pending) >= self._max_pending:
                self._need_scan = True
                break
            self._pending.setdefault(r["id"], r)
        self._idle.clear()
        self._wake.set()

    @property
    def backlog(self) -> int:
        return len(self._pending)

    @property
    def lag(self) -> float:
        """Seconds since the oldest chunk waiting here was evicted (0 when none)."""
        if not self._pending:
            return 0.0
        now = time.time()
        return max(0.0, now - min(float(r.get("time", now)) for r in self._pending.values()))

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until everything handed over (and found by a scan) is embedded and written."""
        if self._task is None:
            return
        self._wake.set()
        await asyncio.wait_for(self._idle.wait(), timeout)

    async def stop(self, timeout: float = 0.0) -> None:
        """Stop, after draining for up to `timeout` s (default: not at all). What is left is
        durable (in the log or LanceDB, without passages): the next start's scan embeds it."""
        task, self._task = self._task, None
        if task is None:
            return
        if not task.done():
            if timeout > 0:
                self._wake.set()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._idle.wait(), timeout)
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        self._pending.clear()  # whatever is left is durable: a restart's scan finds it
        self._need_scan = True

    async def _run(self) -> None:
        while True:
            if not self._pending and self._need_scan:
                self._need_scan = False
                try:
                    for r in await self._scan(self._max_pending):
                        self._pending.setdefault(r["id"], r)
                except Exception as exc:
                    await self._failed("scan", exc)
                    continue
                if len(self._pending) >= self._max_pending:
                    self._need_scan = True  # more than one queue-full behind: scan again
            if not self._pending:
                self._idle.set()
                await self._wake.wait()
                self._wake.clear()
                continue
            await QUIET.wait(WRITE_REST_S)
            batch = [self._pending[k] for k in list(self._pending)[: self._batch]]
            try:
                await self._handle(batch)
            except Exception as exc:
                await self._failed("embed", exc)
                continue
            self.failures = 0
            self.done += len(batch)
            for r in batch:
                self._pending.pop(r["id"], None)

    async def _failed(self, what: str, exc: Exception) -> None:
        """Log (no text), back off, and rescan later: the chunks are durable, not lost."""
        self.failures += 1
        delay = min(self._max_backoff, 0.5 * 2 ** min(self.failures, 10))
        log.warning("store_background_failed", stage=what, error=type(exc).__name__,
                    detail=str(exc)[:200], retry_in=delay, pending=len(self._pending))
        self._pending.clear()
        self._need_scan = True
        await asyncio.sleep(delay)


async def unembedded(chunks: Any, passages: Any, limit: int,
                     logged: Iterable[Row] = ()) -> list[Row]:
    """Chunk rows durable but without passages (a crash, a full queue, a failed write):
    `logged` ones (in the write-ahead log, maybe not in LanceDB yet) first."""
    have = (await chunks.query().select(["id"]).to_arrow()).column("id").to_pylist()
    done: set[str] = set()
    if passages is not None:
        done = set((await passages.query().select(["chunk_key"]).to_arrow())
                   .column("chunk_key").to_pylist())
    rows: list[Row] = []
    for r in logged:
        if r["id"] not in done and len(rows) < limit:
            done.add(r["id"])
            rows.append(r)
    missing = [k for k in have if k not in done][:limit - len(rows)]
    for i in range(0, len(missing), 256):  # keys are hex digests: safe to inline
        keys = ", ".join(f"'{k}'" for k in missing[i:i + 256])
        rows += await chunks.query().where(f"id IN ({keys})").to_list()
    return rows


async def ensure_columns(table: Any, schema: Any) -> list[str]:
    """Add the columns a newer version gave `schema` to a table made before (nullable:
    older rows read as null); the names added. Raises what LanceDB raises (read-only)."""
    have = set((await table.schema()).names)
    missing = [f for f in schema if f.name not in have]
    if missing:
        await table.add_columns(missing)
    return [f.name for f in missing]


async def ensure_indexes(table: Any, name: str, columns: Iterable[str]) -> None:
    """B-tree indexes on the key (merge_insert joins on it: 20 → 10 ms at 100k rows) and on
    `scope` (recall's prefilter: 65 → 18 ms at 100k passages). New rows are scanned until
    the next `compact` folds them in, so results never depend on the index being fresh."""
    try:
        have = {c for ix in await table.list_indices() for c in ix.columns}
        for col in columns:
            if col not in have:
                await table.create_index(col, config=BTree())
    except Exception as exc:  # a read-only store still reads, just slower
        log.warning("store_index_failed", table=name, error=type(exc).__name__,
                    detail=str(exc)[:200])


async def compact(table: Any, name: str) -> None:
    """Merge small fragments (every write adds one; many of them slow every read)."""
    try:
        await table.optimize(cleanup_older_than=timedelta(hours=1))
    except Exception as exc:  # an optimisation, never an error
        log.warning("store_optimize_failed", table=name, error=type(exc).__name__)


async def warm_up(embedder: Any) -> None:
    """Load the model now, off the request path, so the first recall does not pay it."""
    load = getattr(embedder, "load", None)
    if load is not None:
        try:
            await load()
        except Exception as exc:
            log.warning("embedder_load_failed", error=type(exc).__name__, detail=str(exc)[:300])
