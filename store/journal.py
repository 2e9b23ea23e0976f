"""Rows that are durable in the write-ahead log but not in LanceDB yet, and the task that
moves them there.

`record` appends one WAL record (a request's chunk and event rows, JSON) and returns once
it is fsynced; the rows then sit in this in-memory view until the replayer has merged
them into LanceDB (`merge_insert` on content ids: a record replayed twice writes nothing
twice), after which the log segments that held them are deleted. Readers ask the view
first and LanceDB second and take the union, so what `record` acknowledged is visible at
once; a row leaves the view only after its LanceDB commit, so between the two reads it is
in one of them (read the view *before* LanceDB, never after). At start the whole log is
loaded into the view, and the replayer moves it into LanceDB while the store serves.

Failure: a replay round that fails (LanceDB down, the disk full) is retried with backoff;
its rows stay in the view and in the log, so nothing is lost and readers still see them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import orjson
import structlog

from store.wal import Loaded, WriteAheadLog

log = structlog.get_logger("ctxwarden.store")

Row = dict[str, Any]
Apply = Callable[[list[Row], list[Row]], Awaitable[None]]
ROUND_ROWS = 2_000  # rows per replay round (one LanceDB commit per table per round)


@dataclass(slots=True)
class Pending:
    chunks: list[Row]
    events: list[Row]
    since: float  # when it became durable (monotonic): the replay lag


class Journal:
    def __init__(self, wal: WriteAheadLog, apply: Apply, *, replay: bool = True,
                 max_backoff: float = 30.0) -> None:
        self.wal = wal
        self._apply = apply
        self.replay = replay  # False: never move records into LanceDB (tests of a crash)
        self._max_backoff = max_backoff
        self._records: OrderedDict[int, Pending] = OrderedDict()  # by sequence number
        self.chunks: dict[str, Row] = {}  # by id (the chunk key)
        self.events: dict[str, Row] = {}  # by id
        self._scopes: dict[str, dict[str, Row]] = {}  # event rows by scope
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self.failures = 0
        self.replayed = 0  # records moved into LanceDB (tests, benchmarks)

    # -- writing ---------------------------------------------------------------------------
    async def record(self, chunks: list[Row], events: list[Row]) -> None:
        """Durable when it returns (fsynced in the log); visible to readers at once."""
        payload = orjson.dumps({"chunks": chunks, "events": events})
        await self.wal.append(payload, lambda seq: self._add(seq, chunks, events))

    def load(self, loaded: Loaded) -> list[Row]:
        """Take what the log held at start into the view; the chunk rows (for embedding)."""
        out: list[Row] = []
        for seq, payload in loaded.records:
            try:
                rec = orjson.loads(payload)
                chunks, events = list(rec["chunks"]), list(rec["events"])
            except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
                log.error("wal_record_unreadable", seq=seq, error=type(exc).__name__)
                continue
            self._add(seq, chunks, events)
            out += chunks
        return out

    def _add(self, seq: int, chunks: list[Row], events: list[Row]) -> None:
        self._records[seq] = Pending(chunks, events, time.monotonic())
        for r in chunks:
            self.chunks[r["id"]] = r
        for r in events:
            self.events[r["id"]] = r
            self._scopes.setdefault(r["scope"], {})[r["id"]] = r
        if self.replay:
            self._idle.clear()
            self._wake.set()

    # -- reading (snapshots: take them before the LanceDB query) ----------------------------
    def scope_events(self, scope: str) -> list[Row]:
        return list(self._scopes.get(scope, {}).values())

    def all_events(self, tenant_key: str | None = None) -> list[Row]:
        return [r for r in self.events.values()
                if tenant_key is None or r["tenant_key"] == tenant_key]

    def chunk_rows(self, keys: Iterable[str]) -> dict[str, Row]:
        return {k: self.chunks[k] for k in keys if k in self.chunks}

    @property
    def backlog(self) -> int:
        """Records durable in the log and not yet in LanceDB."""
        return len(self._records)

    @property
    def lag(self) -> float:
        """Seconds the oldest record not yet in LanceDB has waited (0 when none)."""
        first = next(iter(self._records.values()), None)
        return 0.0 if first is None else max(0.0, time.monotonic() - first.since)

    # -- the replayer ----------------------------------------------------------------------
    def start(self) -> None:
        if self.replay and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="wal-replay")
            if self._records:
                self._idle.clear()
                self._wake.set()

    async def _run(self) -> None:
        while True:
            if not self._records:
                self._idle.set()
                await self._wake.wait()
                self._wake.clear()
                continue
            seqs, chunks, events = self._round()
            try:
                await self._apply(list(chunks.values()), list(events.values()))
            except Exception as exc:
                self.failures += 1
                delay = min(self._max_backoff, 0.25 * 2 ** min(self.failures, 10))
                log.warning("wal_replay_failed", error=type(exc).__name__,
                            detail=str(exc)[:200], pending=len(self._records), retry_in=delay)
                await asyncio.sleep(delay)
                continue
            self.failures = 0
            self._applied(seqs)
            try:  # every record up to seqs[-1] is in LanceDB (oldest first, in order)
                await self.wal.release(seqs[-1])
            except Exception as exc:
                log.warning("wal_release_failed", error=type(exc).__name__, detail=str(exc)[:200])

    def _round(self) -> tuple[list[int], dict[str, Row], dict[str, Row]]:
        """The oldest records, up to about ROUND_ROWS rows, deduplicated by id."""
        seqs: list[int] = []
        chunks: dict[str, Row] = {}
        events: dict[str, Row] = {}
        for seq, rec in self._records.items():
            if seqs and len(chunks) + len(events) >= ROUND_ROWS:
                break
            seqs.append(seq)
            for r in rec.chunks:
                chunks.setdefault(r["id"], r)
            for r in rec.events:
                events.setdefault(r["id"], r)
        return seqs, chunks, events

    def _applied(self, seqs: list[int]) -> None:
        for seq in seqs:
            rec = self._records.pop(seq)
            self.replayed += 1
            for r in rec.chunks:
                self.chunks.pop(r["id"], None)
            for r in rec.events:
                self.events.pop(r["id"], None)
                scope = self._scopes.get(r["scope"])
                if scope is not None:
                    scope.pop(r["id"], None)
                    if not scope:
                        del self._scopes[r["scope"]]

    async def drain(self, timeout: float | None = None) -> None:
        """Wait until everything logged so far is in LanceDB (a no-op without a replayer)."""
        if self._task is None:
            return
        await asyncio.wait_for(self._idle.wait(), timeout)

    async def stop(self, timeout: float = 2.0) -> None:
        """Replay for up to `timeout` s more, then stop and close the log: what is left
        stays in it for the next start."""
        task, self._task = self._task, None
        if task is not None:
            if not task.done():
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._idle.wait(), timeout)
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.wal.close()
