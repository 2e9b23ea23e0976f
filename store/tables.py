"""`Tables`: `LanceStore`'s LanceDB connection and its table handles, opened and upgraded.

Opening connects (creating a local store's directory), opens or creates `chunks` and
`events` and adds the columns ours have gained since a table was made (a writer only; a
reader leaves the store as is), opens the tables newer than some stores (`attachments`,
`turns`: a read-only store made before them still opens), and `passages` once it exists:
the worker creates it when the vector size is known. Also here: the tables written
through the log (`LOGGED`, in replay order), their schemas, and the `StoreUnavailable`
every LanceDB failure of the store turns into.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

import lancedb
import structlog

from store import schema as S
from store.errors import StoreUnavailable, unavailable
from store.shared import retrying
from store.worker import ensure_columns, ensure_indexes

log = structlog.get_logger("ctxwarden.store")
# tables written through the log, in replay order
LOGGED = (S.CHUNKS, S.ATTACHMENTS, S.EVENTS, S.TURNS)
SCHEMAS = {S.CHUNKS: S.CHUNK_SCHEMA, S.ATTACHMENTS: S.ATTACHMENT_SCHEMA,
           S.EVENTS: S.EVENT_SCHEMA, S.TURNS: S.TURN_SCHEMA}


def store_unavailable(what: str, exc: BaseException) -> StoreUnavailable:
    text = str(exc)  # the cause is often at the end of an object store's long message
    detail = text if len(text) <= 1200 else f"{text[:500]} … {text[-700:]}"
    log.error("store_unavailable", op=what, error=type(exc).__name__, detail=detail)
    return unavailable(f"The context store cannot {what} right now ({type(exc).__name__});"
                            " nothing was dropped from the conversation.")


class Tables:
    def __init__(self, uri: str, storage_options: dict[str, str] | None,
                 read_consistency_interval: timedelta | None) -> None:
        self.uri = uri
        self._storage_options = storage_options
        self._consistency = read_consistency_interval
        self.db: Any = None  # set by the store once it is open (the log loaded too)
        self.handles: dict[str, Any] = {}
        self._upgraded: set[str] = set()  # tables known to have every column of ours
        self._passages_lock = asyncio.Lock()
        self.dim: int | None = None  # the stored vectors' size, once the table exists

    async def connect(self, *, upgrade: bool) -> Any:
        """Connect and open every table; the connection, for the caller to keep once the
        rest of its opening is done (`db` stays None until then)."""
        uri = self.uri
        if "://" not in uri or uri.startswith("file://"):
            Path(uri.removeprefix("file://")).mkdir(parents=True, exist_ok=True)
        if "://" not in uri:  # absolute: LanceDB takes a relative "db…" for its cloud
            uri = str(Path(uri).resolve())
        db = await lancedb.connect_async(uri, storage_options=self._storage_options,
                                         read_consistency_interval=self._consistency)
        for name in (S.CHUNKS, S.EVENTS):
            self.handles[name] = await open_table(db, name)
            if upgrade:  # a reader leaves the store as is
                await self.upgrade(name)
            await ensure_indexes(self.handles[name], name, S.INDEXED[name])
        await self.newer(db, S.ATTACHMENTS)
        await self._open_turns(db)
        await self._open_passages(None, db)
        return db

    async def _open_turns(self, db: Any) -> Any:
        return await self.newer(db, S.TURNS)

    async def newer(self, db: Any, name: str) -> Any:
        """A table newer than the store (turns, attachments): a read-only store made
        before it existed still opens, and shows only the rows in the log."""
        tbl = self.handles.get(name)
        if tbl is None:
            try:
                tbl = await open_table(db, name)
            except Exception as exc:
                log.warning("store_table_unavailable", table=name, error=type(exc).__name__,
                            detail=str(exc)[:200])
                return None
            await ensure_indexes(tbl, name, S.INDEXED[name])
            self.handles[name] = tbl
        return tbl

    async def upgrade(self, name: str) -> None:
        """Columns added since the table was made (chunks.message, events.media): a writer
        adds them when it opens the store (its rows carry them), a direct writer before
        its first write; a reader never changes the store, and reads older rows without
        them as text-only."""
        if name in self._upgraded:
            return
        added = await ensure_columns(self.handles[name], SCHEMAS[name])
        self._upgraded.add(name)
        if added:
            log.info("store_upgraded", table=name, columns=added)

    async def passages(self, dim: int | None = None) -> Any:
        """The passages table; created (by the worker) once the vector size is known."""
        tbl = self.handles.get(S.PASSAGES)
        if tbl is not None:
            return tbl
        async with self._passages_lock:  # recall and the worker may both get here first
            return await self._open_passages(dim)

    async def _open_passages(self, dim: int | None, db: Any = None) -> Any:
        tbl = self.handles.get(S.PASSAGES)
        if tbl is not None:
            return tbl
        db = db if db is not None else self.db
        try:
            tbl = await db.open_table(S.PASSAGES)
        except ValueError:  # not created yet
            if dim is None:
                return None
            tbl = await db.create_table(S.PASSAGES, schema=S.passage_schema(dim),
                                        exist_ok=True)
        self.dim = (await tbl.schema()).field("vector").type.list_size
        await ensure_indexes(tbl, S.PASSAGES, S.INDEXED[S.PASSAGES])
        self.handles[S.PASSAGES] = tbl
        return tbl

    def close(self) -> bool:
        """Drop the handles and the connection; whether the store was open."""
        for tbl in self.handles.values():
            tbl.close()
        self.handles.clear()
        if self.db is None:
            return False
        self.db.close()
        self.db = None
        return True


async def open_table(db: Any, name: str) -> Any:
    """Open a table, or create it: `create_table(exist_ok=True)` refuses one whose schema
    is older than ours (columns are added by `Tables.upgrade`)."""
    try:
        return await db.open_table(name)
    except ValueError:  # not created yet; replicas started together race to create it
        return await retrying(lambda: db.create_table(name, schema=SCHEMAS[name],
                                                      exist_ok=True), name)
