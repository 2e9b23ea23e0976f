"""The tables of a tool output, as store/notable.py and store/extremes.py read them.

A table is a JSON list of five or more records (at the top or up to five levels down; a
nested record's fields are columns too, a Prometheus sample its value), JSON lines, the
attributes of five or more elements of one tag (JUnit's `<testcase … time="212.604"/>`), or
six or more consecutive lines with the same number of cells (three or more; two at tabs
or runs of spaces where one is a number in every row: `value_counts()`, `uniq -c`) split
at `|` (markdown), tabs, commas (CSV, quoted fields honoured) or runs of two or more
spaces (a command's columns), the first a header when none of its cells is a number; a
rule line (`|---|`, `-----  ---`) is no row.
Aligned tables whose empty cells break the runs of two spaces are read by where their
columns are (store/fixedwidth.py).
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from typing import Any

import orjson

from store.cells import MIN_ROWS, MIN_VALUES, Table, number
from store.fixedwidth import fixed_tables
from store.labelled import readings
from store.logfmt import logfmt_records
from store.pathlines import path_lines
from store.series import sampled, samples
from store.yamlrecords import yaml_records

_RULE = re.compile(r"^[\s|:\-+=]+$")  # a markdown table's |---|---| line, a command's ----
_SPACES = re.compile(r"\s{2,}")  # a command's columns


def tables(text: str) -> list[Table]:
    """The tables of `text`: a JSON list of records, JSON lines (a structured log), XML
    elements, a YAML list of records (store/yamlrecords.py), runs of lines split alike,
    or else lines of key=value pairs (store/logfmt.py); and lines that each open with a
    file's path (store/pathlines.py), beside the others."""
    head = text.lstrip()[:1]
    if head in ("[", "{"):
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError:
            data = None
        if data is not None:
            records = _records(data, 0)
            return [] if records is None else [_record_table(records, _colon(text))]
    if text.count("\n") < MIN_ROWS - 1:
        return []
    if text.count("\n{") >= MIN_VALUES - 1:
        records = _json_lines(text)
        if records is not None:
            return [_record_table(records, _colon(text))]
    if text.count('="') >= 2 * MIN_VALUES:
        records = _xml_elements(text)
        if records is not None:
            return [_record_table(records)]
    if "- " in text and (listed := yaml_records(text)) is not None:
        return [listed]
    best: list[Table] = []
    lines = text.splitlines()
    for sep in ("|", "\t", ",", "  "):
        if sep != "  " and text.count(sep) < 2 * MIN_ROWS:
            continue
        found = list(_blocks(lines, sep))
        if sum(len(r) for _, r in found) > sum(len(r) for _, r in best):
            best = found
    if "   " in text:  # aligned columns read by position, where empty cells broke the runs
        aligned: list[Table] = list(fixed_tables(lines))
        # or as many, where the runs found no header (one of more cells than its rows,
        # `NOTE` empty in most, split at runs of two spaces: read by position it stays)
        read, before = sum(len(r) for _, r in aligned), sum(len(r) for _, r in best)
        if aligned and (read > before or read == before and all(h is None for h, _ in best)):
            best = aligned
    if not best and (pairs := logfmt_records(text)) is not None:  # `BUS_V=28.18 BUS_I=…`
        return [pairs]
    if (named := readings(text)) is not None and len(named[1]) > sum(len(r) for _, r in best):
        return [named]  # `avg 36 km/h  gust 57 km/h`
    if (named := path_lines(text)) is not None:  # `rspec ./spec/a_spec.rb:166 # …`
        return [*best, named]
    return best


def _record_table(records: list[dict[str, Any]], colon: str = ": ") -> Table:
    """`colon`: how the JSON printed a key's colon (`": "`, or `":"` compact). Time series
    have a row a sample (store/series.py)."""
    records = [_flat(r) for r in records]
    if (series := samples(records, number)) is not None:
        return series
    keys = list(dict.fromkeys(k for r in records[:20] for k in r))
    key = _id_key(records, keys)
    return keys, [((_probe(key, r[key], colon),) if key else (), [r.get(k) for k in keys])
                  for r in records]


def _colon(text: str) -> str:
    return ": " if '": ' in text else ":"


def _probe(key: str, value: Any, colon: str) -> str:
    """A record's id as its passage holds it: a text quoted (`"S26-edge"`), a number with
    its key and the comma after it (`"site": 12,`, which `"site": 1,` is not part of)."""
    if isinstance(value, str):
        return orjson.dumps(value).decode()
    return f'"{key.rsplit(".", 1)[-1]}"{colon}{value},'


def _flat(record: dict[str, Any]) -> dict[str, Any]:
    """`record`, with a nested record's plain fields also as columns of their own
    (`metric.consumergroup`: what tells a Prometheus series apart; `NESTED` levels
    down) and a sample
    (`[1721274060.8, "2847193"]`: a time and its value, as Prometheus's API writes it) as
    its value."""
    out: dict[str, Any] = {}
    for k, v in record.items():
        if isinstance(v, list) and len(v) == 2 and isinstance(v[0], int | float) and (
                isinstance(v[1], str) and number(v[1]) is not None):
            v = v[1]
        out[k] = v
        if isinstance(v, dict):
            _fields(v, k, record, out, NESTED - 1)
    return out


NESTED = 3  # levels of a record's nested fields that are columns (`status.4xx.429`)


def _fields(v: dict[str, Any], path: str, record: dict[str, Any], out: dict[str, Any],
            depth: int) -> None:
    """`v`'s plain fields as `path.key` columns of `out`, and its records' `depth` levels
    down (`status` → `4xx` → `429`: an endpoint's rate-limited calls)."""
    for k2, v2 in v.items():
        name = f"{path}.{k2}"
        if isinstance(v2, str | int | float) and name not in record:
            out[name] = v2
        elif isinstance(v2, dict) and depth > 1:
            _fields(v2, name, record, out, depth - 1)


def _json_lines(text: str) -> list[dict[str, Any]] | None:
    """The records of `text`'s lines that are JSON objects, five or more and half its
    lines at least (a structured log, `kubectl logs` of a JSON logger)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    objects = [line for line in lines if line[:1] == "{" and line[-1:] == "}"]
    if len(objects) < MIN_VALUES or 2 * len(objects) < len(lines):
        return None
    out = []
    for line in objects:
        try:
            r = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(r, dict):
            out.append(r)
    return out if len(out) >= MIN_VALUES else None


_ELEMENT = re.compile(r'\s*<([A-Za-z][\w:.-]*)((?:\s+[\w:.-]+="[^"]*")+)\s*/?>')
_ATTR = re.compile(r'([\w:.-]+)="([^"]*)"')


def _xml_elements(text: str) -> list[dict[str, Any]] | None:
    """The attributes of the commonest element that opens five or more lines with two
    attributes or more (JUnit's `<testcase name=… time=…/>`, a report's rows), one record
    an element."""
    by_tag: dict[str, list[dict[str, Any]]] = {}
    for line in text.splitlines():
        m = _ELEMENT.match(line)
        if m is not None:
            attrs = dict(_ATTR.findall(m.group(2)))
            if len(attrs) >= 2:
                by_tag.setdefault(m.group(1), []).append(attrs)
    best = max(by_tag.values(), key=len, default=[])
    return best if len(best) >= MIN_VALUES else None


def _records(data: Any, depth: int) -> list[dict[str, Any]] | None:
    """The longest list of five or more records in `data`, five levels down at most (a
    list in a record in a list in a record: `kafka-log-dirs`' partitions of each log
    dir of each broker)."""
    if isinstance(data, list) and data and all(isinstance(r, dict) for r in data) and (
            len(data) >= MIN_VALUES or sampled(data, number)):  # or a series or two
        return data
    if depth >= 5:
        return None
    best: list[dict[str, Any]] | None = None
    for v in data.values() if isinstance(data, dict) else data[:50] if isinstance(
            data, list) else ():
        found = _records(v, depth + 1)
        if found is not None and (best is None or len(found) > len(best)):
            best = found
    return best


def _id_key(records: list[dict[str, Any]], keys: list[str]) -> str | None:
    """The first field whose text tells every record apart (an id, a name, a SKU): what
    the passage holding a record holds, quoted as JSON writes it; else the first whose
    whole numbers (or texts) do (`"site": 12`, `"job_id": 4417902`)."""
    for named in (True, False):
        for k in keys:
            vals = [r.get(k) for r in records]
            if all(isinstance(v, str) and v or not named and _whole(v) for v in vals) and len(
                    set(vals)) == len(vals):
                return k
    return None


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _blocks(lines: list[str], sep: str) -> Iterator[Table]:
    """Runs of MIN_ROWS or more lines split into the same number of cells: three or more,
    or two where one of them is a number in every line (a count beside a name, as
    `value_counts()`, `uniq -c` or `du` print them). A rule line (`-----  ----`, `|---|`)
    is no row."""
    run: list[tuple[str, list[str]]] = []
    for line, cells in zip(lines, _split(lines, sep), strict=True):
        if _is_rule(line):
            continue
        if run and len(cells) != len(run[0][1]):
            yield from _block(run)
            run = []
        if len(cells) >= 2 and sep in ("  ", "\t") or len(cells) >= 3:
            run.append((line, cells))
    yield from _block(run)


def _is_rule(line: str) -> bool:
    s = line.strip()
    return bool(s) and ("-" in s or "=" in s) and _RULE.match(s) is not None


def _block(run: list[tuple[str, list[str]]]) -> Iterator[Table]:
    if len(run) < MIN_ROWS:
        return
    first = run[0][1]
    header = first if _words_only(first) else None
    body = run[1:] if header is not None else run
    if header is not None and _words_only(body[0][1]) and not _words_only(body[1][1]):
        # a title line split alike (`Device: FRIDGE-4W-01   Probe: glycol-buffered   …`)
        # over the header (`timestamp   temp   status   door`): the header is the last
        # line of words before the numbers
        header, body = body[0][1], body[1:]
    if len(first) == 2 and not any(all(number(cells[j]) is not None for _, cells in body)
                                   for j in (0, 1)):
        return  # two cells: a name and its count, or no table (`key  value` lines)
    yield header, [((line.strip(),), cells) for line, cells in body]


def _words_only(cells: list[str]) -> bool:
    return all(number(c) is None for c in cells)


def _split(lines: list[str], sep: str) -> Iterator[list[str]]:
    if sep == ",":  # each line alone: a quote left open must not swallow the next
        for line in lines:
            try:
                yield next(csv.reader((line,)), [])
            except csv.Error:  # a NUL byte
                yield []
    elif sep == "|":
        for line in lines:
            s = line.strip()
            # a markdown row (`| a | b |`), or psql's and sqlite's (` a | b `)
            yield ([c.strip() for c in s.strip("|").split("|")]
                   if s.startswith("|") or " | " in s else [])
    elif sep == "\t":
        for line in lines:
            yield line.split("\t")
    else:
        for line in lines:
            yield _SPACES.split(line.strip())
