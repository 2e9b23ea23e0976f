"""The store seam: where evicted chunks go (never deleted), where decisions are logged,
and where recall looks.

`Store` is the Protocol the proxy's pipeline talks to. `MemoryStore` keeps everything in
process memory (tests, `store.path: ":memory:"`); `store.lance.LanceStore` is the durable
one. A store must make `offload` durable before it returns: the pipeline forwards a
request that drops a chunk only after its `offload` succeeded.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class EvictedChunk:
    tenant: str
    session: str
    chunk_id: str
    turn: int
    role: str
    klass: str
    tokens: int
    text: str


@dataclass(frozen=True, slots=True)
class Event:
    tenant: str
    session: str
    turn: int
    chunk_id: str
    klass: str
    tokens: int
    score: float
    action: str  # evict | recall | restore
    reason: str
    policy: str
    preview: str = ""
    time: float = field(default_factory=time.time)

    def public(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("tenant")
        d.pop("session")
        d["class"] = d.pop("klass")
        return d


@dataclass(frozen=True, slots=True)
class Passage:
    chunk_id: str
    passage_id: str
    text: str
    similarity: float
    turn: int
    role: str
    klass: str
    tokens: int


@dataclass(frozen=True, slots=True)
class RecallQuery:
    tenant: str
    session: str
    text: str
    exclude_chunk_ids: frozenset[str]
    budget_tokens: int
    top_k: int = 8
    min_similarity: float = 0.3
    cross_session: bool = False


class Store(Protocol):
    async def offload(self, chunks: Sequence[EvictedChunk]) -> None: ...
    async def log(self, events: Sequence[Event]) -> None: ...
    async def recall(self, query: RecallQuery) -> list[Passage]: ...
    async def evicted_ids(self, tenant: str, session: str) -> set[str]: ...
    async def events(self, tenant: str, session: str) -> list[Event]: ...
    async def sessions(self, tenant: str | None = None) -> list[dict[str, Any]]: ...
    async def close(self) -> None: ...


class MemoryStore:
    """Process-memory store: durable for the life of the process, no semantic recall."""

    def __init__(self) -> None:
        self.chunks: dict[tuple[str, str, str], EvictedChunk] = {}
        self._events: list[Event] = []

    async def offload(self, chunks: Sequence[EvictedChunk]) -> None:
        for c in chunks:
            self.chunks[(c.tenant, c.session, c.chunk_id)] = c

    async def log(self, events: Sequence[Event]) -> None:
        self._events.extend(events)

    async def recall(self, query: RecallQuery) -> list[Passage]:
        return []

    async def evicted_ids(self, tenant: str, session: str) -> set[str]:
        return {cid for (t, s, cid) in self.chunks if t == tenant and s == session}

    async def events(self, tenant: str, session: str) -> list[Event]:
        return [e for e in self._events if e.tenant == tenant and e.session == session]

    async def sessions(self, tenant: str | None = None) -> list[dict[str, Any]]:
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for e in self._events:
            if tenant is not None and e.tenant != tenant:
                continue
            s = out.setdefault(
                (e.tenant, e.session),
                {"tenant": e.tenant, "session": e.session, "events": 0, "evicted_tokens": 0,
                 "last_turn": 0, "last_time": 0.0},
            )
            s["events"] += 1
            s["last_turn"] = max(s["last_turn"], e.turn)
            s["last_time"] = max(s["last_time"], e.time)
            if e.action == "evict":
                s["evicted_tokens"] += e.tokens
        return sorted(out.values(), key=lambda s: -s["last_time"])

    async def close(self) -> None:
        return None
