"""Sessions: who a conversation is, and the decisions that must stay sticky for it.

A session is the `X-Session-ID` header, else a stable hash of (tenant, system prompt, first
user message): an agent loop resending its history lands in the same session on every
call, on any replica. Its state (the evicted set, recall references, the lexical index of
its chunks) is kept in a bounded LRU here and rebuilt after a restart: the evicted set and
the evicted chunks' text from the store, the rest from the history the client resends.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from proxy.analysis import text_of
from proxy.chunking import Prefix
from proxy.errors import InvalidRequest
from proxy.recall import Block, ChunkMeta
from store.relevance import RelevanceIndex, Vectors

_SESSION_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")


def session_id(header: str | None, tenant: str, messages: list[dict[str, Any]]) -> str:
    if header is not None:
        if not _SESSION_ID.match(header):
            raise InvalidRequest(
                "Invalid X-Session-ID header: use 1-128 characters from A-Z a-z 0-9 . _ : -",
                code="invalid_session_id", param="X-Session-ID")
        return header
    system = next((text_of(m) for m in messages if m.get("role") in ("system", "developer")), "")
    first_user = next((text_of(m) for m in messages if m.get("role") == "user"), "")
    h = hashlib.blake2b(digest_size=8)
    for piece in (tenant, system, first_user):
        h.update(piece.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return "s-" + h.hexdigest()


@dataclass(slots=True)
class SessionState:
    evicted: set[str] = field(default_factory=set)
    recall_refs: dict[str, list[int]] = field(default_factory=dict)
    loaded: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last_prompt: list[tuple[str, int]] = field(default_factory=list)  # last forwarded
    # every chunk this session has shown us, in context or evicted (recall, RWOE's cos)
    index: RelevanceIndex = field(default_factory=RelevanceIndex)
    meta: dict[str, ChunkMeta] = field(default_factory=dict)
    prefix: Prefix | None = None  # the previous request, to skip re-analysing its messages
    vectors: Vectors | None = None  # the index's passages that have embeddings already
    blocks: list[Block] = field(default_factory=list)  # recall blocks on their messages


class Sessions:
    """Bounded LRU of session states, keyed by (tenant, session)."""

    def __init__(self, max_sessions: int = 10_000) -> None:
        self._states: OrderedDict[tuple[str, str], SessionState] = OrderedDict()
        self._max = max_sessions

    def get(self, tenant: str, session: str) -> SessionState:
        key = (tenant, session)
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = SessionState()
            while len(self._states) > self._max:
                self._states.popitem(last=False)
        else:
            self._states.move_to_end(key)
        return state

    def __len__(self) -> int:
        return len(self._states)
