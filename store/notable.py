"""Notable rows: the rows of a tool output's table that a later question asks about in
plain words, found without the question.

What a later question asks of a table is often its odd one out: the one negative stock
count, the vendor whose 90+ balance dwarfs every other, the only non-zero difference in
a reconciliation, a price far under the rest. The question names the oddity ("which item
was below zero", "the biggest amount past due"), not the row's identifier, and nothing
in the row says "biggest". So such a row's passage also counts its kind's tag (`TAGS`,
a term no text yields) in the lexical index, and a question's words that name a kind
(`WORDS`, `asked`) add its tag to the query
(store/relevance.py: `RelevanceIndex.examine`, `notable_terms`); the passage's text is
unchanged, and a step that is no question never matches a tag.

Tables: a JSON list of five or more records (at the top or up to five levels down; a
nested record's fields are columns too, a Prometheus sample its value), JSON lines, the
attributes of five or more elements of one tag (JUnit's `<testcase … time="212.604"/>`), or
six or more consecutive lines with the same number of cells (three or more; two at tabs
or runs of spaces where one is a number in every row: `value_counts()`, `uniq -c`) split
at `|` (markdown), tabs, commas (CSV, quoted fields honoured) or runs of two or more
spaces (a command's columns), the first a header when none of its cells is a number; a
rule line (`|---|`, `-----  ---`) is no row. A column counts when at
least five of its cells, and 70 % of its rows, are numbers (`1,234.50`, `-11`, `$0.95`,
`-18.74 dBm`, `T=35.4 °C`; not dates, times, versions or addresses). In such a column a
row is notable when it is
- `negative`: one of at most two negative values, a fifth of the column at most;
- `nonzero`: one of at most two values that are not zero, where 80 % are;
- `highest`: over 2.5 times the next (all values zero or more), or, in eight values or
  more, `SPREAD` median absolute deviations above the median and twice as far from it
  as the next (a reading of 35.4 where the rest hold 37.0 +- 0.2 is the `lowest`);
- `lowest`: under a fifth of the next (all values above zero), or as far below.
- `jump`: (six rows or more, in their order) the row at the top of a step over `JUMP`
  times the next largest: the hop where a traceroute's delay climbs 63 ms;
- `over`: past a limit its own row states (a value over its `ucl`, usage over its
  `quota`): the first and the last such row (store/limits.py).
A column whose values read apart from its siblings' (`PROP_CBH_3A_T` at 70 beside seven
at 120) is `odd` too, on the passage that names it (store/siblings.py).
In any column, numbers or not, a row is `odd` when its cell differs in shape (digits
aside, a number as any number, a list or record as empty or not) from the shape 80 % of
the column share, one or two rows and a fifth of them at most: the FAIL among PASSes,
the instance whose `"Tags"` is `[]`, the line that reads `ALARM door open` where the
others read `RH=88%`. A question asks for one in words such as "problem", "failed",
"missing", "no ... label", "a different build", "instead of finishing", "wouldn't
load", "got rejected" ("didn't add up" a difference left, "overpaid" a negative); a
superlative
("the slowest", "the longest") asks for the highest and the lowest alike, the column
telling which (store/extremes.py finds a named column's top and bottom rows, outliers
or not).
Aligned tables whose empty cells break the runs of two spaces are read by where their
columns are (store/fixedwidth.py).
At most `MAX_ROWS` rows of an output are notable: a table full of oddities has none.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any, Protocol, TypeVar

import orjson

from store.fixedwidth import fixed_tables
from store.labelled import readings
from store.limits import past_limits
from store.logfmt import logfmt_records
from store.pathlines import path_lines
from store.series import sampled, samples
from store.siblings import odd_columns
from store.terms import WORD
from store.yamlrecords import yaml_records

#: the words a question about each kind of row uses ("below zero", "the biggest amount");
#: the row's passage counts its kind's tag, a term no text yields, and a question's words
#: add the tags they name (`asked`). Words that say little alone ("top", "most",
#: "under", "below") are left out: "under review" is no question about a low value.
WORDS = {
    "negative": "negative zero minus deficit shortfall oversold overdrawn overpaid "
                "overpayment",
    "nonzero": "nonzero non-zero discrepancy discrepancies mismatch mismatched unbalanced gap",
    # a spike stands above the rows either side of it: a peak, as much as a step up
    "highest": "highest largest biggest greatest maximum peak worst outlier hottest warmest "
               "heaviest spike spiked spikes surge surged",
    "lowest": "lowest smallest least minimum cheapest fewest worst outlier drop dropped dip "
              "coldest coolest lightest",
    "jump": "jump jumped jumps jumping spike spiked surge surged suddenly",
    # a row past a limit its own row states (store/limits.py): the first SPC breach
    "over": "breach breached breaches breaching exceed exceeded exceeds exceeding "
            "exceedance violation violations violated overrun overran excursion",
    "odd": "problem problems fail failed failing failure flagged alarm alarms anomaly "
           "anomalous abnormal unusual odd marked missing without empty blank untagged unlabeled "
           "unlabelled broken no different differs differed unlike instead except "
           "rejected denied declined disapproved refused wouldn couldn didn doesn never "
           "cannot",
}
TAGS = {kind: f"~{kind}" for kind in WORDS}
_ASKS: dict[str, frozenset[str]] = {}  # a question's word -> the tags it names
for _kind, _words in WORDS.items():
    for _w in _words.split():
        _ASKS[_w] = _ASKS.get(_w, frozenset()) | {TAGS[_kind]}


# "did not pass", "would not load": "didn't" and "wouldn't" (`WORDS`), written out
_NOT = re.compile(r"\b(?:did|does|would|could) not\b", re.IGNORECASE)
_ADD_UP = re.compile(r"\b(?:add|adds|added|adding) up\b", re.IGNORECASE)
# "under a dollar", "below 5 %", "less than one cent": under a quantity, not "under review"
_UNDER = re.compile(r"\b(?:under|below|less than)\s+(?:(?:a|an|one)\b|[$€£]?\d)",
                    re.IGNORECASE)


# "Different thing —", "on a different note", "something else": a change of subject, not
# a question about the row that differs
_NEW_SUBJECT = re.compile(
    r"\b(?:different|other|another|separate|unrelated) (?:thing|question|topic|subject|"
    r"note|matter|angle|point|track|direction)s?\b|\bsomething (?:different|else)\b",
    re.IGNORECASE)  # not "issue" or "item": "a different issue from the rest" asks


# what is still waiting ("whose file was still waiting on their records", "which orders
# are outstanding") is the odd row, its cell empty; not what has been waiting the
# longest, a start's earliest date (store/extremes.py `SINCE_WORDS`), nor "how long were
# players waiting", a duration
_STILL = re.compile(r"\bstill\s+(?:waiting|pending)\b|\bawaiting\b|\boutstanding\b",
                    re.IGNORECASE)


def asked(question: str) -> set[str]:
    """The tags `question`'s words name."""
    question = _NEW_SUBJECT.sub(" ", question)
    out: set[str] = {TAGS["lowest"]} if _UNDER.search(question) else set()
    if _STILL.search(question) and not any(superlative(w.lower())
                                           for w in WORD.findall(question)):
        out.add(TAGS["odd"])
    if _NOT.search(question):
        out.add(TAGS["odd"])
    if _ADD_UP.search(question):  # "which kit didn't add up": a difference left over
        out |= {TAGS["nonzero"], TAGS["negative"]}
    for w in WORD.findall(question):
        low = w.lower()
        tags = _ASKS.get(low)
        if tags:
            out |= tags
        elif superlative(low):
            out |= _EXTREMES  # "the longest", "the oldest": which end, the column says
    return out


def superlative(word: str) -> bool:
    """A lower-cased word that is a superlative ("longest", "slowest"), not another "-est"
    ("request", "interest")."""
    return word.endswith("est") and len(word) >= 6 and word not in _NOT_SUPERLATIVE


_EXTREMES = frozenset({TAGS["highest"], TAGS["lowest"]})
_NOT_SUPERLATIVE = frozenset(
    "request requests interest interests suggest suggests latest contest forest honest "
    "modest harvest manifest protest digest invest arrest priest guest quest midwest "
    "southwest northwest earnest conquest inquest bequest".split())


MIN_ROWS, MIN_VALUES, MAX_ROWS = 6, 5, 6
JUMP = 4  # times the next largest step between rows
SPREAD = 8  # median absolute deviations from the median: a value that stands alone

_NUMBER = re.compile(r"\s*(?:[A-Za-z_][\w.]{0,15}=\s*)?([-+−]?)\s*[$€£]?\s*(\d[\d,]*(?:\.\d+)?)")
_UNIT = re.compile(r"[A-Za-z%°µ/]{0,6}")  # not 2024-08-18, 10.4.2.17, 12:30, 1/1, 5d3h
_RULE = re.compile(r"^[\s|:\-+=]+$")  # a markdown table's |---|---| line, a command's ----
_SPACES = re.compile(r"\s{2,}")  # a command's columns


Row = tuple[tuple[str, ...], list[Any]]  # (probes, cells)
Table = tuple[Sequence[str] | None, list[Row]]  # (header, rows)


@dataclass(frozen=True, slots=True)
class Notable:
    kind: str  # a key of WORDS
    column: str  # its header ("" when the table has none)
    probes: tuple[str, ...]  # what the passage holding the row holds (its line; a record's)


def number(cell: Any) -> float | None:
    """A cell's value if it is a number, with a unit of six letters at most after it."""
    if isinstance(cell, bool) or cell is None:
        return None
    if isinstance(cell, int | float):
        return float(cell)
    if not isinstance(cell, str):
        return None
    v = _VALUES.get(cell, _UNREAD)  # a cell is read for its shape, its kind and its end
    if v is _UNREAD:
        if len(_VALUES) >= 50_000:
            _VALUES.clear()
        v = _VALUES[cell] = _number(cell)
    return v


_UNREAD = float("nan")
_VALUES: dict[str, float | None] = {}


def unit_of(cell: Any) -> str | None:
    """The unit a number cell carries, lower-cased (`78.4 °C`: "°c", `$1,250.00`: "$",
    `12%`: "%"), "" for a bare number, None for a cell that is no `number`."""
    if not isinstance(cell, str) or number(cell) is None:
        return None
    m = _NUMBER.match(cell)
    if m is None:  # not reached: `number` matched it
        return None
    lead = next((c for c in cell[:m.start(2)] if c in "$€£"), "")
    return lead or cell[m.end():].strip().lower()


def _number(cell: str) -> float | None:
    m = _NUMBER.match(cell)
    if m is None:
        return None
    if _UNIT.fullmatch(cell[m.end():].strip()) is None:
        return None
    try:
        value = float(m.group(2).replace(",", ""))
    except ValueError:
        return None
    return -value if m.group(1) in ("-", "−") else value


def notable(text: str, found: list[Table] | None = None) -> list[Notable]:
    """The notable rows of `text`'s tables (see the module), at most MAX_ROWS; `found`:
    its tables, already parsed (`tables`)."""
    out: dict[Notable, None] = {}  # once (columns without a header have one name)
    for header, rows in tables(text) if found is None else found:
        out.update(dict.fromkeys(_in_table(header, rows)))
    return list(out) if len(out) <= MAX_ROWS else []


def _in_table(header: Sequence[str] | None, rows: list[Row]) -> Iterator[Notable]:
    width = max(len(cells) for _, cells in rows)
    for j in range(width):
        name = str(header[j]) if header is not None and j < len(header) else ""
        for i in _odd_shapes([cells[j] if j < len(cells) else None for _, cells in rows]):
            yield Notable("odd", name, rows[i][0])
    numeric = list(numeric_columns(header, rows))
    for name, vals in numeric:
        for kind, i in _odd(vals):
            yield Notable(kind, name, rows[i][0])
    if header is None:  # limits and siblings are named by a header
        return
    for name, i in past_limits(numeric):
        yield Notable("over", name, rows[i][0])
    for name in odd_columns(numeric):  # the one cold sensor of eight
        yield Notable("odd", name, (name,))


def numeric_columns(header: Sequence[str] | None, rows: list[Row],
                    value: Callable[[Any], float | None] = number,
                    ) -> Iterator[tuple[str, list[tuple[int, float]]]]:
    """(its header, [(row, value)]) of each column whose cells are `value`s (five at
    least, and 70 % of its rows)."""
    width = max(len(cells) for _, cells in rows)
    for j in range(width):
        if all(value(cells[j]) is None for _, cells in rows[:MIN_VALUES] if j < len(cells)):
            continue  # a column of text (most are): 70 % numbers would show in its first five
        vals = [(i, v) for i, (_, cells) in enumerate(rows) if j < len(cells)
                for v in (value(cells[j]),) if v is not None]
        if len(vals) < MIN_VALUES or len(vals) < 0.7 * len(rows):
            continue
        yield (str(header[j]) if header is not None and j < len(header) else ""), vals


def _odd(vals: list[tuple[int, float]]) -> Iterator[tuple[str, int]]:
    """(kind, row) of a column's odd values."""
    n = len(vals)
    neg = [i for i, v in vals if v < 0]
    if 0 < len(neg) <= min(2, n // 5):
        yield from (("negative", i) for i in neg)
        return
    nonzero = [i for i, v in vals if v != 0]
    if 0 < len(nonzero) <= 2 and n - len(nonzero) >= 0.8 * n:
        yield from (("nonzero", i) for i in nonzero)
        return
    order = sorted(vals, key=lambda iv: iv[1])
    (lo, low), (_, low2) = order[0], order[1]
    (_, high2), (hi, high) = order[-2], order[-1]
    mid = order[n // 2][1]
    mad = sorted(abs(v - mid) for _, v in vals)[n // 2] if n >= 8 else 0.0
    if (low >= 0 and high2 > 0 and high > 2.5 * high2) or (
            mad > 0 and high - mid >= SPREAD * mad and high - mid >= 2 * (high2 - mid)):
        yield "highest", hi
    if (low > 0 and low < 0.2 * low2) or (
            mad > 0 and mid - low >= SPREAD * mad and mid - low >= 2 * (mid - low2)):
        yield "lowest", lo
    if n >= MIN_ROWS:  # in row order: the one step that dwarfs every other
        steps = sorted((abs(b[1] - a[1]), b[0]) for a, b in pairwise(vals))
        if steps[-1][0] > JUMP * steps[-2][0]:
            yield "jump", steps[-1][1]


_DIGITS = re.compile(r"\d+(?:[.,]\d+)*")
_SHAPES: dict[str, str] = {}  # a short text cell's digits as 9s -> its shape (they repeat)


def _shape(cell: Any) -> str:
    if isinstance(cell, str):
        bare = _DIGITS.sub("9", cell.strip())
        shape = _SHAPES.get(bare)
        if shape is None:  # a number's sign and size are the value rules' to judge
            shape = "9" if number(bare) is not None else bare
            if len(bare) <= 64:  # a long one is a note or a message: kept, it would pile up
                if len(_SHAPES) >= 50_000:
                    _SHAPES.clear()
                _SHAPES[bare] = shape
        return shape
    if cell is None or isinstance(cell, bool):
        return str(cell)
    if isinstance(cell, int | float):
        return "9"
    if isinstance(cell, list | dict):
        return "[]" if not cell else "[x]" if isinstance(cell, list) else "{x}"
    return "?"


def _odd_shapes(cells: list[Any]) -> list[int]:
    """The rows (one or two, a fifth at most) whose cell differs in shape (digits aside)
    from the one shape 80 % of the column's cells share: the FAIL among PASSes, the
    empty list of tags, the line that reads ALARM where the others read RH=88%. The
    first five cells tell most columns apart (ids, names, amounts): no shape three times
    among them, no common one. Where shapes differ too often, by the first word
    (`_first_word`): the one REJECTED among VERIFIED and "VERIFIED (late)"."""
    return _odd_by(cells, _shape) or (_odd_by(cells, _first_word) if all(
        isinstance(c, str) and _LETTERS.match(c.lstrip()) for c in cells[:5]) else [])


def _first_word(cell: Any) -> str:
    """A text cell's first word (`VERIFIED` of "VERIFIED (late)"); a number's, or any other
    cell's, shape."""
    if isinstance(cell, str) and (m := _LETTERS.search(cell)) is not None and m.start() < 2:
        return m.group()
    return _shape(cell)


_LETTERS = re.compile(r"[A-Za-z]+")


def _odd_by(cells: list[Any], key: Callable[[Any], str]) -> list[int]:
    n = len(cells)
    most = min(2, n // 5)
    head = [key(c) for c in cells[:5]]
    common = max(head, key=head.count)
    if head.count(common) < len(head) - most:
        return []
    odd = [i for i, h in enumerate(head) if h != common]
    for i in range(len(head), n):
        if key(cells[i]) != common:
            odd.append(i)
            if len(odd) > most:
                return []
    return odd


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


class Probed(Protocol):
    @property
    def probes(self) -> tuple[str, ...]: ...


P = TypeVar("P", bound=Probed)


def placed(found: list[P], pieces: Sequence[str]) -> dict[int, list[P]]:
    """Piece number -> its notable rows (or a column's ends: store/extremes.py): each goes
    to the first piece holding all its probes (a row without probes goes nowhere)."""
    out: dict[int, list[P]] = {}
    for row in found:
        k = next((k for k, p in enumerate(pieces) if all(q in p for q in row.probes)), None)
        if k is not None and row.probes:
            out.setdefault(k, []).append(row)
    return out


def row_terms(rows: list[Notable]) -> list[str]:
    """What rows add to their passage's terms: each one's tag. Only a question that names
    a tag matches one, and it examines every chunk first, so no other query's scores
    depend on how far the background got (a header's words added too would)."""
    return [TAGS[row.kind] for row in rows]


def said(rows: list[Notable]) -> str:
    """Rows as recall's reason names them: "highest 90+, negative available"."""
    return ", ".join(f"{row.kind} {row.column}".strip() for row in rows)
