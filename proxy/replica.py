"""Replicas on one shared store: a session's decisions travel through its head.

When `store.path` is an object-store URI, any number of `ctxwarden serve` processes may
serve any turn of any session. What a single process would remember between two turns of
a session (`SessionState`: the sticky evictions, the turns each chunk was recalled on,
the recall blocks riding on their messages byte for byte) is published after each turn
that changed it, as the session's head (store/shared.py), and read back at the start of
every request: when the head's version is not the one this process last saw, another
replica served the session since, and the state is replaced by the head's (the text of
chunks evicted meanwhile is fetched from the store, for recall). The rest of the state
is rebuilt from the request itself, as after a restart: agent loops resend their history,
so the lexical index and the chunk metadata come out the same on any replica.

A derived session (no id from the client: proxy/session.py) is claimed by the first
conversation whose reply reaches any replica: the claim is in the head, so a replica
that has not seen the session reads the head before it decides whether a conversation
opening the same way is the claimant or a fork (`claimed`).

Cost per request: one point read of the head (two on a replica's first sight of a
derived session); per turn that changes the decisions, one
commit of it, after the turn's chunks and events are committed (docs/design-notes.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from proxy.recall import Block, ChunkMeta, Recalled
from proxy.session import SessionState
from store.base import Store
from store.relevance import Hit

if TYPE_CHECKING:
    from store.shared import SessionHeads


def _block_json(b: Block) -> dict[str, Any]:
    return {"host": b.host, "text": b.text, "tokens": b.tokens,
            "passages": [[r.hit.chunk_id, r.hit.piece, r.hit.text, r.hit.score,
                          r.hit.strength, r.turn, r.role, r.klass, r.tokens, r.why]
                         for r in b.passages]}


def _block(d: dict[str, Any]) -> Block:
    passages = tuple(Recalled(Hit(cid, int(piece), text, float(score), float(strength)),
                              int(turn), role, klass, int(tokens), why)
                     for cid, piece, text, score, strength, turn, role, klass, tokens, why
                     in d["passages"])
    return Block(d["host"], d["text"], int(d["tokens"]), passages)


EMPTY: dict[str, Any] = {"evicted": [], "recall_refs": {}, "blocks": []}


def snapshot(state: SessionState) -> dict[str, Any]:
    """The decisions another replica needs to answer the session's next turn the same way
    (and, for a derived session, which conversation claimed it: `Sessions.resolve`)."""
    out = {"evicted": sorted(state.evicted),
           "recall_refs": {k: list(v) for k, v in sorted(state.recall_refs.items())},
           "blocks": [_block_json(b) for b in state.blocks]}
    if state.anchor is not None:
        out["anchor"] = state.anchor
    return out


class Replica:
    def __init__(self, heads: SessionHeads, store: Store) -> None:
        self.heads = heads
        self.store = store

    async def refresh(self, state: SessionState, tenant: str, session: str) -> None:
        """Take the session's head if another replica (or an earlier process) moved it.
        Raises StoreUnavailable when the head cannot be read (nothing is forwarded)."""
        head = await self.heads.get(tenant, session)
        if head is None:
            return  # nobody published: first sight loads from the events (Pipeline._load)
        version, data = head
        if version == state.version and state.loaded:
            return
        state.evicted = set(data["evicted"])
        state.recall_refs = {k: list(v) for k, v in data["recall_refs"].items()}
        state.blocks = [_block(b) for b in data["blocks"]]
        state.anchor = data.get("anchor") or state.anchor
        missing = sorted(c for c in state.evicted if c not in state.index)
        if missing:
            for c in await self.store.fetch(tenant, session, missing):
                if state.index.add(c.chunk_id, c.text):
                    state.meta[c.chunk_id] = ChunkMeta(c.turn, c.role, c.klass)
        state.version, state.published, state.loaded = version, data, True

    async def claimed(self, state: SessionState, tenant: str, session: str) -> None:
        """Learn who claimed a derived session before this process decides: the head's
        anchor, if any replica published one (a claim, once published, never changes)."""
        if state.anchor is None:
            async with state.lock:
                await self.refresh(state, tenant, session)

    async def publish(self, state: SessionState, tenant: str, session: str) -> None:
        """Commit the session's decisions as its next head, unless they did not change.
        On failure the state is marked stale, so the next request reloads the head."""
        data = snapshot(state)
        if data == (state.published or EMPTY):
            return
        try:
            await self.heads.put(tenant, session, state.version + 1, data)
        except BaseException:
            state.version = -1
            raise
        state.version += 1
        state.published = data

    async def close(self) -> None:
        await self.heads.close()
