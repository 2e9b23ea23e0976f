"""A turn's one durable write, before its forward or beside it (proxy/pipeline.py).

`Writes.write(chunks, events)` is one store append. When it fails with chunks in it,
nothing was dropped: the StoreUnavailable reaches the client as a 503. When only events
failed (a write of events alone: a recall or a restore, where nothing leaves the
request; or a store without the log that stored the chunks, `EventsUnrecorded`), the
request goes on: the decisions go to the log line `events_unrecorded` and are retried
with the turn log's next batch. `Writes.beside(...)` runs such an events-only write
while the request is forwarded (held here until it is done; `close` waits for it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import structlog

from proxy.turnlog import TurnLog
from store.base import Event, EvictedChunk, Store
from store.errors import EventsUnrecorded, StoreUnavailable

log = structlog.get_logger("ctxwarden")


class Writes:
    def __init__(self, store: Store, turns: TurnLog) -> None:
        self.store = store
        self.turns = turns  # retries the events a failed write could not log
        self._beside: set[asyncio.Task[None]] = set()  # decision logs beside their forward

    async def write(self, chunks: list[EvictedChunk], events: list[Event]) -> None:
        """One durable append (see the module for what a failure does)."""
        if not (chunks or events):
            return
        try:
            await self.store.record(chunks, events)
        except (StoreUnavailable, EventsUnrecorded) as exc:
            if chunks and not isinstance(exc, EventsUnrecorded):
                raise
            log.warning("events_unrecorded", error=str(exc), retry=True,
                        events=[f"{e.action} {e.chunk_id}: {e.reason}" for e in events])
            self.turns.retry(events)

    def beside(self, write: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """A decision log's write run beside the forward. A store's refusal is `write`'s
        to log and retry; anything else is logged here, and the request it belongs to is
        answered all the same."""
        async def guarded() -> None:
            try:
                await write
            except Exception:
                log.exception("events_unrecorded_beside")

        task = asyncio.get_running_loop().create_task(guarded(), name="log-beside")
        self._beside.add(task)
        task.add_done_callback(self._beside.discard)
        return task

    async def close(self) -> None:
        """Decisions still being logged are written before the store closes."""
        if self._beside:
            await asyncio.gather(*self._beside, return_exceptions=True)
