"""Sessions: who a conversation is, and the decisions that must stay sticky for it.

Which session a request belongs to, first rule that applies (README: "Sessions"):
1. the `X-Session-ID` header;
2. a session the client names in the body: `metadata.session_id`, `metadata.conversation_id`
   or `metadata.thread_id` (OpenAI's `metadata`; the proxy forwards it untouched);
3. derived: a hash of the tenant, the body's `user` and the first user message, the
   conversation's opening. Agent loops resend their whole history, so the opening is on
   every call. The system prompt is left out on purpose: clients put timestamps, dates and
   directory listings there, and a prompt that changes per call must not split one
   conversation into many. Two conversations can open with the same words, so the model's
   first reply (its text, and its tool calls with their random ids) is the conversation's
   anchor: the first conversation seen with a reply claims the opening's session, and one
   that opened the same way but got another reply gets a session of its own,
   `<opening>-<hash of its reply>` (`Sessions.resolve`). A client that trims its history
   no longer sends its first reply: its latest replies, seen with the opening before,
   find its session (in this process). On a store shared by replicas the claim is in the
   session's head, seen by every replica and kept across restarts (proxy/replica.py); on
   a local store it lives in this process, and after a restart the first conversation
   back claims the opening (docs/design-notes.md).

A session's state (the evicted set, recall references, the lexical index of its chunks)
is kept in a bounded LRU here — at most `server.max_sessions` states and about
`server.session_memory_mb` of memory (`SessionState.footprint`) — and rebuilt after a
restart or a drop: the evicted set and the evicted chunks' text from the store, the rest
from the history the client resends.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proxy.analysis import text_of
from proxy.chunking import Conversation
from proxy.errors import InvalidRequest
from proxy.prefix import Prefix
from proxy.recall import Block, ChunkMeta
from store.relevance import RelevanceIndex
from store.vectors import Vectors

_SESSION_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
_ALLOWED = "use 1-128 characters from A-Z a-z 0-9 . _ : -"
METADATA_KEYS = ("session_id", "conversation_id", "thread_id")


@dataclass(frozen=True, slots=True)
class SessionKey:
    id: str
    anchor: str | None = None  # derived sessions: a hash of the model's first reply
    # derived sessions: hashes of the request's latest replies, so a conversation whose
    # client trimmed its opening reply away is still found (`Sessions.resolve`)
    recent: tuple[str, ...] = ()


def session_key(header: str | None, tenant: str, body: dict[str, Any]) -> SessionKey:
    if header is not None:
        if not _SESSION_ID.match(header):
            raise InvalidRequest(f"Invalid X-Session-ID header: {_ALLOWED}",
                                 code="invalid_session_id", param="X-Session-ID")
        return SessionKey(header)
    meta = body.get("metadata")
    if isinstance(meta, dict):
        for key in METADATA_KEYS:
            named = meta.get(key)
            if named is None or named == "":
                continue
            if not isinstance(named, str):  # OpenAI's metadata values are strings
                raise InvalidRequest(f"Invalid metadata.{key}: a string is expected",
                                     code="invalid_session_id", param=f"metadata.{key}")
            # OpenAI takes any string here ("thread 42", a path, an email): one outside the
            # id characters names its session by its hash, never a refusal
            return SessionKey(named if _SESSION_ID.match(named)
                              else "m-" + _digest(named)[2:])
    messages: list[dict[str, Any]] = body["messages"]
    user = body.get("user")
    opening = _digest(tenant, user if isinstance(user, str) else "",
                      next((text_of(m) for m in messages if m.get("role") == "user"), ""))
    replies = [m for m in messages if m.get("role") == "assistant"]
    if not replies:
        return SessionKey(opening)
    recent: list[str] = []  # the latest distinct replies after the first, newest first
    for m in reversed(replies[1:]):
        if _distinct(m):
            recent.append(_reply_digest(m))
            if len(recent) == RECENT_REPLIES:
                break
    return SessionKey(opening, _reply_digest(replies[0]), tuple(recent))


RECENT_REPLIES = 4  # a request's latest replies that say which conversation it continues
DISTINCT_CHARS = 64  # a text reply this long is its conversation's own ("OK." is anyone's)
KNOWN_REPLIES = 4096  # replies an opening's state remembers the session of, at most


def _distinct(reply: dict[str, Any]) -> bool:
    return distinct(bool(reply.get("tool_calls")), text_of(reply))


def distinct(calls: bool, text: str) -> bool:
    """A reply no other conversation is likely to hold: tool calls (their ids are
    random) or a text of some length."""
    return calls or len(text) >= DISTINCT_CHARS


def _reply_digest(reply: dict[str, Any]) -> str:
    ids = [str(c.get("id", "")) for c in reply.get("tool_calls") or () if isinstance(c, dict)]
    return _digest(text_of(reply), *ids)[2:10]


def _digest(*pieces: str) -> str:
    h = hashlib.blake2b(digest_size=8)
    for piece in pieces:
        h.update(piece.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return "s-" + h.hexdigest()


# A state's memory per character of text its session has shown us, measured on the
# generated agent sessions (bench/agentgen.py, 80-270 k characters each): 16-35 bytes for
# the lexical index's passages and postings, the messages' analysis and the previous
# request kept to skip re-analysing it; plus the vectors' buffer as allocated.
STATE_BYTES_PER_CHAR = 32


@dataclass(slots=True)
class SessionState:
    evicted: set[str] = field(default_factory=set)
    recall_refs: dict[str, list[int]] = field(default_factory=dict)
    loaded: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # requests holding this state (preparing, or waiting for its lock): never dropped then
    users: int = 0
    last_prompt: list[tuple[str, int]] = field(default_factory=list)  # last forwarded
    # every chunk this session has shown us, in context or evicted (recall, RWOE's cos)
    index: RelevanceIndex = field(default_factory=RelevanceIndex)
    meta: dict[str, ChunkMeta] = field(default_factory=dict)
    prefix: Prefix | None = None  # the previous request, to skip re-analysing its messages
    vectors: Vectors | None = None  # the index's passages that have embeddings already
    blocks: list[Block] = field(default_factory=list)  # recall blocks on their messages
    anchor: str | None = None  # the reply that claimed a derived session (`resolve`)
    # an opening's state: the session each recent reply seen with this opening went to
    replies: OrderedDict[str, str] = field(default_factory=OrderedDict)
    # the logged turn of the latest distinct replies (chunk id -> turn: `turn_offset`)
    reply_turns: OrderedDict[str, int] = field(default_factory=OrderedDict)
    # shared stores (proxy/replica.py): the session head this state reflects, and the
    # decisions as last published or read from it
    version: int = 0
    published: dict[str, Any] | None = None

    def turn_offset(self, conv: Conversation) -> int:
        """Turns before the request's first reply. A request counts its turns by the
        replies it holds, and a client that trims its history (a sliding window) sends
        fewer and fewer of them: its log rows and events stalled at turn 6 for good. The
        latest distinct reply (tool calls, or 64+ characters) seen before says how many
        turns were dropped; then this request's latest ones are remembered."""
        offset = 0
        for p in reversed(conv.parts):
            if p.role == "assistant" and p.chunk.id in self.reply_turns:
                offset = max(0, self.reply_turns[p.chunk.id] - p.chunk.turn)
                break
        seen = 0
        for p in reversed(conv.parts):
            if p.role == "assistant" and distinct(p.group is not None, p.info.text):
                self.reply_turns[p.chunk.id] = p.chunk.turn + offset
                self.reply_turns.move_to_end(p.chunk.id)
                seen += 1
                if seen == RECENT_REPLIES:
                    break
        while len(self.reply_turns) > KNOWN_REPLIES:
            self.reply_turns.popitem(last=False)
        return offset

    def footprint(self) -> int:
        """Estimated bytes this state holds (see STATE_BYTES_PER_CHAR)."""
        n = self.index.chars * STATE_BYTES_PER_CHAR
        return n + (self.vectors.nbytes if self.vectors is not None else 0)


class Sessions:
    """Bounded LRU of session states, keyed by (tenant, session): at most `max_sessions`
    states and, after each request (`account`), about `max_bytes` of them. A state a
    request holds or waits for is never dropped (its next request would start a second
    one)."""

    def __init__(self, max_sessions: int = 10_000, max_bytes: int | None = None) -> None:
        self._states: OrderedDict[tuple[str, str], SessionState] = OrderedDict()
        self._max = max_sessions
        self._max_bytes = max_bytes
        self._bytes: dict[tuple[str, str], int] = {}  # as of each state's last request
        self.bytes = 0  # their sum
        self.dropped = 0  # states dropped for room, ever

    def get(self, tenant: str, session: str) -> SessionState:
        key = (tenant, session)
        state = self._states.get(key)
        if state is None:
            state = self._states[key] = SessionState()
            if len(self._states) > self._max:
                self._make_room(key, lambda: len(self._states) > self._max)
        else:
            self._states.move_to_end(key)
        return state

    def account(self, tenant: str, session: str, state: SessionState) -> None:
        """After a request: take the state's new footprint, and drop the least recently
        used other states while the total is over `max_bytes`."""
        key = (tenant, session)
        if self._states.get(key) is not state:  # dropped while its request ran
            return
        size = state.footprint()
        self.bytes += size - self._bytes.get(key, 0)
        self._bytes[key] = size
        limit = self._max_bytes
        if limit is not None and self.bytes > limit:
            self._make_room(key, lambda: self.bytes > limit)

    def _make_room(self, keep: tuple[str, str], over: Callable[[], bool]) -> None:
        for key in list(self._states):
            if not over():
                return
            state = self._states[key]
            # a state a request holds or waits for is kept: dropped, the next request of
            # its session would start a second state beside it (its lock no longer one)
            if key != keep and not state.users and not state.lock.locked():
                del self._states[key]
                self.bytes -= self._bytes.pop(key, 0)
                self.dropped += 1

    def resolve(self, tenant: str, key: SessionKey) -> tuple[str, SessionState]:
        """The session id and state for `key`: a derived session's opening is claimed by
        the first reply seen with it; another reply forks `<opening>-<anchor>`."""
        state = self.get(tenant, key.id)
        if key.anchor is None:
            return key.id, state
        opening = state
        # A client that trims its own history (a sliding window, a condenser keeping the
        # first user message) no longer sends the first reply: its latest replies, seen
        # with this opening before, say which conversation it continues.
        known = next((opening.replies[d] for d in key.recent if d in opening.replies), None)
        if state.anchor == key.anchor:
            sid = key.id
        elif known is not None:
            sid = known
            if sid != key.id:
                state = self.get(tenant, sid)
        elif state.anchor is None:
            state.anchor = key.anchor
            sid = key.id
        else:
            sid = f"{key.id}-{key.anchor}"
            state = self.get(tenant, sid)
            state.anchor = state.anchor or key.anchor
        for d in key.recent:
            opening.replies[d] = sid
            opening.replies.move_to_end(d)
        while len(opening.replies) > KNOWN_REPLIES:
            opening.replies.popitem(last=False)
        return sid, state

    def __len__(self) -> int:
        return len(self._states)

    def __contains__(self, key: tuple[str, str]) -> bool:
        return key in self._states
