"""Rows that are durable in the write-ahead log but not in LanceDB yet, and the task that
moves them there.

`record` appends one WAL record (a request's rows by table, JSON: `{"chunks": [..],
"events": [..]}`; turn summaries go the same way) and returns once it is fsynced; the rows
then sit in this in-memory view until the replayer has merged them into LanceDB
(`merge_insert` on content ids: a record replayed twice writes nothing twice), after which
the log segments that held them are deleted. Readers ask the view first and LanceDB
second and take the union, so what `record` acknowledged is visible at once; a row
leaves the view only after its LanceDB commit, so between the two reads it is in one of
them (read the view *before* LanceDB, never after). At start the whole log is loaded into
the view, and the replayer moves it into LanceDB while the store serves.

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

from store.quiet import QUIET, WRITE_REST_S
from store.wal import Loaded, WriteAheadLog

log = structlog.get_logger("ctxwarden.store")
REPLAY_LINGER_S = 0.25  # durability is the log's; LanceDB only needs to catch up

Row = dict[str, Any]
Rows = dict[str, list[Row]]  # by table name
Apply = Callable[[Rows], Awaitable[None]]
ROUND_ROWS = 2_000  # rows per replay round (one LanceDB commit per table per round)
REST_BACKLOG = 256  # records waiting: past this the replay stops waiting for a pause


@dataclass(slots=True)
class Pending:
    rows: Rows
    since: float  # when it became durable (monotonic): the replay lag


class Journal:
    """`tables`: the names a record may carry rows for; every row has `id` and `scope`."""

    def __init__(self, wal: WriteAheadLog, apply: Apply, tables: Iterable[str], *,
                 replay: bool = True, max_backoff: float = 30.0) -> None:
        self.wal = wal
        self._apply = apply
        self.tables = tuple(tables)
        self.replay = replay  # False: never move records into LanceDB (tests of a crash)
        self._max_backoff = max_backoff
        self._records: OrderedDict[int, Pending] = OrderedDict()  # by sequence number
        self.rows: dict[str, dict[str, Row]] = {t: {} for t in self.tables}  # by id
        self._scopes: dict[str, dict[str, dict[str, Row]]] = {t: {} for t in self.tables}
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self.failures = 0
        self.replayed = 0  # records moved into LanceDB (tests, benchmarks)

    # -- writing ---------------------------------------------------------------------------
    async def record(self, rows: Rows) -> None:
        """Durable when it returns (fsynced in the log); visible to readers at once."""
        rows = {t: r for t, r in rows.items() if r}
        unknown = set(rows) - set(self.tables)
        if unknown:
            raise ValueError(f"no such table in the journal: {sorted(unknown)}")
        payload = orjson.dumps(rows)
        await self.wal.append(payload, lambda seq: self._add(seq, rows))

    def load(self, loaded: Loaded) -> None:
        """Take what the log held at start into the view."""
        for seq, payload in loaded.records:
            try:
                rec = orjson.loads(payload)
                rows = {t: list(rec.get(t) or ()) for t in self.tables}
                unknown = set(rec) - set(self.tables)
            except (orjson.JSONDecodeError, AttributeError, TypeError) as exc:
                log.error("wal_record_unreadable", seq=seq, error=type(exc).__name__)
                continue
            if unknown:  # a newer version's table: kept in the log, not replayed here
                log.error("wal_record_unknown_tables", seq=seq, tables=sorted(unknown))
            self._add(seq, rows)

    def _add(self, seq: int, rows: Rows) -> None:
        self._records[seq] = Pending(rows, time.monotonic())
        for table, part in rows.items():
            by_id, scopes = self.rows[table], self._scopes[table]
            for r in part:
                by_id[r["id"]] = r
                scopes.setdefault(r["scope"], {})[r["id"]] = r
        if self.replay:
            self._idle.clear()
            self._wake.set()

    # -- reading (snapshots: take them before the LanceDB query) ----------------------------
    def scope_rows(self, table: str, scope: str) -> list[Row]:
        return list(self._scopes[table].get(scope, {}).values())

    def all_rows(self, table: str, tenant_key: str | None = None) -> list[Row]:
        return [r for r in self.rows[table].values()
                if tenant_key is None or r["tenant_key"] == tenant_key]

    def by_id(self, table: str, ids: Iterable[str]) -> dict[str, Row]:
        rows = self.rows[table]
        return {k: rows[k] for k in ids if k in rows}

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
                # Linger so one LanceDB commit carries a few hundred ms of requests: each
                # commit blocked the event loop ~1.3 ms, and it came once per request.
                await asyncio.sleep(REPLAY_LINGER_S)
                continue
            # A pause between requests (store/quiet.py), unless the backlog says a stream
            # of requests is outpacing the replay's once-a-second rounds.
            await QUIET.wait(lambda: WRITE_REST_S if len(self._records) < REST_BACKLOG else 0.0)
            seqs, rows = self._round()
            try:
                await self._apply(rows)
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

    def _round(self) -> tuple[list[int], Rows]:
        """The oldest records, up to about ROUND_ROWS rows, deduplicated by id per table."""
        seqs: list[int] = []
        merged: dict[str, dict[str, Row]] = {t: {} for t in self.tables}
        count = 0
        for seq, rec in self._records.items():
            if seqs and count >= ROUND_ROWS:
                break
            seqs.append(seq)
            for table, part in rec.rows.items():
                for r in part:
                    merged[table].setdefault(r["id"], r)
                count += len(part)
        return seqs, {t: list(m.values()) for t, m in merged.items() if m}

    def _applied(self, seqs: list[int]) -> None:
        for seq in seqs:
            rec = self._records.pop(seq)
            self.replayed += 1
            for table, part in rec.rows.items():
                by_id, scopes = self.rows[table], self._scopes[table]
                for r in part:
                    if by_id.get(r["id"]) is not r:
                        continue  # a later record's row of that id (a turn's summary again)
                    del by_id[r["id"]]
                    scope = scopes.get(r["scope"])
                    if scope is not None:
                        scope.pop(r["id"], None)
                        if not scope:
                            del scopes[r["scope"]]

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
