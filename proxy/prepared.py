"""What the pipeline hands the edge: the body to forward, what the client and the request
log see of the decisions, and the store write a deferred request still owes
(proxy/pipeline.py makes it; proxy/handlers.py forwards it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from proxy.config import RouteSettings
from proxy.timing import Laps
from store.base import Event


@dataclass(slots=True)
class Prepared:
    body: dict[str, Any]
    route: RouteSettings
    tenant: str
    session: str
    turn: int
    tokens_in: int
    tokens_out: int
    budget: int
    evicted: int  # chunks out of context in this request
    new_evictions: int
    recalled: int
    prefix_ratio: float
    events: list[Event] = field(default_factory=list)
    # The store write and the session's new decisions, when `prepare(defer=True)` left
    # them for the caller to run once the upstream has accepted the request.
    pending: Callable[[bool], Awaitable[None]] | None = None
    # A turn that drops nothing, prepared with `beside`: its decisions' write, in flight.
    beside: asyncio.Task[None] | None = None
    laps: Laps = field(default_factory=Laps)  # where its preparation's time went
    # The client's messages that `body["messages"]` holds, in order, by index: the i-th
    # message forwarded is the client's `kept[i]`, itself or its stub, cut or recall host.
    kept: tuple[int, ...] = ()

    async def commit(self, beside: bool = False) -> None:
        """Run what `prepare(defer=True)` deferred (a no-op otherwise, or the second time);
        with `beside`, a write that drops nothing is left running (`settled`)."""
        pending, self.pending = self.pending, None
        if pending is not None:
            await pending(beside)

    async def settled(self) -> None:
        """The decisions' write left beside the forward, done: the client's answer waits
        for it, so what the turn recalled is in /admin once the answer arrives. Its failure
        is the pipeline's to log and retry (proxy/writes.py), never the request's."""
        task, self.beside = self.beside, None
        if task is not None:
            await asyncio.shield(task)

    def headers(self) -> dict[str, str]:
        """What the client sees of the decisions (README: response headers)."""
        return {"X-Ctxwarden-Session": self.session,
                "X-Ctxwarden-Turn": str(self.turn),  # the `turn` of its /admin rows
                "X-Ctxwarden-Tokens-In": str(self.tokens_in),
                "X-Ctxwarden-Tokens-Out": str(self.tokens_out),
                "X-Ctxwarden-Evicted": str(self.evicted),
                "X-Ctxwarden-Recalled": str(self.recalled)}

    def log_fields(self) -> dict[str, Any]:
        """The request log line's fields (never message text or keys)."""
        return {"session": self.session, "route": self.route.name, "tenant": self.tenant,
                "turn": self.turn, "tokens_in": self.tokens_in, "tokens_out": self.tokens_out,
                "budget": self.budget, "evicted": self.evicted,
                "new_evictions": self.new_evictions, "recalled": self.recalled,
                "policy": self.route.policy, "prefix_ratio": round(self.prefix_ratio, 3),
                "phases_ms": self.laps.rounded()}
