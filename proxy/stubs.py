"""What an evicted tool result leaves in the request: a stub naming the chunk, and the
result's identifiers (its digest), so an agent keeps the handles it will copy into later
calls (a payment id, a date of birth, a flight number) without the whole record."""

from __future__ import annotations

import re

from proxy.analysis import STRIP, WORD
from proxy.chunking import Part


def what(part: Part) -> str:
    return f"{part.tool_name} output" if part.tool_name else "tool output"


def stub_text(part: Part) -> str:
    ids = digest(part)
    kept = f"; identifiers in it: {', '.join(ids)}" if ids else ""
    return (f"[ctxwarden: {part.info.tokens} tokens of {what(part)} offloaded as chunk "
            f"{part.chunk.id}; relevant passages are recalled automatically{kept}]")


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
