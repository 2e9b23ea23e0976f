"""What an evicted tool result leaves in the request: a stub naming the chunk, and the
result's identifiers (its digest), so an agent keeps the handles it will copy into later
calls (a payment id, a date of birth, a flight number) without the whole record."""

from __future__ import annotations

import math
import re

from proxy.analysis import STRIP, WORD
from proxy.chunking import RESULTS, Conversation, Part
from proxy.tokens import TokenCounter

# A cold history's stub, until it is sent: its characters at this many a token (measured
# 2.71-4.46 on the generated histories' and tau-bench's tool results), so the guess errs
# high. Most of such a history's stubs are never sent (their calls go too).
STUB_CHARS_PER_TOKEN = 2.5
MEMO = 100_000  # stubs' texts and counts remembered, at most (then forgotten at once)


def what(part: Part) -> str:
    return f"{part.tool_name} output" if part.tool_name else "tool output"


def stub_text(part: Part) -> str:
    """A pure function of the result and its chunk id, so every process renders the same
    bytes: the size is its characters. Its tokens were counted by a process that saw the
    session turn by turn and estimated by one that saw the history whole (after a restart,
    on another replica), and the figure changed every stub of the prompt: a prefix-cache
    miss for every session after each deploy."""
    ids = digest(part)
    kept = f"; identifiers in it: {', '.join(ids)}" if ids else ""
    return (f"[ctxwarden: {len(part.info.text)} characters of {what(part)} offloaded as "
            f"chunk {part.chunk.id}; relevant passages are recalled automatically{kept}]")


class StubCosts:
    """Each evicted result's stub text and what it costs, once per chunk (the text's digest
    reads the whole result; its count runs the tokenizer)."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self._cost: dict[str, int] = {}
        self._text: dict[str, str] = {}

    def text(self, part: Part) -> str:
        text = self._text.get(part.chunk.id)
        if text is None:
            if len(self._text) > MEMO:
                self._text.clear()
            text = self._text[part.chunk.id] = stub_text(part)
        return text

    def cost(self, part: Part) -> int:
        """Counted, except for a result whose content is only estimated (a cold
        history's): its stub is guessed from its length until a fit sends it
        (`count_sent`)."""
        cost = self._cost.get(part.chunk.id)
        if cost is None:
            if not part.info.exact:
                framing = part.info.tokens - part.info.content_tokens
                return framing + math.ceil(len(self.text(part)) / STUB_CHARS_PER_TOKEN
                                           * self.counter.factor)
            cost = self._count(part)
        return cost

    def _count(self, part: Part) -> int:
        framing = part.info.tokens - part.info.content_tokens
        cost = framing + self.counter.text(self.text(part))
        if len(self._cost) > MEMO:
            self._cost.clear()
        self._cost[part.chunk.id] = cost
        return cost

    def count_sent(self, conv: Conversation, evicted: set[str] | None) -> bool:
        """Count the guessed stubs a fit that evicts `evicted` sends (every one with
        `evicted` None); whether there were any."""
        found = False
        for p in conv.parts:
            if (p.info.exact or p.group is None or p.role not in RESULTS
                    or p.chunk.id in self._cost):
                continue
            if evicted is None or (p.chunk.id in evicted
                                   and not conv.dropped(p.group, evicted)):
                self._count(p)
                found = True
        return found


DIGEST_IDS = 16  # identifiers an evicted record's stub keeps, at most
DIGEST_CHARS_PER_TOKEN = 1.0  # their room, in characters per token of the result (~1/4)
_IS_KEY = re.compile(r'"\s*:')
_KEY = re.compile(r'"([A-Za-z_][\w ]{0,30})"\s*:\s*"?$')
_LIST_KEY = re.compile(r'"([A-Za-z_][\w ]{0,30})"\s*:\s*\[[^\[\]{}]*"?$')  # "ids": [.., x


def digest(part: Part) -> list[str]:
    """What an evicted tool result's stub keeps: the rare tokens (`info.rare`: ids, dates,
    numbers, what an agent copies into its next calls and cannot guess) that are values of
    a JSON record's fields, in order of first use, each with its key (`dob=1990-04-05`,
    `reservations=NO6JO3` for a list's items); keys themselves (`address1`) are not kept,
    nor tokens of plain text (a log's paths and timestamps: a stub of a listing stays a
    plain stub). At most DIGEST_IDS, in about a third of the result's tokens. One pass
    over the text, stopping when the room is used."""
    text, rare = part.info.text, part.info.rare
    if not rare or not isinstance(text, str) or ('":' not in text and '" :' not in text):
        return []  # no record's fields in it (checked in C: most outputs are plain text)
    room = int(part.info.tokens * DIGEST_CHARS_PER_TOKEN)
    out: list[str] = []
    seen: set[str] = set()
    for m in WORD.finditer(text):
        tok = m.group().strip(STRIP)
        if tok not in rare or tok in seen or _IS_KEY.match(text, m.end()):
            continue
        seen.add(tok)
        key = (_KEY.search(text, max(0, m.start() - 48), m.start())
               or _LIST_KEY.search(text, max(0, m.start() - 160), m.start()))
        if key is None:  # not a field of a record: plain text keeps a plain stub
            continue
        item = f"{key.group(1)}={tok}"
        room -= len(item) + 2
        if room < 0:
            break
        out.append(item)
        if len(out) >= DIGEST_IDS:
            break
    return out
