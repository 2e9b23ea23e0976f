"""LanceDB table layouts, row keys and filter strings for the store.

Why hashed keys: tenant and session ids come from clients. Every filter the store sends
to LanceDB compares a column against a hex digest it computed itself (`scope`,
`tenant_key`), so no client text is ever spliced into a SQL predicate, and an equality on
one short column is what LanceDB prefilters fastest. The raw ids are kept beside them
for display. Row ids are content ids, so `merge_insert` makes a repeated write change
nothing; an event or a turn summary written again under its id (a chunk evicted, taken
back and evicted again within one turn; a turn sent again) replaces the one before.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import time
from collections.abc import Iterable, Sequence
from typing import Any

import orjson
import pyarrow as pa

from store.base import Event, EvictedChunk, Turn
from store.media import Attachment
from store.split import passage_id, split_text

CHUNKS = "chunks"  # raw evicted chunks, durable before embedding (never deleted)
PASSAGES = "passages"  # ≤256-token pieces with vectors (written by the background worker)
EVENTS = "events"  # the decision log
TURNS = "turns"  # one summary per turn (the inspector's timeline), not decisions
ATTACHMENTS = "attachments"  # evicted messages' images, audio and files (store/media.py)
INDEXED = {CHUNKS: ("id",), PASSAGES: ("id", "scope"), EVENTS: ("id", "scope"),
           TURNS: ("id", "scope"), ATTACHMENTS: ("id", "chunk_key")}

_HEX = frozenset("0123456789abcdef")


def hkey(*parts: str) -> str:
    """The parts, each followed by a unit separator, hashed in one call (the digest is
    the one an update per part made: ~0.4 µs less a key, ~1,800 keys a cold history)."""
    joined = "\x1f".join(parts) + "\x1f" if parts else ""
    return hashlib.blake2b(joined.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


def scope_key(tenant: str, session: str) -> str:
    return hkey("scope", tenant, session)


def tenant_key(tenant: str) -> str:
    return hkey("tenant", tenant)


def chunk_key(tenant: str, session: str, chunk_id: str) -> str:
    return hkey("chunk", tenant, session, chunk_id)


def eq(column: str, digest: str) -> str:
    """`column = '<digest>'`; refuses anything but a digest, so no caller text gets in."""
    if not digest or not set(digest) <= _HEX:
        raise ValueError("filters compare against hex digests only")
    return f"{column} = '{digest}'"


_OWNER = [
    pa.field("scope", pa.string()), pa.field("tenant_key", pa.string()),
    pa.field("tenant", pa.string()), pa.field("session", pa.string()),
]

CHUNK_SCHEMA = pa.schema([
    pa.field("id", pa.string()), *_OWNER, pa.field("chunk_id", pa.string()),
    pa.field("turn", pa.int64()), pa.field("role", pa.string()), pa.field("class", pa.string()),
    pa.field("tokens", pa.int64()), pa.field("text", pa.string()), pa.field("time", pa.float64()),
    pa.field("message", pa.string()),  # Media.message: "" (or null, older rows) for text only
])

EVENT_SCHEMA = pa.schema([
    pa.field("id", pa.string()), *_OWNER, pa.field("turn", pa.int64()),
    pa.field("chunk_id", pa.string()), pa.field("class", pa.string()),
    pa.field("tokens", pa.int64()), pa.field("score", pa.float64()),
    pa.field("action", pa.string()), pa.field("reason", pa.string()),
    pa.field("policy", pa.string()), pa.field("preview", pa.string()),
    pa.field("time", pa.float64()),
    pa.field("media", pa.string()),  # Event.media ("" or null, older rows: none)
])

# One row per non-text part of an evicted message; the bytes, or the URL of a reference.
ATTACHMENT_SCHEMA = pa.schema([
    pa.field("id", pa.string()), *_OWNER, pa.field("chunk_key", pa.string()),
    pa.field("chunk_id", pa.string()), pa.field("index", pa.int64()),
    pa.field("kind", pa.string()), pa.field("mime", pa.string()),
    pa.field("filename", pa.string()), pa.field("url", pa.string()),
    pa.field("sha256", pa.string()), pa.field("size", pa.int64()),
    pa.field("data", pa.large_binary()), pa.field("time", pa.float64()),
])


TURN_SCHEMA = pa.schema([
    pa.field("id", pa.string()), *_OWNER, pa.field("turn", pa.int64()),
    pa.field("policy", pa.string()), pa.field("data", pa.string()),  # a JSON object
    pa.field("time", pa.float64()),
])


def passage_schema(dim: int) -> pa.Schema:
    return pa.schema([
        pa.field("id", pa.string()), pa.field("chunk_key", pa.string()), *_OWNER,
        pa.field("chunk_id", pa.string()), pa.field("passage_id", pa.string()),
        pa.field("ordinal", pa.int64()), pa.field("turn", pa.int64()),
        pa.field("role", pa.string()), pa.field("class", pa.string()),
        pa.field("text", pa.string()), pa.field("tokens", pa.int64()),
        pa.field("vector", pa.list_(pa.float32(), dim)), pa.field("time", pa.float64()),
    ])


@functools.lru_cache(maxsize=4096)
def _owner(tenant: str, session: str) -> dict[str, str]:
    """A row's owner columns; memoised (two digests per row: a cold history's ~1,800 rows
    spent ~8 ms here). Callers spread it into a new dict and never mutate it."""
    return {"scope": scope_key(tenant, session), "tenant_key": tenant_key(tenant),
            "tenant": tenant, "session": session}


def chunk_rows(chunks: Iterable[EvictedChunk]) -> list[dict[str, Any]]:
    """One row per distinct chunk (a batch may repeat one: keep the first)."""
    now = time.time()
    rows: dict[str, dict[str, Any]] = {}
    for c in chunks:
        key = chunk_key(c.tenant, c.session, c.chunk_id)
        rows.setdefault(key, {
            "id": key, **_owner(c.tenant, c.session), "chunk_id": c.chunk_id, "turn": c.turn,
            "role": c.role, "class": c.klass, "tokens": c.tokens, "text": c.text, "time": now,
            "message": c.media.message,
        })
    return list(rows.values())


def attachment_rows(chunks: Iterable[EvictedChunk]) -> list[dict[str, Any]]:
    """Attachment id = (chunk, position, content hash): the same part is stored once. The
    bytes go as base64 text (the log's records are JSON); `arrow` decodes them."""
    now = time.time()
    rows: dict[str, dict[str, Any]] = {}
    for c in chunks:
        if not c.media.attachments:  # most chunks: no key to compute
            continue
        key = chunk_key(c.tenant, c.session, c.chunk_id)
        for a in c.media.attachments:
            aid = hkey("attachment", key, str(a.index), a.sha256)
            rows.setdefault(aid, {
                "id": aid, **_owner(c.tenant, c.session), "chunk_key": key,
                "chunk_id": c.chunk_id, "index": a.index, "kind": a.kind, "mime": a.mime,
                "filename": a.filename, "url": a.url, "sha256": a.sha256, "size": len(a.data),
                "data": base64.b64encode(a.data).decode(), "time": now,
            })
    return list(rows.values())


def arrow(name: str, rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """Rows (as logged) into a table to commit: attachments get their bytes back."""
    if name == ATTACHMENTS:
        rows = [{**r, "data": _bytes(r["data"])} for r in rows]
    return pa.Table.from_pylist(rows, schema=schema)


def _bytes(data: str | bytes) -> bytes:
    return base64.b64decode(data) if isinstance(data, str) else data


def event_rows(events: Sequence[Event]) -> list[dict[str, Any]]:
    """Event id = (scope, turn, chunk, action): a retried request logs nothing twice. Of
    two with one id in a batch the later is kept, as `Store.log` says and MemoryStore
    does (this kept the first)."""
    rows: dict[str, dict[str, Any]] = {}
    for e in events:
        key = hkey("event", e.tenant, e.session, str(e.turn), e.chunk_id, e.action)
        rows[key] = {
            "id": key, **_owner(e.tenant, e.session), "turn": e.turn, "chunk_id": e.chunk_id,
            "class": e.klass, "tokens": e.tokens, "score": float(e.score), "action": e.action,
            "reason": e.reason, "policy": e.policy, "preview": e.preview, "time": e.time,
            "media": e.media,
        }
    return list(rows.values())


def passage_rows(chunks: Iterable[dict[str, Any]], max_tokens: int) -> list[dict[str, Any]]:
    """Passage rows (no vector yet) of chunk rows. Every chunk yields at least one (a blank
    one for blank text), so "chunks without passages" is exactly "not embedded yet"."""
    out: list[dict[str, Any]] = []
    for c in chunks:
        pieces = [(p.text, p.tokens) for p in split_text(c["text"], max_tokens)] or [("", 0)]
        for i, (text, tokens) in enumerate(pieces):
            out.append({
                "id": hkey("passage", c["id"], str(i)), "chunk_key": c["id"],
                **{k: c[k] for k in ("scope", "tenant_key", "tenant", "session", "chunk_id",
                                     "turn", "role", "class", "time")},
                "passage_id": passage_id(c["chunk_id"], i), "ordinal": i, "text": text,
                "tokens": tokens,
            })
    return out


def turn_rows(turns: Sequence[Turn]) -> list[dict[str, Any]]:
    """Turn id = (tenant, session, turn): the latest summary of a turn stays (a client
    that regenerates or edits its last turn sends that turn again)."""
    rows: dict[str, dict[str, Any]] = {}
    for t in turns:
        key = hkey("turn", t.tenant, t.session, str(t.turn))
        rows[key] = {
            "id": key, **_owner(t.tenant, t.session), "turn": t.turn, "policy": t.policy,
            "data": orjson.dumps(t.data).decode(), "time": t.time,
        }
    return list(rows.values())


def row_turn(r: dict[str, Any]) -> Turn:
    return Turn(r["tenant"], r["session"], int(r["turn"]), r["policy"], orjson.loads(r["data"]),
                time=float(r["time"]))


def row_event(r: dict[str, Any]) -> Event:
    return Event(r["tenant"], r["session"], int(r["turn"]), r["chunk_id"], r["class"],
                 int(r["tokens"]), float(r["score"]), r["action"], r["reason"], r["policy"],
                 preview=r["preview"], time=float(r["time"]), media=r.get("media") or "")


def row_attachment(r: dict[str, Any]) -> Attachment:
    """From LanceDB (bytes) or from the log (base64 text)."""
    return Attachment(int(r["index"]), r["kind"], r["mime"], _bytes(r["data"]), r["url"],
                      r["filename"], r["sha256"])


def row_chunk(r: dict[str, Any]) -> EvictedChunk:
    return EvictedChunk(r["tenant"], r["session"], r["chunk_id"], int(r["turn"]), r["role"],
                        r["class"], int(r["tokens"]), r["text"])
