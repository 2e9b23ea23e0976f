"""Session heads: how replicas that share one store in object storage see each other's turns.

Every replica keeps a session's decisions in process (the proxy's `SessionState`: sticky
evictions, recall references, the recall blocks riding on messages). When several
replicas serve one session, each turn may land on another replica, so that state must
be the store's, not the process's. A *head* is one row per (tenant, session) in the
table `session_heads`, next to the others on the same URI: a version number and the
session's decisions as JSON, written after the turn's chunks and events are committed
and before the request is forwarded. A replica reads the head (the session's row with
the highest version) on every request of a shared store and reloads only when the
version moved.

The head holds no text: chunk text stays in `chunks` (committed before the head names
it), so a head never points at a chunk the store does not have. Every publish appends
a row (session, version): appends from many replicas commit side by side, where updates
of one row per session conflicted under load ("Too many concurrent writers" after 30 s,
make bench-scale). Every `COMPACT_EVERY` writes of this process, the rows its writes
superseded are deleted (per session, every version below the one it last published:
`prune`) and the table is compacted, since every write adds a fragment that reads must
open and every kept row is read again by the session's next request.

Writers: the heads of concurrent requests share one commit (`GroupCommit`, as the
tables' rows do), so each table has at most one writer per replica; a commit that still
loses LanceDB's race ("Too many concurrent writers", a commit conflict) is tried again
after a jittered backoff, and a write whose request failed on the way a few times
(`retrying`, also used by store/writes.py for its commits; reads are retried by
object_store itself, a conditional PUT is not).

Failure: a head that cannot be read or written raises `StoreUnavailable` (the proxy's
503): without it a replica cannot know whether another one evicted something since, and
forwarding could resend what was evicted. `with_timeouts` bounds how long an object store
that does not answer holds a request (object_store retries for 180 s by default).
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

import lancedb
import pyarrow as pa
import structlog

from store.commits import GroupCommit
from store.errors import StoreUnavailable, unavailable
from store.schema import eq, scope_key
from store.worker import compact

log = structlog.get_logger("ctxwarden.store")
T = TypeVar("T")
HEADS = "session_heads"
COMPACT_EVERY = 32  # commits of this process between compactions of the heads
PRUNE_BATCH = 200  # sessions per delete statement
# LanceDB's words for a commit that lost the race to another writer (retryable)
CONFLICTS = ("too many concurrent writers", "commit conflict")
RETRY_FOR = 60.0  # s of our own retries, beyond LanceDB's, before a write gives up
# object_store's words for a request that failed on the way (refused, reset, timed out):
# tried TRANSIENT more times (object_store does not retry a conditional PUT, LanceDB's
# commit of a manifest; under load moto took more than a 2 s connect timeout)
TRANSIENTS = ("error sending request", "error performing", "timed out")
TRANSIENT = 3
# object_store's defaults hold a request up to 180 s (10 retries) when the store does not
# answer; a replica should answer 503 in seconds instead. The user's options win.
TIMEOUTS = {"timeout": "30s", "client_max_retries": "3", "client_retry_timeout": "10"}
SCHEMA = pa.schema([
    pa.field("scope", pa.string()), pa.field("tenant", pa.string()),
    pa.field("session", pa.string()), pa.field("version", pa.int64()),
    pa.field("data", pa.string()), pa.field("time", pa.float64()),
])


def is_object_store(uri: str) -> bool:
    """`s3://…`, `gs://…`, `az://…` (any scheme but `file://`); a path is local."""
    return "://" in uri and not uri.startswith("file://")


def with_timeouts(uri: str, options: dict[str, str] | None) -> dict[str, str] | None:
    """An object store's options with our bounded timeouts where the user set none."""
    if not is_object_store(uri):
        return options
    given = {k.lower() for k in options or {}}
    return {**{k: v for k, v in TIMEOUTS.items() if k not in given}, **(options or {})}


def is_conflict(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(c in text for c in CONFLICTS)


def is_transient(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(c in text for c in TRANSIENTS)


async def retrying(call: Callable[[], Awaitable[T]], what: str,
                   budget: float = RETRY_FOR) -> T:
    """`call()`, again after 0.05-2 s (jittered, doubling) while it loses a commit race
    and `budget` s have not passed, or up to TRANSIENT times when a request failed on the
    way; any other error at once. Only for idempotent calls: reads, a merge_insert on an
    id, an append read by its highest version (a commit whose answer was lost and that is
    made again adds nothing, or a copy of the same head)."""
    loop = asyncio.get_running_loop()
    deadline, attempt, transient = loop.time() + budget, 0, 0
    while True:
        try:
            return await call()
        except Exception as exc:
            if is_conflict(exc) and loop.time() < deadline:
                why = "conflict"
            elif is_transient(exc) and transient < TRANSIENT:
                why, transient = "transient", transient + 1
            else:
                raise
            attempt += 1
            delay = random.uniform(0.5, 1.0) * min(2.0, 0.05 * 2 ** attempt)
            log.info("store_retry", table=what, why=why, attempt=attempt,
                     retry_in=round(delay, 3), detail=str(exc)[-160:])
            await asyncio.sleep(delay)


def _failed(what: str, exc: BaseException) -> StoreUnavailable:
    log.error("store_unavailable", op=what, error=type(exc).__name__, detail=str(exc)[:300])
    # the client's message names no exception: which one LanceDB raises for an unreachable
    # store varies (RuntimeError on a read, ValueError on reopening); the log line has it
    return unavailable(f"The context store cannot {what} right now; nothing was dropped"
                       " from the conversation.")


class SessionHeads:
    def __init__(self, uri: str, storage_options: dict[str, str] | None = None) -> None:
        self.uri = uri
        self._options = with_timeouts(uri, storage_options)
        self._db: Any = None
        self._table: Any = None
        self._lock = asyncio.Lock()
        self._group = GroupCommit(self._commit)
        self._writes = 0
        self._compacting: asyncio.Task[None] | None = None
        self._superseded: dict[str, int] = {}  # scope -> the version this process wrote

    async def _open(self) -> Any:
        if self._table is not None:
            return self._table
        async with self._lock:
            if self._table is None:
                # strong consistency: every read sees the latest commit of any replica
                db = await lancedb.connect_async(self.uri, storage_options=self._options,
                                                 read_consistency_interval=timedelta(0))
                # replicas started together race to create it: the losers open it
                self._table = await retrying(
                    lambda: db.create_table(HEADS, schema=SCHEMA, exist_ok=True), HEADS)
                self._db = db
        return self._table

    async def get(self, tenant: str, session: str) -> tuple[int, dict[str, Any]] | None:
        """(version, decisions) of the session, or None if no replica wrote one yet."""
        try:
            tbl = await self._open()
            rows = await (tbl.query().where(eq("scope", scope_key(tenant, session)))
                          .select(["version", "time", "data"]).to_list())
        except Exception as exc:
            self._table = None  # reopen next time (the object store may come back)
            raise _failed("read the session's state", exc) from exc
        if not rows:
            return None
        row = max(rows, key=lambda r: (int(r["version"]), float(r["time"])))
        data: dict[str, Any] = json.loads(row["data"])
        return int(row["version"]), data

    async def put(self, tenant: str, session: str, version: int,
                  data: dict[str, Any]) -> None:
        """Publish the session's decisions as `version` (committed when it returns; the
        heads of concurrent requests share the commit)."""
        row = {"id": uuid.uuid4().hex,  # never merged away with another request's head
               "scope": scope_key(tenant, session), "tenant": tenant, "session": session,
               "version": version, "data": json.dumps(data, separators=(",", ":")),
               "time": time.time()}
        try:
            await self._open()
            await self._group.merge(HEADS, [row], SCHEMA)
        except Exception as exc:
            self._table = None
            raise _failed("publish the session's state", exc) from exc

    async def _commit(self, name: str, rows: list[dict[str, Any]], sch: pa.Schema) -> None:
        tbl = await self._open()
        data = pa.Table.from_pylist(rows, schema=sch)
        await retrying(lambda: tbl.add(data), name)
        for r in rows:
            self._superseded[r["scope"]] = max(r["version"], self._superseded.get(r["scope"], 0))
        self._writes += 1
        if self._writes % COMPACT_EVERY == 0 and (self._compacting is None
                                                  or self._compacting.done()):
            done, self._superseded = self._superseded, {}
            self._compacting = asyncio.get_running_loop().create_task(self._tidy(tbl, done))

    async def _tidy(self, tbl: Any, written: dict[str, int]) -> None:
        await self.prune(tbl, written)
        await compact(tbl, HEADS)

    @staticmethod
    async def prune(tbl: Any, written: dict[str, int]) -> int:
        """Delete, per session, the head rows below the version this process wrote: a read
        takes the highest version, so they are never read again (another replica's newer
        head stays). Returns the sessions pruned; a failure is logged, never raised (the
        rows are only kept longer)."""
        items = [(scope, v) for scope, v in written.items() if v > 1]
        try:
            for i in range(0, len(items), PRUNE_BATCH):
                where = " OR ".join(f"({eq('scope', scope)} AND version < {int(v)})"
                                    for scope, v in items[i:i + PRUNE_BATCH])
                await retrying(functools.partial(tbl.delete, where), HEADS)
        except Exception as exc:
            log.warning("store_prune_failed", table=HEADS, error=type(exc).__name__,
                        detail=str(exc)[:200])
            return 0
        return len(items)

    async def close(self) -> None:
        if self._compacting is not None and not self._compacting.done():
            await asyncio.wait([self._compacting], timeout=5)
        if self._table is not None:
            self._table.close()
            self._table = None
        if self._db is not None:
            self._db.close()
            self._db = None
