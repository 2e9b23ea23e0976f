"""Messages → classed chunks, with turns, references and tool-call groups (DESIGN.md).

One chunk per message. Turn τ of a message = how many assistant messages precede it (each
model call is a turn), so any replica derives the same turns from the list alone. An
assistant message with `tool_calls` (or a legacy `function_call`) heads a *group* with the
tool results (the `function` message) answering it: those are kept or dropped together; a
single result may instead become a stub.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from policies.base import Chunk, ChunkClass
from proxy.analysis import MessageAnalyzer, MsgInfo, call_of
from proxy.config import ClassificationSettings
from proxy.prefix import Prefix, RefState, infos_of

P, S, T, E = (ChunkClass.PERMANENT, ChunkClass.STRUCTURAL, ChunkClass.TRANSIENT,
              ChunkClass.EPHEMERAL)
MAX_REF_SOURCES = 8  # a token found in more chunks than this is not rare here


@dataclass(slots=True)
class Part:
    chunk: Chunk
    info: MsgInfo
    role: str
    tool_name: str | None = None
    tool_args: str = ""  # a result's call arguments (what the output is about: relate.py)
    said: str = ""  # ... and what the calling message said beside its calls ("Equipment
    # record for the walk-in."), when it said anything
    group: int | None = None  # index of the assistant message heading its tool group
    cut_tokens: int | None = None  # what it costs after a head-and-tail cut (fitting.py)


@dataclass(slots=True)
class Conversation:
    parts: list[Part]
    turn: int  # current turn t
    groups: dict[int, list[int]] = field(default_factory=dict)  # head index -> result indices
    # turns before this request's first reply, when its client trimmed its history: what
    # the log numbers turns by (`logged`); decisions count turns within the request
    offset: int = 0

    refs: RefState | None = None

    @property
    def logged(self) -> int:
        """This request's turn as the log, the inspector and the headers number it."""
        return self.turn + self.offset

    @property
    def horizon(self) -> int:
        """One past the last evictable message (PolicyContext.horizon): the tail that is
        always sent is PERMANENT and not ranked."""
        return next((p.chunk.index + 1 for p in reversed(self.parts)
                     if p.chunk.klass is not ChunkClass.PERMANENT), 0)

    def prefix(self, messages: Sequence[dict[str, Any]]) -> Prefix:
        return Prefix(messages, [p.info for p in self.parts], self.refs)

    def dropped(self, head: int, evicted: set[str]) -> bool:
        """The tool group headed at `head` is dropped: its call and every result evicted
        (a result evicted alone leaves a stub, its call staying)."""
        if self.parts[head].chunk.id not in evicted:
            return False
        return all(self.parts[j].chunk.id in evicted for j in self.groups.get(head, ()))


class Chunker:
    def __init__(self, analyzer: MessageAnalyzer, settings: ClassificationSettings) -> None:
        self.analyzer = analyzer
        self.settings = settings
        self._rules = [(r, re.compile(r.pattern) if r.pattern else None) for r in settings.rules]

    def split(self, messages: Sequence[dict[str, Any]], prev: Prefix | None = None,
              known: tuple[list[MsgInfo], int] | None = None) -> Conversation:
        """`prev`: the session's previous request and its infos; a message equal to the one
        at the same position there reuses its info (dict equality runs in C, and skips the
        serialise-and-hash that finding a cached info costs). `known`: the messages' infos
        and how many leading ones were `prev`'s, when the caller has them already
        (`proxy.coldpool.ColdPool.infos`)."""
        infos, matched = known if known is not None else infos_of(self.analyzer, messages,
                                                                   prev)
        parts: list[Part] = []
        seen: dict[str, int] = {}
        groups: dict[int, list[int]] = {}
        call_owner: dict[str, tuple[int, str, str]] = {}  # tool_call_id -> (head, name, args)
        turn = 0
        for i, msg in enumerate(messages):
            info = infos[i]
            k = seen.get(info.fp, 0)
            seen[info.fp] = k + 1
            cid = info.fp if k == 0 else f"{info.fp}~{k}"
            role = str(msg.get("role"))
            part = Part(Chunk(cid, info.tokens, T, turn, index=i, origin=_origin(role)), info, role)
            if role == "assistant":
                calls = msg.get("tool_calls") or ()
                legacy = msg.get("function_call")
                if calls or isinstance(legacy, dict):
                    groups[i] = []
                    part.group = i
                    for c in calls:  # function and custom tool calls alike
                        call_owner[str(c.get("id"))] = (i, *call_of(c))
                    if not calls and isinstance(legacy, dict):  # answered by the next
                        call_owner[LEGACY] = (i, *call_of(legacy))  # `function` message
                turn += 1
            elif role in RESULTS:
                key = str(msg.get("tool_call_id")) if role == "tool" else LEGACY
                owner = call_owner.pop(LEGACY, None) if key == LEGACY else call_owner.get(key)
                if owner is not None:
                    part.group, part.tool_name, part.tool_args = owner
                    said = messages[owner[0]].get("content")
                    part.said = said if isinstance(said, str) else ""
                    groups[owner[0]].append(i)
            parts.append(part)
        conv = Conversation(parts, turn, groups)
        superseded = _superseded(messages, conv)
        # References continue from the previous request when this one extends it whole
        # (an agent loop's usual call); anything else is walked from the start.
        st = prev.refs if prev is not None and prev.refs is not None else None
        if st is None or matched != st.upto or matched != len(prev.messages if prev else ()):
            st = RefState()
        conv.refs = st
        _references(conv, st)
        self._classify(conv, superseded)
        return conv

    def _classify(self, conv: Conversation, superseded: set[int]) -> None:
        parts = conv.parts
        first_user = next((i for i, p in enumerate(parts) if p.role == "user"), None)
        last_user = next(
            (i for i in range(len(parts) - 1, -1, -1) if parts[i].role == "user"), None)
        dead = _dead_calls(conv)
        for i, p in enumerate(parts):
            c = p.chunk
            if p.role in ("system", "developer") or i == first_user:
                c.klass = P
            elif p.role == "user":
                c.klass = S
            elif p.role == "assistant":
                results = conv.groups.get(i)
                if i in dead:
                    c.klass = E  # a dead branch: every result failed and its tool later worked
                else:
                    c.klass = T if results is not None or not p.info.text else S
            elif i in dead or i in superseded:
                c.klass = E
            elif p.info.log_like and c.tokens >= self.settings.bulky_tokens:
                c.klass = E
            else:
                c.klass = S if c.refs else T
            self._apply_rules(p, i, first_user, last_user, len(parts))
        for i in _tail(conv, last_user):
            parts[i].chunk.klass = P

    def _apply_rules(self, p: Part, i: int, first: int | None, last: int | None, n: int) -> None:
        for rule, rx in self._rules:
            if rule.role is not None and rule.role != p.role:
                continue
            if rule.tool is not None and rule.tool != p.tool_name:
                continue
            if rule.position == "first" and i not in (first, 0):
                continue
            if rule.position == "last" and i not in (last, n - 1):
                continue
            if rx is not None and not rx.search(p.info.text):
                continue
            klass = rule.klass
            if klass is P and p.role in ("tool", "function"):
                klass = S  # text inside a tool result never promotes itself to PERMANENT
            p.chunk.klass = klass
            return


RESULTS = ("tool", "function")  # a tool call's result; `function`: the legacy API's
LEGACY = "\0legacy"  # call_owner's key for a legacy function_call awaiting its result


def _origin(role: str) -> str:
    return "system" if role == "developer" else ("tool" if role == "function" else role)


def _tail(conv: Conversation, last_user: int | None) -> list[int]:
    """What the model must answer now: the latest user message, the final message, and
    when the list ends in tool results, the last tool group whole."""
    n = len(conv.parts)
    tail = [n - 1] if n else []
    if last_user is not None:
        tail.append(last_user)
    last = conv.parts[-1] if n else None
    if last is not None and last.group is not None:
        tail.append(last.group)
        tail.extend(conv.groups.get(last.group, ()))
    return tail


def _dead_calls(conv: Conversation) -> set[int]:
    """Failed branches: each failed tool result once a later call of the same tool has
    succeeded, and each call whose every result is such. Until then the agent is still
    at it: its next call retries with those arguments (tau-bench: the reservation,
    flights and payment ids of an update the airline refused)."""
    parts = conv.parts
    dead: set[int] = set()
    worked: set[str | None] = set()  # tools that succeeded after the call looked at
    for head in sorted(conv.groups, reverse=True):
        results = conv.groups[head]
        failed = [j for j in results if parts[j].info.is_error]
        gone = [j for j in failed if parts[j].tool_name in worked]
        dead.update(gone)
        if results and len(gone) == len(results):
            dead.add(head)
        worked |= {parts[j].tool_name for j in results if not parts[j].info.is_error}
    return dead


def _superseded(messages: Sequence[dict[str, Any]], conv: Conversation) -> set[int]:
    """Tool results of a call repeated later with the same name and arguments."""
    last_seen: dict[str, int] = {}
    out: set[int] = set()
    for head, results in conv.groups.items():
        calls = {str(c.get("id")): c for c in messages[head].get("tool_calls") or ()}
        for j in results:
            call = calls.get(str(messages[j].get("tool_call_id")))
            if call is None:
                continue
            name, args = call_of(call)
            sig = f"{name}\0{args}"
            prev = last_seen.get(sig)
            if prev is not None:
                out.add(prev)
            last_seen[sig] = j
    return out


def _references(conv: Conversation, st: RefState) -> None:
    """A later assistant message reusing a chunk's rare tokens references that chunk.
    Messages before `st.upto` were walked on an earlier request: their references are
    copied, and only the new messages are walked (the same result as walking all)."""
    parts = conv.parts
    for j, turns in st.refs.items():  # all before `upto`
        parts[j].chunk.refs.extend(turns)
    index = st.index
    for i in range(st.upto, len(parts)):
        p = parts[i]
        if p.role == "assistant":
            hit: set[int] = set()
            for tok in p.info.rare:
                src = index.get(tok)
                if src and len(src) <= MAX_REF_SOURCES:
                    hit.update(src)
            for j in hit:
                st.refs.setdefault(j, []).append(p.chunk.turn)
                parts[j].chunk.refs.append(p.chunk.turn)
        for tok in p.info.rare:
            seen = index.get(tok, ())
            if len(seen) <= MAX_REF_SOURCES:
                index[tok] = (*seen, i)
    st.upto = len(parts)
