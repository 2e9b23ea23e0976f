"""What of a recalled passage is shown: the lines that match the query, the first field
of the record each belongs to and the fields after them, a record continued from the
next passage or begun in the one before, a window of a line too long to keep.

A passage is cut by length (store/terms.py `passages`), not by meaning, and a recall
block has a budget: these choose the part of it that answers the step (proxy/recall.py
`select`).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from store.terms import WORD, text_terms

FIELDS_AFTER = 4  # lines after a matched line that hold its record's other fields
FIELDS_BEFORE = 12  # of a matched field's record above it, back to its first (its id)
ASKED_ROW = 1000  # a line that is a row the question asked for: before any word match


def focus(text: str, qterms: set[str], max_tokens: int, count: Any,
          rows: tuple[tuple[str, ...], ...] = ()) -> str:
    """The lines of `text` that share the most terms with the query, then the first field
    of a JSON record they are fields of (`record_head`), then the lines just
    after them (a record's other fields: "Name: Yuki Lindqvist" is followed by her email
    and phone, which share no word with the question), as many as fit `max_tokens`, in
    their original order (the head when no line matches); "" when not even one line
    fits. A single line too long alone is cut and ends with " …". `rows`: the probes of
    the table rows the question asked for (the largest, the odd one: a row of values
    shares no word with "whose collection is the biggest"), the likeliest first; a line
    holding all of one's comes before any other, in that order."""
    if max_tokens <= 8:
        return ""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return ""
    scores = [len(qterms.intersection(text_terms(ln))) for ln in lines]
    for i, ln in enumerate(lines):  # the first-named row first
        j = next((j for j, probes in enumerate(rows) if all(p in ln for p in probes)), None)
        if j is not None:
            scores[i] += ASKED_ROW * (len(rows) - j)
    order = sorted(range(len(lines)), key=lambda i: (-scores[i], i))
    if scores[order[0]] == 0:
        order = [0]  # the head line
    else:  # then by distance after the nearest matched line above (the last one wins)
        after: dict[int, float] = {
            i + d: d for i in range(len(lines)) if scores[i]
            for d in range(1, FIELDS_AFTER + 1) if i + d < len(lines) and not scores[i + d]}
        for i in range(len(lines)):  # a matched field's record: its first field, its id
            head = record_head(lines, i) if scores[i] else None
            if head is not None and not scores[head]:
                after[head] = 0.5
        order = [i for i in order if scores[i]] + sorted(after, key=lambda i: (after[i], i))
    keep: list[int] = []
    for i in order:
        if count("\n".join(lines[j] for j in sorted([*keep, i]))) <= max_tokens:
            keep.append(i)
        elif not keep:  # the best line alone is too long: keep its part that matches
            ln = lines[i]
            chars = max(0, len(ln) * max_tokens // max(1, count(ln)) - 8)
            return window(ln, qterms, chars) if chars > 16 else ""
    return "\n".join(lines[j] for j in sorted(keep))


def record_head(lines: list[str], i: int) -> int | None:
    """The first field of the JSON record that line `i`, a field of it, belongs to (a
    pretty-printed record opens with its id: `"po_number": "PO-9179325"` over the
    `"origin_country": "VN"` a question matched); None when `i` is no such field, is the
    first itself, or its record opened more than `FIELDS_BEFORE` lines above."""
    ln = lines[i]
    if len(ln) > RECORD_LINE or not ln.lstrip().startswith('"'):
        return None
    indent = len(ln) - len(ln.lstrip())
    for k in range(i - 1, max(-1, i - FIELDS_BEFORE - 2), -1):
        above = lines[k]
        if len(above) - len(above.lstrip()) < indent:
            return k + 1 if above.rstrip().endswith("{") and k + 1 < i else None
    return None


CONTINUE_CHARS = 240  # of the next passage, after a match in a passage's last lines
RECORD_LINE = 100


def continued(text: str, nxt: str, qterms: set[str],
              onward: frozenset[str] = frozenset()) -> str:
    """`text`, and when one of its last `FIELDS_AFTER` lines is a short line (a record's
    field, a table row: `RECORD_LINE` characters at most) that matches the query, or any
    line that holds one of `onward` (the event a question asks what came after:
    proxy/step.py `onward_terms`), and the
    passage ends inside a block of lines (at a line's end, not at a blank line), the first
    lines of the passage after it (`FIELDS_AFTER`, `CONTINUE_CHARS` at most):
    passages are cut by length, so a record whose name ends one passage ("Invoice no:
    INV-2023-22540") has its fields ("Total: 11,442.89") at the head of the next, and a
    log line a question names ("Stopping container api (… OOMKilled=true)") the lines
    after it. Prose
    and paragraphs end where they end. A passage cut inside one long line of JSON (a
    minified answer) whose last `CONTINUE_CHARS` match takes the line on that far, cut
    at a space or comma and marked " …" ("churn_q3_v7", …, "bytes_scanned": "172,…")."""
    if not nxt or text.endswith("\n\n") or nxt.startswith("\n"):
        return text
    if not text.endswith("\n"):  # cut inside one long line: minified JSON's records
        if '":' not in text or not qterms.intersection(text_terms(text[-CONTINUE_CHARS:])):
            return text
        line = nxt.split("\n", 1)[0]
        if len(line) <= CONTINUE_CHARS:
            return text + line
        cut = max(line.rfind(" ", 0, CONTINUE_CHARS), line.rfind(",", 0, CONTINUE_CHARS))
        return text + line[:cut if cut > 0 else CONTINUE_CHARS].rstrip(" ,") + " …"
    tail = text.rstrip().splitlines()[-FIELDS_AFTER:]
    if not any(onward.intersection(found)
               or len(ln) <= RECORD_LINE and qterms.intersection(found)
               for ln in tail if (found := text_terms(ln))):
        return text
    head = "\n".join(nxt.lstrip("\n").splitlines()[:FIELDS_AFTER])[:CONTINUE_CHARS]
    return text.rstrip("\n") + "\n" + head if head.strip() else text


RECORD_BACK_CHARS = 640  # of the previous passage, back to the record a match ends
_YAML_FIELD = re.compile(r"\s+[A-Za-z_][\w.-]*:(?:\s|$)")  # `    defect: hydraulic leak`
_YAML_ITEM = re.compile(r"(\s*)- ")  # `  - id: TMX-441`: a list's record opens
LEAD_LINES = 3  # a paragraph's first lines, at most, taken from the passage before


def preceded(text: str, prev: str, qterms: set[str]) -> str:
    """The previous passage's lines that open the record `text` starts inside, then
    `text`: when one of its first `FIELDS_AFTER` lines matches the query and the record
    it belongs to opened in `prev`:
    - a short JSON field (`RECORD_LINE`), and `prev` holds the line that opens its
      record (a `{` indented less than the field) within its last `RECORD_BACK_CHARS`. A
      pretty-printed record longer than a passage has its id at the end of one passage
      (`"cid": "LVL/IPT/887097"`) and the field a question names at the head of the next
      (`"description": "primary transit"`). So does a YAML list's record, opened by
      its `- id: TMX-441` line (`_YAML_FIELD`, `_YAML_ITEM`);
    - any other line, and `prev` ends inside a paragraph of at most `LEAD_LINES` lines
      (after its last blank line): a linter's file path over its findings
      ("src/trackers/queue.ts" / "  88:11  error  Promises must be awaited"), a commit's
      hash and author over its date and message.
    `text` itself otherwise."""
    if not prev.endswith("\n") or prev.endswith("\n\n") or text.startswith("\n"):
        return text
    first = text.splitlines()[:FIELDS_AFTER]
    hit = next((ln for ln in first if len(ln) <= RECORD_LINE
                and (ln.lstrip().startswith('"') or _YAML_FIELD.match(ln))
                and qterms.intersection(text_terms(ln))), None)
    if hit is None:
        return _lead(text, prev, qterms, first)
    indent = len(hit) - len(hit.lstrip())
    yaml = not hit.lstrip().startswith('"')
    size = 0
    lines = prev.splitlines()
    for k in range(len(lines) - 1, -1, -1):
        ln = lines[k]
        size += len(ln) + 1
        if size > RECORD_BACK_CHARS:
            return text
        opens = ((m := _YAML_ITEM.match(ln)) is not None and len(m.group(1)) < indent
                 if yaml else ln.strip() == "{" and len(ln) - len(ln.lstrip()) < indent)
        if opens:
            return "\n".join(lines[k:]) + "\n" + text
        if ln.strip() in ("}", "},") and len(ln) - len(ln.lstrip()) < indent:
            return text  # another record closed: the match's own opened in no line here
    return text


def _lead(text: str, prev: str, qterms: set[str], first: list[str]) -> str:
    """`preceded`'s second case: the paragraph `prev` ends inside, then `text`."""
    if not any(qterms.intersection(text_terms(ln)) for ln in first):
        return text
    blank = prev.rfind("\n\n")  # none: the paragraph may have begun a passage earlier
    lead = prev[blank + 2:]
    if blank < 0 or len(lead) > RECORD_BACK_CHARS or lead.count("\n") > LEAD_LINES:
        return text
    return lead + text


HEAD_CHARS = 32  # a long line's first field, kept before a window that leaves it out


def window(line: str, qterms: set[str], chars: int) -> str:
    """`chars` characters of a line too long to keep whole (minified JSON, a long log
    line): the stretch holding the most distinct query terms, starting a little before the
    first of them, cut at spaces and marked " … " where text was left out. A stretch
    that leaves out the line's first field (a table row's or a log line's id:
    `WO-241004-0387  10/04 01:06  BW-P1  Backwash pump 1 tripped …`, where the question
    named only the pump) has it first (`_head`)."""
    head = _head(line)
    cut = _window(line, qterms, chars - len(head) - 3) if head else ""
    if cut.startswith("… "):
        return f"{head} {cut}"
    return _window(line, qterms, chars)


def _head(line: str) -> str:
    """A line's first field, when it is a short token that names something (`WO-241004-
    0387`, `2024-05-14T09:41:48.213Z`), not the opening of a JSON value or a word of
    prose ("The")."""
    first = line.split(None, 1)[0] if line.strip() else ""
    if (len(first) > HEAD_CHARS or first[:1] in '{["' or line[:1].isspace()
            or not any(c.isdigit() or c.isupper() for c in first[1:])):
        return ""
    return first


def _window(line: str, qterms: set[str], chars: int) -> str:
    spots = [(m.start(), t) for m in WORD.finditer(line)
             for t in text_terms(m.group()) if t in qterms]
    start = 0
    if spots:  # slide a window of `chars` over the matches: the most distinct terms wins
        inside: Counter[str] = Counter()
        best, j = -1, 0
        for k, (pos, _) in enumerate(spots):
            while j < len(spots) and spots[j][0] < pos + chars:
                inside[spots[j][1]] += 1
                j += 1
            if len(inside) > best:
                best, start = len(inside), pos
            inside[spots[k][1]] -= 1
            if not inside[spots[k][1]]:
                del inside[spots[k][1]]
        first = start
        start = max(0, first - chars // 8)
        if start:  # from a word's start, and not past the first match
            start = line.find(" ", start, first) + 1 or first
    end = min(len(line), start + chars)
    if end < len(line) and line.rfind(" ", start, end) > start:
        end = line.rfind(" ", start, end)
    return (("… " if start else "") + line[start:end].strip()
            + (" …" if end < len(line) else ""))


def without_taken(shown: str, plain: str, full: str) -> str:
    """`shown`, the lines `focus` kept of `full` (`plain` and the next passage's first
    lines), less those of the next passage: each shown line is matched, in order, to the
    earliest line of `full` it can be (so a line both hold stays)."""
    lines = [ln for ln in full.splitlines() if ln.strip()]
    own = len([ln for ln in plain.splitlines() if ln.strip()])
    kept: list[str] = []
    j = 0
    for ln in shown.splitlines():
        k = next((k for k in range(j, len(lines)) if lines[k] == ln), None)
        if k is None:  # not a whole line of `full` (a window of a long line): keep all
            return shown
        if k < own:
            kept.append(ln)
        j = k + 1
    return "\n".join(kept) if kept else shown
