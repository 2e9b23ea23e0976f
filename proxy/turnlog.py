"""One summary row per turn in the decision log: tokens by class, kept / evicted / recalled.

Why: the eviction log holds one row per decision, which says what left and what came
back, but not what stayed, the budget it was fitted to, or the query a recall answered.
The inspector's timeline needs all three for every turn, including turns where nothing
was decided. The summary is an `Event` with action `turn` (chunk id `~turn`), so it
lands in the same table with the same tenant/session scoping and the same idempotent id
(one per session and turn), and needs no schema change; its numbers ride in `reason` as
JSON. `/admin/evictions`, `ctxwarden log` and the session counts leave these rows out.

Why a background writer: a LanceDB commit costs about 8 ms here, the whole proxy
overhead target at 50 messages. Summaries are not decisions (losing one loses a bar of
a chart, never a chunk), so they are queued, written in batches off the request path,
and flushed before a reader looks (`/admin/turns`) and before the store closes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import orjson
import structlog

from store.base import TURN, Event, Store

if TYPE_CHECKING:
    from proxy.chunking import Conversation
    from proxy.fitting import Fit
    from proxy.pipeline import RouteRuntime

log = structlog.get_logger("ctxwarden")
TURN_CHUNK = "~turn"
LINGER_S = 0.25


def summary(rt: RouteRuntime, conv: Conversation, fit: Fit, costs: list[int],
            recalled: list[Event], *,
            tenant: str, session: str, budget: int, recall_budget: int, tools: int,
            tokens_in: int, tokens_out: int, recall_tokens: int, query: str) -> Event:
    """The turn's row. kept/evicted are message tokens by class (an evicted tool result's
    stub counts under `other`, with the reply priming); recalled are passage tokens."""
    kept: dict[str, int] = defaultdict(int)
    evicted: dict[str, int] = defaultdict(int)
    other = fit.tokens
    for p, cost in zip(conv.parts, costs, strict=True):
        k = p.chunk.klass.value
        if p.chunk.id in fit.evicted:
            evicted[k] += p.chunk.tokens
        else:
            kept[k] += cost
            other -= cost
    by_class: dict[str, int] = defaultdict(int)
    for e in recalled:
        by_class[e.klass] += e.tokens
    data: dict[str, Any] = {
        "window": rt.window, "budget": budget, "recall_budget": recall_budget,
        "tools": tools, "tokens_in": tokens_in, "tokens_out": tokens_out,
        "kept": dict(kept), "evicted": dict(evicted), "recalled": dict(by_class),
        "other": other, "recall_block": recall_tokens,
        "query": query if recalled else "",
    }
    return Event(tenant, session, conv.turn, TURN_CHUNK, "", tokens_out, float(budget), TURN,
                 orjson.dumps(data).decode(), rt.route.policy)


def parse(e: Event) -> dict[str, Any]:
    """A summary row as the admin API shows it."""
    data: dict[str, Any] = orjson.loads(e.reason)
    return {"turn": e.turn, "time": e.time, "policy": e.policy, **data}


class TurnLog:
    """Queues summary rows and writes them in batches, one commit per batch."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._queue: list[Event] = []
        self._task: asyncio.Task[None] | None = None
        self.written = 0
        self.failed = 0

    def submit(self, event: Event) -> None:
        self._queue.append(event)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="turn-log")

    async def _run(self) -> None:
        # Linger so a busy agent loop commits a few times a second, not once per request:
        # every LanceDB commit costs CPU the requests on the same two cores need.
        await asyncio.sleep(LINGER_S)
        while self._queue:
            batch, self._queue = self._queue, []
            try:
                await self.store.log(batch)
                self.written += len(batch)
            except Exception as exc:  # a chart bar is lost, never a chunk: log and go on
                self.failed += len(batch)
                log.warning("turn_log_failed", error=type(exc).__name__, rows=len(batch))

    async def flush(self) -> None:
        """Until every submitted row is written (or has failed)."""
        while self._task is not None and not self._task.done():
            await asyncio.shield(self._task)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.flush()
