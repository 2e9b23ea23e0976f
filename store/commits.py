"""Group commit: one writer per table; concurrent writes share one LanceDB commit.

Why: every LanceDB write is a commit of a new table version, and commits to one table
from many coroutines at once conflict. Measured by `make bench-load` (200 sessions
evicting at the same time): LanceDB gave up with "Too many concurrent writers" after
retrying for 30 s, so requests waited up to 36 s and 2.5 % were refused with 503. Here a
write joins the queue of its table and waits for the commit that carries it; while one
commit runs, the next batch gathers. So there is never more than one writer per table, a
busy proxy commits a few times a second rather than once per request, and a write still
returns only once it is durable. A batch that fails fails every write in it, as each
would have failed alone (the caller answers 503 and drops nothing).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pyarrow as pa

Rows = list[dict[str, Any]]
Commit = Callable[[str, Rows, pa.Schema], Awaitable[None]]


class GroupCommit:
    def __init__(self, commit: Commit) -> None:
        self._commit = commit
        self._queues: dict[str, list[tuple[Rows, pa.Schema, asyncio.Future[None]]]] = {}
        self._writers: dict[str, asyncio.Task[None]] = {}

    async def merge(self, name: str, rows: Rows, schema: pa.Schema) -> None:
        """Durable when it returns; raises what the commit carrying these rows raised."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.add_done_callback(_retrieve)  # a caller that left never reads its outcome
        self._queues.setdefault(name, []).append((rows, schema, fut))
        writer = self._writers.get(name)
        if writer is None or writer.done():
            self._writers[name] = asyncio.get_running_loop().create_task(
                self._write(name), name=f"commit-{name}")
        await asyncio.shield(fut)  # a caller that leaves does not cancel others' commit

    async def _write(self, name: str) -> None:
        queue = self._queues[name]
        while queue:
            batch = queue[:]
            del queue[:]
            by_id: dict[Any, dict[str, Any]] = {}
            for rows, _, _ in batch:  # same id: the latest copy (a turn's summary may
                for r in rows:  # be written again; anything else repeats its content)
                    by_id[r["id"]] = r
            schema = batch[-1][1]
            try:
                await self._commit(name, list(by_id.values()), schema)
            except Exception as exc:
                for _, _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            for _, _, fut in batch:
                if not fut.done():
                    fut.set_result(None)


def _retrieve(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled():
        fut.exception()
