"""What the lexical index (store/relevance.py) counts: terms, and the passages it scores.

Terms: lower-cased words and numbers, identifiers kept whole *and* split at `_ - . / :`
and camelCase (so `pg-stg-7741.internal` matches "pg", "stg", "7741" and itself), a light
suffix stemmer so "rotation"/"rotate" and "databases"/"database" meet, and English stop
words dropped, so a question in plain words scores on the words that carry its meaning.

Passages: a chunk's text split at line ends into pieces of about 400 characters (~100
tokens): a fact with its line of context, sharp enough to recall on its own. In a
pretty-printed JSON answer a piece ends after a record's closing line where it can, so a
record shorter than a piece keeps its id beside its other fields.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterator
from datetime import date
from functools import lru_cache

PASSAGE_CHARS = 400  # ~100 tokens: a fact with its line of context; sharper vectors too
WORD = re.compile(r"[A-Za-z0-9]+(?:[_\-./:@][A-Za-z0-9]+)*")
_PIECE = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
STOP = frozenset("""
a about above after again against all also am an and any are as at be because been before
being below between both but by can could did do does doing down during each few for from
further had has have having he her here hers herself him himself his how i if in into is it
its itself just let me more most my myself no nor not now of off on once only or other our
ours ourselves out over own same she should so some such than that the their theirs them
themselves then there these they this those through to too under until up very was we were
what when where which while who whom why will with would you your yours yourself
yourselves again ever get got please tell know remember earlier back said say mentioned
told give gave one thing things use used using want need like make sure ok okay yes
sorry thanks thank hi hello
""".split())
_SUFFIXES = ("ings", "ing", "ions", "ion", "ers", "er", "ies", "ied",
             "es", "ed", "ly", "s")


def stem(w: str) -> str:
    """A light suffix stripper (not Porter): enough for plural/tense/-ion variants."""
    if len(w) <= 4 or w.isdigit():
        return w
    for suf in _SUFFIXES:
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            base = w[: -len(suf)]
            if suf in ("ies", "ied"):
                return base + "y"
            if suf == "s" and base.endswith("s"):
                return w  # "class", "access"
            return base
    return w.rstrip("e") if len(w) > 4 else w


# A value whose kind a question names in plain words and the value never says: "which
# port" of `0.0.0.0:26692`, "what IP" of `10.4.2.17`, "which email" of `a@b.org`. Such a
# word also yields its kind as a term (a word of its own, so it matches the question's).
_CODE = r"(?:py|js|ts|tsx|jsx|go|rs|rb|java|kt|c|h|cc|cpp|md|txt|json|ya?ml|toml|cfg|ini|sh|log)"
_HOST = (r"(?:localhost|\d{1,3}(?:\.\d{1,3}){3}|"  # a file's line (app.py:14) is no port
         r"[a-z0-9-]+(?:\.[a-z0-9-]+)*\.(?!" + _CODE + r":)[a-z][a-z0-9-]*)")
SHAPES = {
    "port": re.compile(_HOST + r":\d{2,5}(?=/|$)"),
    "ip": re.compile(r"\d{1,3}(?:\.\d{1,3}){3}(?=[:/]|$)"),
    "email": re.compile(r"[a-z0-9._%+-]+@[a-z0-9-]+(?:\.[a-z0-9-]+)+$"),
}


# When a thing happened, as a question says it: "on Tuesday night", "at 2pm", "overnight".
# A date also yields its weekday, a time its hour ("2pm", "3am") and part of the day.
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_DATE = re.compile(r"(\d{4})-(\d\d)-(\d\d)(?:t(\d\d):(\d\d))?")
_CLOCK = re.compile(r"(\d{1,2}):(\d\d)(?::\d\d(?:[.,]\d+)?)?z?")
# part of the day -> its hours ("evening" stems to "even")
DAYPARTS = {"night": (22, 23, 0, 1, 2, 3, 4), "overnight": (22, 23, 0, 1, 2, 3, 4),
            "morn": tuple(range(5, 12)), "afternoon": tuple(range(12, 17)),
            "even": tuple(range(17, 22))}
_HOUR_WORD = re.compile(r"(\d{1,2})([ap]m)")


@lru_cache(maxsize=65536)
def when(low: str) -> tuple[str, ...]:
    """The weekday of a date (`2024-06-10`: "monday"), the hour and part of the day of a
    time (`14:07`, `2024-06-10t14:07:33z`: "2pm", "afternoon"); a time whose hour has
    one digit (`2:30`, as people write it, where logs print `02:30`) either hour and no
    part of the day."""
    hour = None
    m = _DATE.match(low)
    if m is not None:
        try:
            out = [WEEKDAYS[date(int(m[1]), int(m[2]), int(m[3])).weekday()]]
        except ValueError:
            return ()
        if m[4] is not None:
            hour = int(m[4])
    else:
        m = _CLOCK.fullmatch(low)
        if m is None or int(m[2]) > 59:
            return ()
        out, hour = [], int(m[1])
        if len(m[1]) == 1 and 0 < hour:  # "2:30", as a person writes it: 2am or 2pm
            return (f"{hour}am", f"{hour}pm")
    if hour is not None and hour < 24:
        out.append(f"{hour % 12 or 12}{'am' if hour < 12 else 'pm'}")
        out += [part for part, hours in DAYPARTS.items() if hour in hours]
    return tuple(out)


def _expand(whole: str) -> tuple[str, ...]:
    low = whole.lower()
    if len(whole) > 2 and not low.isalpha():  # an identifier: itself and its pieces
        out = [low]
        for piece in _PIECE.findall(whole):
            p = piece.lower()
            if p not in STOP and (len(p) > 1 or p.isdigit()):
                out.append(stem(p))
        if ":" in low or "@" in low or low.count(".") >= 3:  # else no shape can match
            out += [kind for kind, rx in SHAPES.items() if rx.match(low)]
        if ":" in low or "-" in low:
            out += when(low)
        return tuple(out)
    if low in STOP or len(low) < 2:
        return ()
    if any(c.isupper() for c in whole[1:]):  # camelCase
        return tuple(stem(p.lower()) for p in _PIECE.findall(whole)
                     if p.lower() not in STOP and len(p) > 1)
    return (stem(low),)


_CACHE: dict[str, tuple[str, ...]] = {}
_CACHE_MAX = 200_000


def terms(text: str) -> list[str]:
    """The index terms of `text`, in order, with repeats (tf counts them). A word's terms
    are computed once per process: agent histories reuse a small vocabulary."""
    out: list[str] = []
    cache = _CACHE
    for whole in WORD.findall(text):
        ts = cache.get(whole)
        if ts is None:
            if len(cache) >= _CACHE_MAX:
                cache.clear()
            ts = cache[whole] = _expand(whole)
        out += ts
    return out


@lru_cache(maxsize=8192)
def text_terms(text: str) -> tuple[str, ...]:
    """`terms(text)`, remembered by text: recall weighs the same candidate passages and
    their lines turn after turn, several times each in a turn (proxy/excerpt.py, proxy/
    recall.py); a question turn spent up to ~5 ms splitting them again."""
    return tuple(terms(text))


def identifiers(text: str) -> list[str]:
    """The distinctive identifiers of `text`: 5+ characters with both a letter and a digit
    (ZFA04Y, mia_li_3668, pg-stg-7741.internal, HAT028), not bare numbers, dates or code
    names, which agent outputs repeat everywhere."""
    out = []
    for whole in WORD.findall(text):
        if len(whole) >= 5 and not whole.isalpha() and not _NUMERIC.fullmatch(whole) and (
                any(c.isdigit() for c in whole)):
            out.append(whole.lower())
    return out


_NUMERIC = re.compile(r"[0-9_\-./:@]+")


_CLOSE = re.compile(r"\s*[}\]],?\s*$")


def passages(text: str, size: int = PASSAGE_CHARS) -> list[str]:
    """Split at line ends into pieces of about `size` characters (a long line is cut; a
    last piece under a quarter of `size` joins the one before). A piece that would
    overflow ends instead after its last JSON closing line (`}`, `},`, `]`) when that
    leaves it a third of `size` or more: the rest of the record starts the next piece."""
    if len(text) <= size:
        return [text]
    out: list[str] = []
    cur: list[str] = []
    n = 0
    for line in text.splitlines(keepends=True):
        while len(line) > size:  # a minified JSON blob: cut at a space or comma near size
            cut = max(line.rfind(" ", 0, size), line.rfind(",", 0, size)) + 1 or size
            if cur:
                out.append("".join(cur))
                cur, n = [], 0
            out.append(line[:cut])
            line = line[cut:]
        if n + len(line) > size and cur:
            # a JSON record's closing line in the later part: cut after it, so a record
            # shorter than a passage stays whole (its id beside its status)
            k = next((j for j in range(len(cur) - 1, 0, -1) if _CLOSE.match(cur[j])), 0)
            if k and sum(map(len, cur[:k + 1])) >= size // 3:
                out.append("".join(cur[:k + 1]))
                cur = cur[k + 1:]
            else:
                out.append("".join(cur))
                cur = []
            n = sum(map(len, cur))
        cur.append(line)
        n += len(line)
    if cur:
        tail = "".join(cur)
        if out and len(tail) < size // 4:  # a stub of a line or two: keep its context
            out[-1] += tail
        else:
            out.append(tail)
    return [p for p in out if p.strip()]


# Where a blob may hold a word of each shape: a cheap pattern, then what precedes it
# (a cold history's timestamps all match ":\d\d"; a port follows a host).
_SHAPE_HINTS = {"port": re.compile(r":\d{2,5}"), "ip": re.compile(r"\.\d{1,3}\.\d"),
                "email": re.compile(r"@")}
_SHAPE_BEFORE = {"port": re.compile(r"(?:localhost|\d{1,3}(?:\.\d{1,3}){3}|\.(?!"
                                    + _CODE + r"$)[a-z][a-z0-9-]*)$")}


_STAMP = re.compile(r"\d{4}-\d\d-\d\d(?:t\d\d:\d\d)?|(?<![\d:])\d{1,2}:\d\d")


class Blob:
    """Texts (by number) joined and lower-cased once, to find which of them can hold a
    term: a term is a lower-cased substring of the word it came from (a word, an
    identifier or one of its pieces, a stem's prefix; an -ies/-ied stem's "y" is left
    off the probe), so one `str.find` per term over the whole blob finds them all. A
    kind of value (a port, an IP, an email) and a date's weekday or a time's hour and
    part of the day are no substrings: their words are found by shape."""

    def __init__(self, texts: dict[int, str]) -> None:
        self.nums = list(texts)
        self.starts: list[int] = []
        pos = 0
        for text in texts.values():
            self.starts.append(pos)
            pos += len(text) + 1
        self.text = "\0".join(texts.values()).lower()

    def holders(self, wanted: set[str]) -> set[int]:
        """The numbers of the texts that may hold one of the `wanted` terms."""
        hit: set[int] = set()
        for t in wanted:
            hit.update(self._find(t))
        return hit

    def few_holders(self, term: str, limit: int) -> set[int] | None:
        """The texts that may hold `term`, or None when more than `limit` do (the search
        stops there: a common word costs a few finds, not a pass over the blob)."""
        hit: set[int] = set()
        for n in self._find(term):
            hit.add(n)
            if len(hit) > limit:
                return None
        return hit

    def _find(self, t: str) -> Iterator[int]:
        blob, starts, nums = self.text, self.starts, self.nums
        if t in SHAPES:  # a kind: the words of that shape hold it too
            before = _SHAPE_BEFORE.get(t)
            for m in _SHAPE_HINTS[t].finditer(blob):
                i = m.start()
                if before is None or (  # a host has a dot or is localhost
                        (blob.rfind(".", max(0, i - 64), i) >= 0
                         or blob.endswith("localhost", 0, i))
                        and before.search(blob, max(0, i - 64), i)):
                    yield nums[bisect_right(starts, i) - 1]
        if t in DAYPARTS or t in WEEKDAYS or _HOUR_WORD.fullmatch(t):
            yield from self._timed(t)  # a date or a time holds it
        probe = t[:-1] if t.endswith("y") and len(t) > 2 else t
        i = blob.find(probe)
        while i >= 0:
            k = bisect_right(starts, i) - 1
            yield nums[k]
            nxt = starts[k + 1] if k + 1 < len(starts) else len(blob)
            i = blob.find(probe, nxt)

    def _timed(self, t: str) -> Iterator[int]:
        """The texts holding a date or a time that yields `t` (`when`)."""
        for m in _STAMP.finditer(self.text):
            if t in when(m.group()):
                yield self.nums[bisect_right(self.starts, m.start()) - 1]


_GAP = re.compile(r"\S(?: {2,}|\t)\S")  # columns aligned with spaces
_NAME = re.compile(r"[A-Za-z]{2,}")
_RULE = re.compile(r"[\s|:+=-]*")  # a table's rule line (|---|---|, ====, +--+)


def table_header(text: str) -> str:
    """The header line of a table that `text` opens with (one of its first five lines):
    four columns or more, split by `|`, commas or tabs as the next row (after a rule
    line) is split, or by runs of spaces; named in words (three at least) with one
    character in ten a digit at most, so a row of values or a sentence is not taken."""
    lines = text[:2000].split("\n", 7)[:7]
    for i, line in enumerate(lines[:5]):
        n = len(line)
        if n > 400 or n < 8:
            continue
        counts = (line.count("|"), line.count(","), line.count("\t"))
        aligned = max(counts) < 3
        if aligned and ("  " not in line.strip() or len(_GAP.findall(line)) < 3):
            continue
        if sum(map(line.count, "0123456789")) * 10 > n or len(_NAME.findall(line)) < 3:
            continue
        nxt = next((x for x in lines[i + 1:] if not _RULE.fullmatch(x)), "")
        if (len(_GAP.findall(nxt)) >= 3 if aligned else
                any(k >= 3 and nxt.count(sep) == k
                    for sep, k in zip("|,\t", counts, strict=True))):
            return line
    return ""
