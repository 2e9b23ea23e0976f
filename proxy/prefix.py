"""What a session's previous request leaves for its next one: its messages' infos (the
leading messages that are the same are not analysed again) and the state of the walk for
references (proxy/chunking.py continues it over the new messages only).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.analysis import MessageAnalyzer, MsgInfo


@dataclass(slots=True)
class Prefix:
    """The messages of a session's previous request and their infos."""

    messages: Sequence[dict[str, Any]]
    infos: list[MsgInfo]
    refs: RefState | None = None


@dataclass(slots=True)
class RefState:
    """proxy/chunking.py's `_references` as of the first `upto` messages: the rare-token
    index and, per message, the turns that referenced it. Mutated in place as a session's
    history grows."""

    upto: int = 0
    # rare token -> the first MAX_REF_SOURCES + 1 messages holding it (past that it is
    # not rare); tuples of ints, which the garbage collector stops tracking: a list per
    # token was most of what a full collection walked (~10,000 a 1,000-message session)
    index: dict[str, tuple[int, ...]] = field(default_factory=dict)
    refs: dict[int, list[int]] = field(default_factory=dict)  # only referenced messages


def known_prefix(messages: Sequence[dict[str, Any]], prev: Prefix | None) -> list[MsgInfo]:
    """The infos of the leading messages that equal the previous request's."""
    out: list[MsgInfo] = []
    if prev is not None:
        old, known = prev.messages, prev.infos
        for i in range(min(len(old), len(known), len(messages))):  # an in-process
            # caller may have grown the list it passed last time, in place
            if messages[i] != old[i]:
                break
            out.append(known[i])
    return out


def infos_of(analyzer: MessageAnalyzer, messages: Sequence[dict[str, Any]],
             prev: Prefix | None) -> tuple[list[MsgInfo], int]:
    """The messages' infos, and how many leading ones were the previous request's."""
    out = known_prefix(messages, prev)
    matched = len(out)
    return out + [analyzer.info(m) for m in messages[matched:]], matched
