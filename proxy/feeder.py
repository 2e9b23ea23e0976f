"""The relevance vectors' feeder: every new passage to the embedder, off the request path.

Each session's new passages wait in its own queue, first in, first out; the sessions take
turns, a batch each, so one session's burst (a history sent whole: thousands of passages,
~40 a second embed here) does not hold back every other session's for minutes. A session
that has sent nothing for `IDLE_S` waits behind every live one: a finished loop's backlog
does not halve a live loop's share. Past `FEED_MAX` waiting, a quiet session's queue, else
the longest, loses its oldest (those passages go without a cosine). As each batch comes
back its rows land in the passages' own session (store/vectors.py `Vectors.land`): the
request path looks nothing up in the embedder's cache (docs/design-notes.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from store.quiet import QUIET
from store.vectors import Vectors, units

log = structlog.get_logger("ctxwarden")
FEED_MAX = 4096  # passages waiting to be embedded; past it a queue loses its oldest
FEED_BATCH = 16  # units
# A session that has sent nothing for this long waits to be embedded behind every session
# that has: a finished loop's backlog must not halve a live loop's share (its questions,
# if any come, come later; a live loop's come now)
IDLE_S = 30.0


@dataclass(slots=True)
class _Queue:
    """One session's passages waiting to be embedded, first in, first out."""

    vectors: Vectors
    passages: deque[tuple[int, str]]
    seen: float  # when the session's latest request came (the Feeder's clock)


class Feeder:
    def __init__(self, embedder: Any, clock: Callable[[], float] = time.monotonic) -> None:
        self.embedder = embedder  # a store.embed.CachedEmbedder
        self._feed: dict[int, _Queue] = {}  # id(vectors) -> its queue, in turn order
        self._clock = clock  # when a session was last seen (`IDLE_S`)
        self._waiting = 0  # passages in `_feed`
        self._task: asyncio.Task[None] | None = None
        self._embedding = 0  # passages of the batch the embedder has now

    def feed(self, vectors: Vectors) -> None:
        """Hand the passages `vectors`' index gained to the embedder, as background work;
        their rows land in `vectors` as each batch comes back. Called on each of the
        session's requests: it also marks the session active (`IDLE_S`)."""
        now = self._clock()
        entry = self._feed.get(id(vectors))
        if entry is not None:
            entry.seen = now
        passages = vectors.new_passages()
        if not passages:
            return
        if entry is None:
            entry = self._feed[id(vectors)] = _Queue(vectors, deque(), now)
        entry.passages.extend(passages)
        self._waiting += len(passages)
        while self._waiting > FEED_MAX:  # the longest queue's oldest go without a vector,
            since = now - IDLE_S  # a quiet session's first
            quiet = [k for k, e in self._feed.items() if e.seen < since]
            key = max(quiet or self._feed, key=lambda k: len(self._feed[k].passages))
            longest = self._feed[key]
            for _ in range(min(self._waiting - FEED_MAX, len(longest.passages))):
                longest.passages.popleft()
                longest.vectors.give_up()
                self._waiting -= 1
            if not longest.passages:
                del self._feed[key]
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="vectors")

    async def _run(self) -> None:
        """One background job at a time: the embedder's bulk queue, never ahead of queries.
        Each batch comes from one session, the sessions in turn (`_next`); its rows land
        in the session its passages came from."""
        while self._feed:
            await QUIET.wait()
            batch: list[str] = []  # whole passages' units (store/vectors.py), off the path
            spans: list[tuple[Vectors, int, int]] = []  # (whose, passage, its units)
            key = self._next()
            entry = self._feed.pop(key)
            while entry.passages and len(batch) < FEED_BATCH:
                n, text = entry.passages.popleft()
                cut = units(text)
                spans.append((entry.vectors, n, len(cut)))
                batch += cut
            self._waiting -= len(spans)
            if entry.passages:  # its turn again after the others'
                self._feed[key] = entry
            self._embedding = len(spans)
            failed: Exception | None = None
            rows: Any = None
            try:
                if batch:
                    rows = await self.embedder.embed(batch)
            except Exception as exc:  # the batch is given up: it goes without vectors
                failed = exc
            finally:
                self._embedding = 0
            at = 0
            for vectors, n, k in spans:
                if failed is None:
                    vectors.land(n, rows[at:at + k] if k else ())
                else:
                    vectors.give_up()
                at += k
            if failed is not None:
                log.warning("passage_embedding_failed", error=type(failed).__name__)
                await asyncio.sleep(1.0)

    def _next(self) -> int:
        """Whose batch is next: the first session in turn order that sent a request in the
        last `IDLE_S`; only when none did, the first of the idle ones."""
        since = self._clock() - IDLE_S
        return next((k for k, e in self._feed.items() if e.seen >= since),
                    next(iter(self._feed)))

    @property
    def backlog(self) -> int:
        """Passages handed over whose vectors are not computed yet (`/admin/store`'s
        `vectors_pending`, `/metrics`' `ctxwarden_vectors_pending`)."""
        return self._waiting + self._embedding

    async def flush(self, timeout: float = 300.0) -> None:
        """Until every passage handed over is embedded (tests and benchmarks: a paced
        agent loop gives the embedder this time between turns)."""
        async with asyncio.timeout(timeout):
            while self._task is not None and not self._task.done():
                await asyncio.shield(self._task)

    async def close(self) -> None:
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
