"""The store seam: where evicted chunks go (never deleted), where decisions are logged,
and where recall looks.

`Store` is the Protocol the proxy's pipeline talks to. `MemoryStore` keeps everything in
process memory (tests, `store.path: ":memory:"`); `store.lance.LanceStore` is the durable
one. A store must make `offload` durable before it returns: the pipeline forwards a
request that drops a chunk only after its `offload` succeeded.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol

from store.media import NO_MEDIA, Media

TURN = "turn"  # Event.action of a per-turn summary row (proxy/turnlog.py), not a decision


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
    media: Media = NO_MEDIA  # the message's images, audio and files (store/media.py)


@dataclass(frozen=True, slots=True)
class Event:
    tenant: str
    session: str
    turn: int
    chunk_id: str
    klass: str
    tokens: int
    score: float
    action: str  # evict | recall | restore | turn (a summary row, see TURN)
    reason: str
    policy: str
    preview: str = ""
    time: float = field(default_factory=time.time)
    media: str = ""  # evict/cut of a message with media: what it held (Media.summary)

    def public(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("tenant")
        d.pop("session")
        d["class"] = d.pop("klass")
        return d


@dataclass(frozen=True, slots=True)
class Turn:
    """One turn's summary (proxy/turnlog.py): what the turn's numbers were, not a decision.
    `data` is any JSON object (window, budget, tokens kept/evicted/recalled by class, the
    recall's query, …); one row per (tenant, session, turn): the latest one written stays
    (a client that regenerates or edits its last turn sends that turn again)."""

    tenant: str
    session: str
    turn: int
    policy: str
    data: dict[str, Any]
    time: float = field(default_factory=time.time)


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
    async def record(self, chunks: Sequence[EvictedChunk], events: Sequence[Event]) -> None:
        """`offload` and `log` as one durable write: what a request evicts and why."""

    async def offload(self, chunks: Sequence[EvictedChunk]) -> None:
        """Durable when it returns; raises store.errors.StoreUnavailable when it cannot be."""

    async def log(self, events: Sequence[Event]) -> None:
        """Append decisions; one per (session, turn, chunk, action), the latest copy (its
        time: a chunk evicted, restored and evicted again in one turn is evicted)."""

    async def recall(self, query: RecallQuery) -> list[Passage]:
        """Best passages first, within `budget_tokens`; [] rather than an error."""

    async def evicted_ids(self, tenant: str, session: str) -> set[str]:
        """Chunks whose latest evict/restore event is an evict (sticky after a restart)."""

    async def events(self, tenant: str, session: str) -> list[Event]:
        """The session's decision log, by turn."""

    async def sessions(self, tenant: str | None = None) -> list[dict[str, Any]]:
        """`summarise`d sessions, most recent first."""

    async def fetch(self, tenant: str, session: str,
                    chunk_ids: Sequence[str]) -> list[EvictedChunk]:
        """The exact offloaded chunks, in the order asked (unknown ids are skipped); their
        text only (`media` empty): the bytes of their parts come from `media`."""

    async def media(self, tenant: str, session: str, chunk_id: str) -> Media:
        """An offloaded chunk's message skeleton and attachments, bytes included
        (`NO_MEDIA` for a text-only or unknown chunk); `Media.restore()` rebuilds it."""

    async def log_turns(self, turns: Sequence[Turn]) -> None:
        """Turn summaries (their own table); one per (tenant, session, turn), the latest."""

    async def turns(self, tenant: str, session: str) -> list[Turn]:
        """The session's turn summaries, by turn."""

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until background work (embedding) is done; a no-op when there is none."""

    async def close(self) -> None: ...


def with_media(chunks: Sequence[EvictedChunk], events: Sequence[Event]) -> list[Event]:
    """The events, those that evict or cut a chunk with media saying what it held."""
    said = {(c.tenant, c.session, c.chunk_id): c.media.summary()
            for c in chunks if c.media.attachments}
    out = list(events)
    for i, e in enumerate(out):
        what = said.get((e.tenant, e.session, e.chunk_id))
        if what and e.action in ("evict", "cut") and not e.media:
            out[i] = replace(e, media=what)
    return out


def latest_evicted(marks: Iterable[tuple[int, float, str, str]]) -> set[str]:
    """Chunk ids whose latest (turn, time, chunk_id, action) evict/restore mark is an evict;
    at a tie an evict wins (the conservative side: it is stored, never lost)."""
    last: dict[str, str] = {}
    for _turn, _time, cid, action in sorted(marks, key=lambda m: (m[0], m[1], m[3] == "evict")):
        if action in ("evict", "restore"):
            last[cid] = action
    return {cid for cid, action in last.items() if action == "evict"}


def summarise(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (tenant, session): events, evictions, recalls, evicted tokens, last turn/time;
    most recent first. `rows` need tenant, session, turn, time, action, tokens."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        s = out.setdefault((r["tenant"], r["session"]), {
            "tenant": r["tenant"], "session": r["session"], "events": 0, "evicted": 0,
            "recalled": 0, "evicted_tokens": 0, "last_turn": 0, "last_time": 0.0})
        s["events"] += int(r["action"] != TURN)  # summary rows are not decisions
        s["last_turn"] = max(s["last_turn"], int(r["turn"]))
        s["last_time"] = max(s["last_time"], float(r["time"]))
        if r["action"] == "evict":
            s["evicted"] += 1
            s["evicted_tokens"] += int(r["tokens"])
        elif r["action"] == "recall":
            s["recalled"] += 1
    return sorted(out.values(), key=lambda s: -s["last_time"])


class MemoryStore:
    """Process-memory store: durable for the life of the process, no semantic recall."""

    def __init__(self) -> None:
        self.chunks: dict[tuple[str, str, str], EvictedChunk] = {}
        self._events: list[Event] = []
        self._seen: dict[tuple[str, str, int, str, str], int] = {}  # key -> its index
        self._turns: dict[tuple[str, str, int], Turn] = {}

    async def record(self, chunks: Sequence[EvictedChunk], events: Sequence[Event]) -> None:
        await self.offload(chunks)
        await self.log(with_media(chunks, events))

    async def offload(self, chunks: Sequence[EvictedChunk]) -> None:
        for c in chunks:
            self.chunks[(c.tenant, c.session, c.chunk_id)] = c

    async def log(self, events: Sequence[Event]) -> None:
        for e in events:  # one per (session, turn, chunk, action), like LanceStore: the
            key = (e.tenant, e.session, e.turn, e.chunk_id, e.action)  # latest copy
            at = self._seen.get(key)
            if at is None:
                self._seen[key] = len(self._events)
                self._events.append(e)
            else:
                self._events[at] = e

    async def recall(self, query: RecallQuery) -> list[Passage]:
        return []

    async def evicted_ids(self, tenant: str, session: str) -> set[str]:
        return latest_evicted((e.turn, e.time, e.chunk_id, e.action)
                              for e in await self.events(tenant, session))

    async def events(self, tenant: str, session: str) -> list[Event]:
        mine = [e for e in self._events if e.tenant == tenant and e.session == session]
        return sorted(mine, key=lambda e: (e.turn, e.time))

    async def sessions(self, tenant: str | None = None) -> list[dict[str, Any]]:
        return summarise([asdict(e) for e in self._events
                          if tenant is None or e.tenant == tenant]
                         + [{**asdict(t), "action": TURN, "tokens": 0}
                            for t in self._turns.values()
                            if tenant is None or t.tenant == tenant])

    async def fetch(self, tenant: str, session: str,
                    chunk_ids: Sequence[str]) -> list[EvictedChunk]:
        found = (self.chunks.get((tenant, session, c)) for c in dict.fromkeys(chunk_ids))
        return [replace(c, media=NO_MEDIA) for c in found if c is not None]

    async def media(self, tenant: str, session: str, chunk_id: str) -> Media:
        c = self.chunks.get((tenant, session, chunk_id))
        return NO_MEDIA if c is None else c.media

    async def log_turns(self, turns: Sequence[Turn]) -> None:
        for t in turns:
            self._turns[(t.tenant, t.session, t.turn)] = t

    async def turns(self, tenant: str, session: str) -> list[Turn]:
        return sorted((t for (ten, ses, _), t in self._turns.items()
                       if ten == tenant and ses == session), key=lambda t: t.turn)

    async def flush(self, timeout: float | None = None) -> None:
        return None

    async def close(self) -> None:
        return None
