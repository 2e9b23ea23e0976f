"""A column's extremes: the row a question asks for by "the most", "the longest", "the
cheapest" and the column it names.

"Which pod had by far the most restarts", "the biggest damage charge", "which query had
been sitting open the longest": the answer is the top or bottom row of one column of a
table an agent printed, whether or not it stands out (store/notable.py finds only the
rows that do). The question names the column in its words ("restarts" for `RESTARTS`,
"damage charge" for `damage_charge`) and the end of it by a superlative.

So each numeric or dated column of a tool output's table (`numeric_columns`; a table
without a header names a column by the key its cells open with, `TOC=382.5 ppb`, and a
list of a count beside each name its count `COUNT`, `uniq -c`'s) marks its
highest and its lowest row, when no other row ties it, with a tag of its own: `~max:`
or `~min:` and the column's terms (`tag`), counted by the row's passage (store/
relevance.py `RelevanceIndex.examine`). A question whose words name an end (`ends`) and
hold a column's terms adds that column's tag, weighted by the share of the column's
terms it holds (`asked_columns`). "Most" or "top" alone names no row: with a column's
words it does. A superlative whose end depends on the column ("the slowest", "the
worst", "the oldest") names both ends. Dates count as their day (`2024-05-20`), so
"the earliest" and "the latest" find them, and what "has been waiting the longest" is
the earliest of a start's dates (`opened`, `created`: `SINCE_WORDS`). What expires
first, or has already lapsed (`LAPSED`), is the earliest of a validity's ends
(`not_after`, `coi_expires`, `BOSIET exp`: `EXPIRY`).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date
from typing import Any

from store.cells import MIN_VALUES, Row, Table, number, unit_of
from store.idioms import idioms
from store.notable import numeric_columns
from store.notablewords import superlative
from store.spans import spans
from store.terms import STOP, WORD, terms

MAX_WORDS = frozenset(
    "highest largest biggest greatest maximum max peak most top longest heaviest "
    "costliest priciest busiest latest newest hottest warmest".split())
MIN_WORDS = frozenset(
    "lowest smallest least minimum min fewest cheapest shortest bottom lightest "
    "earliest coldest coolest".split())
_NOTED = re.compile(r"\s*([-+]?[$€£]?\d[\d,]*(?:\.\d+)?)\s+\(")
_DAY = re.compile(r"\s*(\d{4})-(\d\d)-(\d\d)(?:[T ](\d\d):(\d\d))?")
# slurm's 4-07:12:00, a time of day or a duration (13:19:00, a roster's 05:25)
_SPAN = re.compile(r"\s*(?:(\d+)-)?(\d{1,2}):(\d\d)(?::(\d\d))?\s*$")
# a duration in units of time: `812.44s`, `12ms`, `7h 45m`, `1d 4h`, `2m30s`: one column
# may hold `12ms` and `4.71s`, or `45m` and `7h 45m`
_UNITS = re.compile(r"\s*(?:\d+(?:\.\d+)?\s?(?:d|h|min|m|s|ms|us|µs)\s?){1,4}$")
_UNIT = re.compile(r"(\d+(?:\.\d+)?)\s?(d|h|min|ms|m|s|us|µs)")
_DAYS = {"d": 1.0, "h": 1 / 24, "m": 1 / 1440, "min": 1 / 1440, "s": 1 / 86400,
         "ms": 1 / 86400e3, "us": 1 / 86400e6, "µs": 1 / 86400e6}


@dataclass(frozen=True, slots=True)
class End:
    tag: str  # "~max:<column terms>" or "~min:..."
    column: str  # its header, as printed
    probes: tuple[str, ...]  # what the passage holding the row holds
    units: frozenset[str] = frozenset()  # what its cells' unit says it holds (`unit_terms`)


# what a question's word says of the column it means: "the cheapest" is a cost or a
# price, "the slowest" a time, "how long did the worst take" a duration, "money" a cost
# or an amount, "the driest" a humidity, "the closest" a distance (counted as its own
# words)
COLUMN_WORDS = {
    "cheapest": "cost price", "priciest": "cost price", "costliest": "cost price",
    "expensive": "cost price", "money": "cost spend amount", "spent": "cost spend",
    "slowest": "latency duration time took wait", "fastest": "latency duration time took",
    "longest": "duration time age days", "shortest": "duration time age days",
    "long": "duration time took", "timing": "duration time took",
    "oldest": "age date created opened", "newest": "date created", "earliest": "date",
    "busiest": "count requests load", "biggest": "size amount total units quantity",
    "largest": "size amount total units quantity",
    "smallest": "size amount total units quantity",
    "big": "size amount total units quantity", "warmest": "temp temperature",
    "hottest": "temp temperature", "coldest": "temp temperature",
    "coolest": "temp temperature", "fullest": "used usage percent",
    "space": "used usage percent", "driest": "humidity rh moisture",
    "wettest": "humidity rh rain rainfall precip", "closest": "distance dist mi miles km",
    "nearest": "distance dist mi miles km", "farthest": "distance dist mi miles km",
    "furthest": "distance dist mi miles km", "invoked": "calls count",
    "called": "calls count", "invocations": "calls count", "lagging": "latency lag delay",
    "laggiest": "latency lag delay", "lag": "latency lag delay"}
# a word that names a measurement, where no word of `COLUMN_WORDS` says which
VAGUE = {"reading": "temp temperature value level", "readings": "temp temperature value level"}
# a header's abbreviations, and what they abbreviate (`avg_basket` is an average)
ABBREVIATIONS = {"avg": "average", "pct": "percent", "%": "percent", "qty": "quantity",
                 "amt": "amount", "temp": "temperature", "txn": "transaction",
                 "txns": "transactions", "cnt": "count", "num": "number", "hrs": "hours",
                 "mins": "minutes", "secs": "seconds", "rpt": "report",
                 "dep": "departure", "arr": "arrival", "dept": "department",
                 "dur": "duration", "cum": "cumulative total", "rh": "relative humidity",
                 "el": "elevation", "elev": "elevation", "az": "azimuth",
                 "db": "database"}
# how long a thing has been waiting or open is the distance to its start: "the ticket
# that has been waiting the longest" is the earliest `opened`, "open the shortest" the
# latest (a date column's other end from the superlative's). Only with a word of waiting:
# "the job that ran the longest" is its duration, not its start.
SINCE_WORDS = {"longest": "min", "shortest": "max"}
SINCE_COLUMNS = "date created opened started submitted filed received since"
WAITING = frozenset("been waiting waited open sitting outstanding pending unanswered "
                    "unresolved stuck idle".split())
SLOW_WORDS = frozenset("slowest longest worst".split())  # of a time: its top
FAST_WORDS = frozenset("fastest quickest shortest best".split())  # its bottom
_TIMES = frozenset(terms("duration latency took elapsed time"))  # a column of times
EITHER_WORDS = frozenset({"worst", "best"})  # which end, the column says (coverage, latency)
_BIG_ONE = re.compile(r"\bthe big ones?\b", re.IGNORECASE)  # "which invoice was the big one"


# what expires first is a validity's earliest end: "which cert expires first", "the
# licence closest to expiry", "the lot that expires soonest" (a column `EXPIRY` names)
EXPIRING = frozenset(terms("expires expiry expiration"))
SOON_WORDS = frozenset("first soonest sooner next closest nearest earliest".split())
LATE_WORDS = frozenset("last latest furthest farthest".split())
EXPIRY = re.compile(r"not_?after|valid_?(?:to|until|thru|through)|expir|"
                    r"(?:^|[\s_])exp(?:[\s_.]|$)", re.IGNORECASE)  # `BOSIET exp`
# what has already lapsed is a validity's earliest end ("whose survival certificate has
# already lapsed", "which vendor's insurance had already run out")
LAPSED = re.compile(r"\b(?:lapsed|expired|run out|ran out|out of date)\b", re.IGNORECASE)


def ends(question: str) -> frozenset[str]:
    """The ends ("max", "min") `question`'s superlatives name."""
    out: set[str] = {"max"} if _BIG_ONE.search(question) else set()
    words = WORD.findall(question)
    said = {w.lower() for w in words}
    timed: frozenset[str] = frozenset()  # "soonest" of an expiry names its end alone
    if LAPSED.search(question):
        out.add("min")
    if not EXPIRING.isdisjoint(terms(question)):
        timed = SOON_WORDS | LATE_WORDS
        out |= ({"min"} if said & SOON_WORDS else set()) | (
            {"max"} if said & LATE_WORDS else set())
    for w in words:
        low = w.lower()
        if low in timed:
            continue
        if low in MAX_WORDS:
            out.add("max")
        elif low in MIN_WORDS:
            out.add("min")
        elif low in EITHER_WORDS or superlative(low):
            out |= {"max", "min"}  # "the slowest": which end, the column says
    return frozenset(out)


def column_terms(name: str) -> frozenset[str]:
    """The terms a column's header gives a tag: its words (`days_open`: days, open), not
    the name whole, its units or numbers (but a nested key's: `status.4xx.429`, 429);
    a ratio's slash is "per" (`Cost / conv.`); an
    abbreviation also what it abbreviates (`avg_basket`: average, `LEVEL_%`: percent)."""
    words = set(re.split(r"[^a-z%]+", name.lower())) | ({"%"} if "%" in name else set())
    out = {_whole(t, words) for t in terms(name)
           if t.isalnum() and not t.isdigit() and len(t) > 1}
    for w in words & ABBREVIATIONS.keys():
        out |= set(terms(ABBREVIATIONS[w]))
    # a nested record's key that is a number names its column (`status.4xx.429`: the 429s)
    out |= {p for p in name.split(".")[1:] if p.isdigit() and len(p) >= 3}
    if EXPIRY.search(name):  # `not_after`, `valid_until`: when it expires
        out |= EXPIRING
    return frozenset(out | {"per"} if "/" in name else out)


def _whole(stem: str, words: set[str]) -> str:
    """A stem too short to abbreviate anything (`cov` of `Cover`) as the header's word it
    came from, which a question's "coverage" begins with."""
    if len(stem) >= 4:
        return stem
    return min((w for w in words if len(w) >= 4 and w.startswith(stem)), default=stem)


def _holds(words: set[str], term: str) -> bool:
    """A question's words hold a column's term, or one abbreviates the other: by its
    start (`conv` of "conversion"; four letters at least) or by its consonants (`thk` of
    "thickness", `qty` of "quantity": `_skeleton`)."""
    return term in words or (len(term) >= 4 and any(
        w.startswith(term) or (len(w) >= 4 and term.startswith(w)) for w in words)) or (
        _CONSONANTS.fullmatch(term) is not None and term not in ABBREVIATIONS
        and any(_skeleton(term, w) for w in words))  # `pct`: its word is a term already


_CONSONANTS = re.compile(r"[b-df-hj-np-tv-z]{3,4}")  # `thk`, `qty`, `vlv`: no vowel


def _skeleton(term: str, word: str) -> bool:
    """`term` is `word`'s abbreviation by some of its consonants: the same first letter,
    the rest in order, the word three letters longer at least ("thickness" for `thk`,
    not "think")."""
    if word[:1] != term[:1] or len(word) < len(term) + 3:
        return False
    rest = iter(word[1:])
    return all(c in rest for c in term[1:])


def tag(end: str, cterms: Iterable[str]) -> str:
    return f"~{end}:" + "_".join(sorted(cterms))


def day(cell: Any) -> float | None:
    """A number (also one a note follows in brackets: `568 (4m ago)`), a date
    (`2024-05-20`, `2024-05-20T14:07`) as its day, or a duration or a time of day
    (`4-07:12:00`, `13:19:00`, `05:25`, `7h 45m`, `4.71s`, `12ms`) in days."""
    if isinstance(cell, str) and _UNITS.match(cell):  # `7h 45m`, `12ms`: in days
        return sum(float(n) * _DAYS[u] for n, u in _UNIT.findall(cell))
    v = number(cell)
    if v is not None or not isinstance(cell, str):
        return v
    m = _DAY.match(cell)
    if m is None:
        span = _SPAN.match(cell)
        if span is not None:  # a duration (or a time of day), in days
            d, h, mi, s = (int(g or 0) for g in span.groups())
            return d + (h * 3600 + mi * 60 + s) / 86400
        m = _NOTED.match(cell)
        return None if m is None else number(m.group(1))
    try:
        d = date(int(m.group(1)), int(m.group(2)), int(m.group(3))).toordinal()
    except ValueError:
        return None
    return d + (int(m.group(4)) * 60 + int(m.group(5))) / 1440 if m.group(4) else d


# a run's summary, whose time is the sum of the lines' (`Finished running 62 models in
# ... (2083.04s)`, `=== 126 passed in 616.65s ===`, `38 passed in 61.02s (0:01:01)`,
# `Total delay = 7.38s`)
TOTAL = re.compile(r"^\s*[=*#-]{3}|\b(?:total|finished|summary|overall|elapsed)\b|"
                   r"\b\d+ (?:passed|failed)\b",  # pytest's `38 passed in 61.02s`
                   re.IGNORECASE)


def extremes(found: list[Table]) -> list[End]:
    """The top and bottom rows of each named numeric or dated column of `found`."""
    out: dict[End, None] = {}
    for header, rows in found:
        named = header if header is not None else keyed(rows)
        if named is None and (named := counted(rows)) is not None:  # not its total's row
            rows = [r for r in rows if not any(TOTAL.search(line) for line in r[0])]
        if named is not None:
            out.update(dict.fromkeys(_in_table(named, rows)))
    return list(out)


COUNT = "count number"  # what a count beside a name counts: "the largest number of"


def counted(rows: list[Row]) -> list[str] | None:
    """A header-less list of a count and a name in each row (`uniq -c`, `value_counts()`,
    rubocop's offense counts) names its count column `COUNT`; None otherwise."""
    if max(len(cells) for _, cells in rows) != 2:
        return None
    numeric = [all(number(cells[j]) is not None for _, cells in rows if len(cells) == 2)
               for j in (0, 1)]
    return None if numeric[0] == numeric[1] else [COUNT if n else "" for n in numeric]


_KEY = re.compile(r"([A-Za-z][A-Za-z0-9_.%/-]*)=")


def keyed(rows: list[Row]) -> list[str] | None:
    """A header-less table's column names where its cells say them (`TOC=382.5 ppb`,
    `latency=812ms`: a log of key=value readings), each the key 80 % of the column's
    cells open with; None when no column has one."""
    width = max(len(cells) for _, cells in rows)
    names = []
    for j in range(width):
        keys = [m.group(1) if isinstance(c, str) and (m := _KEY.match(c)) else None
                for _, cells in rows for c in (cells[j] if j < len(cells) else None,)]
        top = max(set(keys), key=keys.count)
        names.append(top if top is not None and keys.count(top) >= 0.8 * len(keys) else "")
    return names if any(names) else None


def _in_table(header: Any, rows: list[Row]) -> Iterator[End]:
    yield from modes(header, rows)
    # its numeric and dated columns, and how long each row took between two dates of it
    # (store/spans.py: `collected to received duration`)
    for name, vals in [*numeric_columns(header, rows, day), *spans(header, rows, day)]:
        cterms = column_terms(name)
        if not cterms or len(vals) < 2:
            continue
        # what its cells' unit says it holds: `top_oil` in °C is a temperature
        j = next((j for j, h in enumerate(header) if str(h) == name), None)
        units = frozenset() if j is None else unit_terms(
            cells[j] for _, cells in rows if j < len(cells)) - cterms
        order = sorted(vals, key=lambda iv: iv[1])
        if order[-1][1] > order[-2][1]:
            yield End(tag("max", cterms), name, rows[order[-1][0]][0], units)
        if order[0][1] < order[1][1]:
            yield End(tag("min", cterms), name, rows[order[0][0]][0], units)


MIN_MODE = 3  # rows the commonest value of a column fills, at least
COUNTING = frozenset("most commonest common frequent frequently often".split())


def modes(header: Any, rows: list[Row]) -> Iterator[End]:
    """The value of a text column that most rows hold, when no other ties it: "which
    exposure setting generated the most contacts" is the commonest `exposure_setting`,
    "who held the most licences" the commonest `user`. Its tag is the column's `~top:`,
    on the passage of its first row, and only a question that counts asks for it
    (`COUNTING`: "the most", not "the worst": "which activity has the worst slack" names
    `activity` as what it wants, not as what it counts)."""
    if header is None or len(rows) < 2 * MIN_MODE:
        return
    for j, name in enumerate(header):
        column = [row[j] if j < len(row) else None for _, row in rows]
        if not all(isinstance(c, str) for c in column[:MIN_VALUES]) or any(
                day(c) is not None for c in column[:MIN_VALUES]):
            continue  # numbers, dates, records: not a column of names
        top = Counter(c for c in column if isinstance(c, str) and c.strip()).most_common(2)
        if len(top) == 2 and top[0][1] >= MIN_MODE and top[0][1] > top[1][1]:
            cterms = column_terms(str(name))
            if cterms:
                first = column.index(top[0][0])
                yield End(tag("top", cterms), str(name), rows[first][0])


# what a column whose cells carry a unit holds, when its header does not say
# (not a time's: `550ms` under START is an offset, `39h` under AGE an age, and a header
# says which)
UNITS = {"°c": "temperature", "°f": "temperature", "°": "temperature", "%": "percent",
         "kb": "size", "mb": "size", "gb": "size", "tb": "size", "kib": "size",
         "mib": "size", "gib": "size", "$": "cost price amount", "€": "cost price amount",
         "£": "cost price amount"}


def unit_terms(cells: Iterable[Any]) -> frozenset[str]:
    """The terms `UNITS` gives the unit that most of a column's cells carry, at least
    70 % of them (`78.4 °C`, `$1,250.00`, `12 %`); none for bare numbers."""
    units: dict[str, int] = {}
    n = 0
    for cell in cells:
        n += 1
        unit = unit_of(cell)
        if unit:
            units[unit] = units.get(unit, 0) + 1
    if not units:
        return frozenset()
    unit, count = max(units.items(), key=lambda kv: kv[1])
    words = UNITS.get(unit)
    return frozenset(terms(words)) if words and count >= 0.7 * n else frozenset()


def asked_columns(question: str, columns: dict[str, frozenset[str]],
                  units: dict[str, frozenset[str]] | None = None) -> dict[str, float]:
    """The column tags (of `columns`: tag -> its column's terms) that `question` asks
    for: an end it names, and how well its words (with what they say of a column,
    `COLUMN_WORDS`) match the column's: the terms both hold over the root of the
    column's count, a cosine but for the question's constant length ("money per
    conversion" matches `Cost / conv.`, 3 of 3, over `Conversions`, 1 of 1). Where none
    of its header's terms is the question's, a column's `units` terms (tag ->
    `unit_terms`) count as one: "the hottest" finds `top_oil` in °C."""
    named = ends(question)
    if not named:
        return {}
    said = {w.lower() for w in WORD.findall(question)}
    words = set(terms(question)) | said  # its stems, and its words ("cover" for `Cover`)
    if LAPSED.search(question):  # "already lapsed" names a validity's end
        words |= EXPIRING
    paired = pair_initials(question)  # "service level" for `sl_pct`
    initialled = {t for t, cterms in columns.items()
                  if any(_initials(c, paired, len(cterms)) for c in cterms)}
    trade = idioms()
    # "the highest reading" names a measurement, unless a word says which ("the driest",
    # "the highest organic carbon reading" of a `TOC` column)
    vague = said & VAGUE.keys() if said.isdisjoint(COLUMN_WORDS) and not initialled else set()
    for w in said:
        implied = COLUMN_WORDS.get(w) or (VAGUE[w] if w in vague else None)
        if implied:
            words.update(terms(implied))
        words.update(t for said_for in trade.get(w.replace("-", ""), ())  # rate-limited
                     for t in terms(said_for))
    since = {SINCE_WORDS[w] for w in said if w in SINCE_WORDS} if said & WAITING else set()
    started = set(terms(SINCE_COLUMNS)) if since else set()
    # on a column of times, "the slowest" is its top and "the fastest" its bottom
    slow, fast = bool(said & SLOW_WORDS), bool(said & FAST_WORDS)
    against = {"min"} if slow and not fast else {"max"} if fast and not slow else set()
    out = {}
    for t, cterms in columns.items():
        if t[1:4] in since and any(c in started for c in cterms):
            out[t] = sum(1 for c in cterms if c in started) / math.sqrt(len(cterms))
        elif (t[1:4] in named or t[1:4] == "top" and said & COUNTING) and not (
                t[1:4] in against and any(c in _TIMES for c in cterms)):
            held = sum(1 for c in cterms
                       if _holds(words, c) or _initials(c, paired, len(cterms)))
            if not held and units and any(_holds(words, c) for c in units.get(t, ())):
                held = 1  # its unit's words, where its header's hold none of the question's
            if held:
                out[t] = held / math.sqrt(len(cterms))
    return out


def _initials(term: str, paired: frozenset[str], of: int) -> bool:
    """A column's term is two adjacent words' initials (`sl` of "service level"), or the
    column is named by three letters alone (`of` terms: 1) that end in them (`TOC` of
    "organic carbon": "total" goes unsaid; not the `per` of `loss_per_train`)."""
    return term in paired or (of == 1 and len(term) == 3 and term.isalpha()
                              and term[1:] in paired)


_LONG_WORD = re.compile(r"[A-Za-z]{4,}|\S")


def pair_initials(question: str) -> frozenset[str]:
    """The initials of two adjacent words of four letters or more, neither a stop word,
    that a column's header may print them by: "service level" is `sl_pct`. Only a
    column's two-letter terms are matched against them (`asked_columns`): as a search
    term, two letters are too many things."""
    words = [w.lower() for w in _LONG_WORD.findall(question.replace("-", " "))]
    return frozenset(a[0] + b[0] for a, b in zip(words, words[1:], strict=False)
                     if len(a) >= 4 and len(b) >= 4 and a.isalpha() and b.isalpha()
                     and a not in STOP and b not in STOP)
