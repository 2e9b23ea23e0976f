"""Tables a command prints in aligned columns, read by where their columns are.

`kubectl get pods`, `df -h`, a report's fixed-width listing: columns padded with spaces,
some cells empty (`damage_notes` blank for a unit left clean), some holding a single
space (`568 (4m ago)`, `Metro Roofing & Gutters`). Split at runs of two spaces, such a
row has fewer cells than its header and the table falls apart (store/tabular.py
`tables` then sees runs of rows with no header). Read by position instead: a header line
(three names or more, no numbers, `table_header`; not a title line over a header of
more names, `EXPIRY REPORT  window=90d  run=…`), the lines under it to the first
blank one, and the columns are the stretches some line prints in; a blank stretch in
every line separates them. A header name that covers no stretch of its own (a text
column whose rows share a space) joins the name before it. A row padded unlike the rest
(`RFI-0147  Sprinkler main routing  BR+A Engineers  2024-03-04 …`), whose values the
columns' ends would cut, is read at its runs of two spaces when they give a cell for
each column.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from store.cells import Row

MIN_ROWS = 5  # rows under the header, at least
# (header, [((the row's line,), its cells)]): store/cells.py's Table with a header
Aligned = tuple[list[str], list[Row]]
_INK = re.compile(r"\S+")
_COLUMN = re.compile(rb"\x01+")
_RULE = re.compile(r"^[\s\-=+|:]+$")
_CELLS = re.compile(r"\S(?: ?\S)*")  # a header's names: words a single space apart
_RUNS = re.compile(r"\s{2,}")


def fixed_tables(lines: list[str]) -> Iterator[Aligned]:
    """(header, [((the row's line,), cells)]) of each aligned table in `lines`."""
    i = 0
    while i < len(lines):
        names = _header(lines[i])
        under = _header(lines[i + 1]) if names is not None and i + 1 < len(lines) else None
        if names is None or under is not None and len(under) > len(names):
            i += 1  # no header; or a title over one, whose names are more
            continue
        j = i + 1
        body = []
        while j < len(lines) and lines[j].strip():
            if not _RULE.match(lines[j]):
                body.append(lines[j])
            j += 1
        body = _rows(body)
        table = _read(lines[i], body) if len(body) >= MIN_ROWS else None
        if table is None:  # a title line over the header: the header may be next
            i += 1
            continue
        yield table
        i = j


def _header(line: str) -> list[str] | None:
    if "  " not in line.strip() or len(line) > 400:
        return None
    names = _CELLS.findall(line)
    if len(names) < 3 or any(len(n) > 40 or "|" in n or ": " in n or (
            any(c.isdigit() for c in n) and not any(c.isalpha() for c in n)) for n in names):
        return None  # a title ("EDC query listing  |  snapshot: ..."), or a row of values
    return names


def _read(head: str, body: list[str]) -> Aligned | None:
    width = max(len(head), *(len(b) for b in body))
    ink = bytearray(width)
    for line in (head, *body):
        for m in _INK.finditer(line):
            ink[m.start():m.end()] = b"\x01" * (m.end() - m.start())
    spans = [(m.start(), m.end()) for m in _COLUMN.finditer(bytes(ink))]
    cols: list[tuple[int, int, str]] = []  # (start, end, name)
    for a, b in spans:
        names = list(_CELLS.finditer(head, a, b))
        if not names and cols:  # no name of its own: part of the column before
            s, _, n = cols[-1]
            cols[-1] = (s, b, n)
            continue
        # names that share a stretch (a long value ran under the next name): each from
        # where its name starts
        starts = [a] + [m.start() for m in names[1:]]
        labels = [m.group() for m in names] or [""]
        for k, name in enumerate(labels):
            cols.append((starts[k], starts[k + 1] if k + 1 < len(starts) else b, name))
    if len(cols) < 3 or sum(1 for _, _, n in cols if n) < 3:
        return None
    rows: list[Row] = []
    splits = [_RUNS.split(line.strip()) for line in body]
    full = [k for k, split in enumerate(splits) if len(split) == len(cols)]
    apart = 0  # rows with a cell for each column where their runs and positions disagree
    for k, line in enumerate(body):
        cells = [line[a:b].strip() for a, b, _ in cols]
        if any(0 < b < len(line) and not line[b - 1].isspace() and not line[b].isspace()
               for _, b, _ in cols[:-1]):  # a column's end cuts a value: padded unlike
            split = splits[k]  # the rest; read as printed, if it can be
            cells = split if len(split) == len(cols) else cells
        apart += len(splits[k]) == len(cols) and cells != splits[k]
        rows.append(((line.strip(),), cells))
    if len(full) * 2 > len(body) and apart * 2 > len(full):
        # the header does not stand over its columns (names right-aligned over numbers,
        # a time column with no name, a header padded unlike its rows): where most rows
        # print a cell for each column, runs of two spaces read them as printed
        for k in full:
            rows[k] = (rows[k][0], splits[k])
    return [n for _, _, n in cols], rows


_SUMMARY = re.compile(r"\b(?:total|totals|sum|avg|average|mean|min|max|stddev|overall)\b",
                      re.IGNORECASE)


def _rows(body: list[str]) -> list[str]:
    """`body` less the summary lines under its rows (`TOTAL  1.7 PiB …`, `MIN/MAX VAR:
    0.86/1.12  STDDEV: 4.19`): split unlike the rows, they would read as the column's
    ends."""
    counts = [len(_RUNS.split(line.strip())) for line in body]
    if not counts:
        return body
    common = max(set(counts), key=lambda n: (counts.count(n), n))
    end = len(body)
    while end > 0 and counts[end - 1] != common and _SUMMARY.search(body[end - 1]):
        end -= 1
    return body[:end]
