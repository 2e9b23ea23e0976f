"""The bodies this process forwarded lately, as it forwarded them (`GET /admin/sent`).

The decision log says which chunks a turn left out or brought back and why, and the store
keeps their text; what it cannot say is the request itself: the stubs, the cuts and the
recall block as they stood in it. So the pipeline keeps each turn's body here, serialized
once (the OpenAI-format body handed to the upstream transport, which then puts the route's
upstream model in `model` and, for a provider that is not OpenAI-wire, has LiteLLM
translate it), per session the last `per_session` turns, and at most `max_bytes` in all
(the oldest go first). In memory only: a restart or another replica does not have them
(docs/inspector.md). A turn sent again (a retry, a parallel sub-call) keeps its latest body.
A body is kept when its turn's write is (`Prepared.commit`): with auth passthrough, not
before the provider has accepted the caller's key, so a bogus key keeps nothing here either.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson

MAX_BYTES = 64 << 20  # all sessions together


@dataclass(frozen=True, slots=True)
class SentBody:
    turn: int
    raw: bytes  # the JSON body, byte for byte
    time: float


class SentBodies:
    def __init__(self, per_session: int = 8, max_bytes: int = MAX_BYTES) -> None:
        self.per_session = per_session  # 0: none kept
        self.max_bytes = max_bytes
        self.bytes = 0
        # oldest first; (tenant, session, turn) -> its body
        self._bodies: OrderedDict[tuple[str, str, int], SentBody] = OrderedDict()
        self._turns: dict[tuple[str, str], list[int]] = {}  # each session's, oldest first

    def put(self, tenant: str, session: str, turn: int, body: dict[str, Any]) -> None:
        if self.per_session <= 0:
            return
        raw = orjson.dumps(body)
        turns = self._turns.setdefault((tenant, session), [])
        if turn in turns:
            turns.remove(turn)
            self._drop((tenant, session, turn))
        turns.append(turn)
        self._bodies[(tenant, session, turn)] = SentBody(turn, raw, time.time())
        self.bytes += len(raw)
        while len(turns) > self.per_session:
            self._drop((tenant, session, turns.pop(0)))
        while self.bytes > self.max_bytes and len(self._bodies) > 1:
            t, s, n = next(iter(self._bodies))
            others = self._turns[(t, s)]
            others.remove(n)
            if not others:
                del self._turns[(t, s)]
            self._drop((t, s, n))

    def _drop(self, key: tuple[str, str, int]) -> None:
        gone = self._bodies.pop(key, None)
        if gone is not None:
            self.bytes -= len(gone.raw)

    def turns(self, tenant: str, session: str) -> list[int]:
        """The session's turns whose bodies are kept, in the order they were sent."""
        return list(self._turns.get((tenant, session), ()))

    def get(self, tenant: str, session: str, turn: int | None = None) -> SentBody | None:
        """Turn `turn`'s body, or the latest one sent; None when not kept."""
        if turn is None:
            turns = self._turns.get((tenant, session))
            if not turns:
                return None
            turn = turns[-1]
        return self._bodies.get((tenant, session, turn))
