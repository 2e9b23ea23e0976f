"""One summary row per turn: tokens by class, kept / evicted / recalled, budget, query.

Why: the eviction log holds one row per decision, which says what left and what came
back, but not what stayed, the budget it was fitted to, or the query a recall answered.
The inspector's timeline needs all three for every turn, including turns where nothing
was decided. Summaries are `store.base.Turn` rows in their own table (`Store.log_turns`,
`Store.turns`), one per (tenant, session, turn), so no reader of the decision log has to
filter them out.

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

import structlog

from store.base import Event, Store, Turn
from store.quiet import QUIET, WRITE_REST_S

if TYPE_CHECKING:
    from proxy.chunking import Conversation
    from proxy.fitting import Fit

log = structlog.get_logger("ctxwarden")
LINGER_S = 0.25


def summary(conv: Conversation, fit: Fit, costs: list[int], recalled: list[Event], *,
            tenant: str, session: str, policy: str, window: int, budget: int,
            recall_budget: int, tools: int,
            tokens_in: int, tokens_out: int, recall_tokens: int, query: str) -> Turn:
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
        "window": window, "budget": budget, "recall_budget": recall_budget,
        "tools": tools, "tokens_in": tokens_in, "tokens_out": tokens_out,
        "kept": dict(kept), "evicted": dict(evicted), "recalled": dict(by_class),
        "other": other, "recall_block": recall_tokens,
        "query": query if recalled else "",
    }
    return Turn(tenant, session, conv.logged, policy, data)


def view(t: Turn) -> dict[str, Any]:
    """A summary row as the admin API shows it."""
    return {"turn": t.turn, "time": t.time, "policy": t.policy, **t.data}


class TurnLog:
    """Queues summary rows and writes them in batches, one commit per batch."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._queue: list[Turn] = []
        self._events: list[Event] = []  # decisions whose write failed, tried once more
        self._task: asyncio.Task[None] | None = None
        self.written = 0
        self.failed = 0

    def submit(self, row: Turn) -> None:
        self._queue.append(row)
        self._start()

    def retry(self, events: list[Event]) -> None:
        """Events (recall, restore) the request path could not write: one more try with
        the next batch. They are in the `events_unrecorded` log line whatever happens."""
        self._events.extend(events)
        self._start()

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="turn-log")

    async def _run(self) -> None:
        # Linger so a busy agent loop commits a few times a second, not once per request:
        # every LanceDB commit costs CPU the requests on the same two cores need.
        await asyncio.sleep(LINGER_S)
        while self._queue or self._events:
            await QUIET.wait(WRITE_REST_S)  # its log append shares the requests' cores
            batch, self._queue = self._queue, []
            events, self._events = self._events, []
            if events:
                try:
                    await self.store.log(events)
                except Exception as exc:  # the request's log line holds them still
                    log.warning("events_lost", error=type(exc).__name__, events=len(events))
            if not batch:
                continue
            try:
                await self.store.log_turns(batch)
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
