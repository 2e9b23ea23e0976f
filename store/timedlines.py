"""A log's timed lines: where each line says in prose how long a thing took (a dbt run's
`[SUCCESS 1 in 812.44s]`, a GC log's pauses, a goroutine dump's `[select, 847
minutes]`, pytest's `--durations`), the lines are a column of times (`TIMED`) whose top
and bottom rows are marked as a table's are (store/extremes.py), so "the slowest model"
finds its line.
"""

from __future__ import annotations

import re
from itertools import islice

from store.extremes import TOTAL, End, column_terms, tag

# a duration in a line's prose: `[SUCCESS 1 in 812.44s]`, `[select, 847 minutes]`,
# `Pause Full ... 4816.422ms`, `38.42s call tests/...`, `after 11m42s`
_PROSE_SPAN = re.compile(
    r"(?<![\w.:-])(\d+(?:\.\d+)?)\s?(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|"
    r"h|hrs?|hours?)(?:\s?(\d+(?:\.\d+)?)\s?(s|secs?|seconds?|m|mins?|minutes?))?(?![\w.])")
_ANY_SPAN = re.compile(r"\d\s?[mshu]")  # may be one (3x as quick)
_STAMP = re.compile(r"\[\d+(?:\.\d+)?s\]")  # a log line's uptime stamp (`[86145.812s]`)
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
TIMED = "duration time"  # the column a log's timed lines make (`timed_lines`)
MIN_TIMED, PROBE_CHARS = 5, 160  # timed lines, at least; a row's probe, at most


def _seconds(m: re.Match[str]) -> float:
    """A `_PROSE_SPAN` match in seconds (`11m42s`: two parts)."""
    def one(n: str, unit: str) -> float:
        return float(n) * _SECONDS["ms" if unit == "ms" or unit.startswith("milli")
                                   else unit[0]]
    total = one(m.group(1), m.group(2))
    return total + one(m.group(3), m.group(4)) if m.group(3) else total


def timed_lines(text: str) -> list[End]:
    """A log whose lines say how long each thing took, in prose (a dbt run's `[SUCCESS 1
    in 812.44s]`, a GC log's pauses, a goroutine dump's `[select, 847 minutes]`, pytest's
    `--durations`) is a column of times, `TIMED`: its top and bottom lines (unless tied),
    so "the slowest model" finds its line. An uptime stamp `[86145.812s]` is no duration;
    a line that holds two, or sums up a run (`_TOTAL`), is no row: its time is the whole
    run's, not a thing's. Five timed lines at least; [] otherwise."""
    if len(_ANY_SPAN.findall(text)) < MIN_TIMED:  # most outputs: one quick scan, no lines
        return []
    bare = _STAMP.sub(_blank, text) if "s]" in text else text  # offsets kept
    by_line: dict[int, list[re.Match[str]]] = {}  # a line's start -> its durations
    for m in _PROSE_SPAN.finditer(bare):
        by_line.setdefault(bare.rfind("\n", 0, m.start()) + 1, []).append(m)
    rows = sorted((_seconds(own), start, own.group(0)) for start, found in by_line.items()
                  if (own := _own(bare, found)) is not None)
    if len(rows) < MIN_TIMED:
        return []
    cterms = column_terms(TIMED)
    out = []
    for side, order in (("max", reversed(rows)), ("min", iter(rows))):
        ends_ = list(islice(((v, line, token) for v, start, token in order
                             for line in (_line(text, start),) if not TOTAL.search(line)), 2))
        if len(ends_) == 2 and ends_[0][0] != ends_[1][0]:
            _, line, token = ends_[0]
            out.append(End(tag(side, cterms), TIMED, (_probe(line, token),)))
            opened = _opened(text, line)  # the request's first line: what it was for
            if opened is not None:
                out.append(End(tag(side, cterms), TIMED, (opened,)))
    return out


def _own(text: str, found: list[re.Match[str]]) -> re.Match[str] | None:
    """A line's own duration: its one, or its first where the others follow it in
    brackets as its parts, two at least (Rails' `Completed 200 OK in 20004ms (Views:
    2306.3ms | ActiveRecord: 1933.4ms …)`); None for a line of two durations side by side
    (a run's and a step's) or a run's time and its clock (`38 passed in 61.02s
    (0:01:01)`)."""
    if len(found) == 1:
        return found[0]
    return found[0] if len(found) >= 3 and "(" in text[found[0].end():found[1].start()] else None


def _probe(line: str, token: str) -> str:
    probe = line.strip()
    return probe if len(probe) <= PROBE_CHARS else _around(line, token)


# a request's id as a log tags each of its lines (`[530c45ff-dd54-4e40-967f-021c98609d1e]`)
_REQUEST_ID = re.compile(r"\[([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|"
                         r"[0-9a-f]{16,})\]")


def _opened(text: str, line: str) -> str | None:
    """The id of the request `line` ends, where the log tags its lines with it and its
    first line is another: the first passage holding the id holds Rails' `Started GET
    "/api/v2/…"` of the `Completed … in 20004ms` line, the endpoint the slowest request
    was for."""
    m = _REQUEST_ID.search(line)
    if m is None:
        return None
    at = text.find(m.group(0))
    return None if _line(text, text.rfind("\n", 0, at) + 1) == line else m.group(0)


def _line(text: str, start: int) -> str:
    end = text.find("\n", start)
    return text[start:] if end < 0 else text[start:end]


def _blank(m: re.Match[str]) -> str:
    return " " * len(m.group(0))


def _around(line: str, token: str) -> str:
    at = line.find(token)
    return line[max(0, at - PROBE_CHARS // 2): at + len(token)].strip()
