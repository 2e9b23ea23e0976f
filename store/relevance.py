"""Per-session lexical relevance: BM25 over passages of every chunk a session has shown us.

Why lexical, in process, and hand-rolled (docs/design-notes.md has the measurements):
relevance must be known on the request path for every chunk, in context or evicted, on
the very turn a chunk arrives, without waiting for an embedding. An inverted index kept
per session and updated with only the new chunks answers a query over hundreds of
passages in well under a millisecond. `bm25s` (sparse matrices) must rebuild its index
for every added document, `tantivy` needs a commit and a reader reload per turn, and
LanceDB's full-text search needs an index build before new rows are searchable fast.

Terms: lower-cased words and numbers, identifiers kept whole *and* split at `_ - . / :`
and camelCase (so `pg-stg-7741.internal` matches "pg", "stg", "7741" and itself), a light
suffix stemmer so "rotation"/"rotate" and "databases"/"database" meet, and English stop
words dropped, so a question in plain words scores on the words that carry its meaning.

Scores: Okapi BM25 (k1 = 1.2, b = 0.75) with the query's term weights. `strength` is a
score in [0, 1] that does not depend on the other passages: the BM25 score divided by
Σ idf over the query's 8 most specific (highest-idf) terms — what a passage of average
length scores when it mentions each of them once — clamped at 1; a long query is not
diluted by its many common words, and terms only the query itself holds stay in the
yardstick (a match on two of a question's four telling words is about one half).
`chunk_scores` divides by the best passage's score instead, so the session's best match
is 1 (RWOE's similarity term).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

K1, B = 1.2, 0.75
IDEAL_TERMS = 8  # strength's yardstick: the query's most specific terms, not all of them
PASSAGE_CHARS = 400  # ~100 tokens: a fact with its line of context; sharper vectors too
_WORD = re.compile(r"[A-Za-z0-9]+(?:[_\-./:@][A-Za-z0-9]+)*")
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
    return w.rstrip("e") if len(w) > 5 else w


def _expand(whole: str) -> tuple[str, ...]:
    low = whole.lower()
    if len(whole) > 2 and not low.isalpha():  # an identifier: itself and its pieces
        out = [low]
        for piece in _PIECE.findall(whole):
            p = piece.lower()
            if p not in STOP and (len(p) > 1 or p.isdigit()):
                out.append(stem(p))
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
    for whole in _WORD.findall(text):
        ts = cache.get(whole)
        if ts is None:
            if len(cache) >= _CACHE_MAX:
                cache.clear()
            ts = cache[whole] = _expand(whole)
        out += ts
    return out


def identifiers(text: str) -> list[str]:
    """The distinctive identifiers of `text`: 5+ characters with both a letter and a digit
    (ZFA04Y, mia_li_3668, pg-stg-7741.internal, HAT028), not bare numbers, dates or code
    names, which agent outputs repeat everywhere."""
    out = []
    for whole in _WORD.findall(text):
        if len(whole) >= 5 and not whole.isalpha() and not _NUMERIC.fullmatch(whole) and (
                any(c.isdigit() for c in whole)):
            out.append(whole.lower())
    return out


_NUMERIC = re.compile(r"[0-9_\-./:@]+")


def passages(text: str, size: int = PASSAGE_CHARS) -> list[str]:
    """Split at line ends into pieces of about `size` characters (a long line is cut; a
    last piece under a quarter of `size` joins the one before)."""
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
            out.append("".join(cur))
            cur, n = [], 0
        cur.append(line)
        n += len(line)
    if cur:
        tail = "".join(cur)
        if out and len(tail) < size // 4:  # a stub of a line or two: keep its context
            out[-1] += tail
        else:
            out.append(tail)
    return [p for p in out if p.strip()]


@dataclass(frozen=True, slots=True)
class Hit:
    chunk_id: str
    piece: int  # passage number within the chunk
    text: str
    score: float  # raw BM25
    strength: float  # score / the query's ideal score, in [0, 1]


class RelevanceIndex:
    """BM25 over the passages of every chunk added; chunks are added once (by id)."""

    def __init__(self, passage_chars: int = PASSAGE_CHARS) -> None:
        self.passage_chars = passage_chars
        self._chunks: dict[str, list[int]] = {}  # chunk id -> passage numbers
        self._owner: list[str] = []  # passage -> chunk id
        self._piece: list[int] = []
        self._text: list[str] = []
        self._len: list[int] = []
        self._post: dict[str, dict[int, int]] = {}  # term -> {passage: tf}
        self._total_len = 0
        self._annotated: set[str] = set()

    def __len__(self) -> int:
        return len(self._chunks)

    def __contains__(self, chunk_id: str) -> bool:
        return chunk_id in self._chunks

    @property
    def passages_count(self) -> int:
        return len(self._owner)

    def add(self, chunk_id: str, text: str) -> bool:
        """Index a chunk's passages; False (and nothing done) if it is indexed already."""
        if chunk_id in self._chunks:
            return False
        nums: list[int] = []
        post = self._post
        for k, piece in enumerate(passages(text, self.passage_chars)):
            n = len(self._owner)
            tf = Counter(terms(piece))
            self._owner.append(chunk_id)
            self._piece.append(k)
            self._text.append(piece)
            length = sum(tf.values())
            self._len.append(length)
            self._total_len += length
            for t, c in tf.items():
                d = post.get(t)
                if d is None:
                    post[t] = {n: c}
                else:
                    d[n] = c
            nums.append(n)
        self._chunks[chunk_id] = nums
        return True

    def annotate(self, chunk_id: str, context: str) -> bool:
        """Count each term of `context` once more in every passage of the chunk, once per
        chunk: a tool output's call (its name and arguments) says what all of the output
        is about, though few of its passages repeat those words (`read_file` of
        `deploy/staging.env` is the staging settings, line after line of `KEY=value`).
        The passages' text is unchanged; only what they match grows."""
        nums = self._chunks.get(chunk_id)
        if nums is None or chunk_id in self._annotated:
            return False
        self._annotated.add(chunk_id)
        extra = set(terms(context))
        post = self._post
        for n in nums:
            for t in extra:
                d = post.get(t)
                if d is None:
                    post[t] = {n: 1}
                else:
                    d[n] = d.get(n, 0) + 1
            self._len[n] += len(extra)
            self._total_len += len(extra)
        return True

    def add_many(self, items: Iterable[tuple[str, str]]) -> int:
        return sum(self.add(cid, text) for cid, text in items)

    def passage_text(self, n: int) -> str:
        return self._text[n]

    def hit(self, n: int, score: float = 0.0, strength: float = 0.0) -> Hit:
        """Passage `n` as a Hit (for matches found another way: vectors)."""
        return Hit(self._owner[n], self._piece[n], self._text[n], score, strength)

    def text(self, chunk_id: str) -> str:
        return "".join(self._text[n] for n in self._chunks.get(chunk_id, ()))

    def idf(self, term: str) -> float:
        n = len(self._owner)
        df = len(self._post.get(term, ()))
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))

    def query_terms(self, query: str) -> dict[str, float]:
        """Unique query terms with their idf (terms the index never saw are dropped)."""
        out: dict[str, float] = {}
        for t in terms(query):
            if t not in out and t in self._post:
                out[t] = self.idf(t)
        return out

    def rare_identifiers(self, text: str, exclude: frozenset[str] | set[str],
                         max_df: int = 2) -> dict[str, float]:
        """Distinctive identifiers of `text` (see `identifiers`) found in 1..`max_df` passages
        outside the `exclude`d chunks: what a tool output can be said to point back at,
        rather than the formatting its sibling outputs share."""
        out: dict[str, float] = {}
        owner = self._owner
        for t in identifiers(text):
            if t in out:
                continue
            post = self._post.get(t)
            if post is None or len(post) > max_df + len(exclude) * 4:
                continue
            outside = sum(1 for n in post if owner[n] not in exclude)
            if 1 <= outside <= max_df:
                out[t] = self.idf(t)
        return out

    def search(self, query: str | dict[str, float],
               exclude: frozenset[str] | set[str] = frozenset()) -> list[Hit]:
        """Every passage outside the `exclude`d chunks that shares a term with the query,
        best first."""
        q = self.query_terms(query) if isinstance(query, str) else query
        if not q or not self._owner:
            return []
        avg = self._total_len / len(self._owner)
        lens = self._len
        acc: dict[int, float] = {}
        get = acc.get
        for t, w in q.items():
            for n, tf in self._post[t].items():
                norm = K1 * (1.0 - B + B * lens[n] / avg)
                acc[n] = get(n, 0.0) + w * tf * (K1 + 1.0) / (tf + norm)
        ideal = sum(sorted(q.values(), reverse=True)[:IDEAL_TERMS])
        owner = self._owner
        hits = [Hit(owner[n], self._piece[n], self._text[n], s, min(1.0, s / ideal))
                for n, s in acc.items() if owner[n] not in exclude]
        hits.sort(key=lambda h: (-h.score, h.chunk_id, h.piece))
        return hits

    def chunk_scores(self, hits: Iterable[Hit]) -> dict[str, float]:
        """Per chunk, its best passage's score relative to the best passage overall: the
        session's best match is 1.0 (empty when nothing matched)."""
        best: dict[str, float] = {}
        top = 0.0
        for h in hits:
            if h.score > best.get(h.chunk_id, 0.0):
                best[h.chunk_id] = h.score
                top = max(top, h.score)
        if top <= 0:
            return {}
        return {cid: s / top for cid, s in best.items()}


PENDING_MAX = 8192


class Vectors:
    """The passages' embeddings, where the embedder has already made them.

    Refinement only, never waited on: `pending` holds passages not embedded yet; each turn
    `resolve` looks a bounded number of them up in the embedder's cache (a hash and a dict
    read each), and `cosines` is one matrix product over what has resolved. What is not
    ready simply has no cosine this turn."""

    def __init__(self, index: RelevanceIndex, dim: int | None = None) -> None:
        self.index = index
        self._rows: list[Any] = []
        self._nums: list[int] = []  # passage number of each row
        self._matrix: Any = None
        self._seen = 0  # passages handed to `pending` so far
        self.pending: list[int] = []

    def new_texts(self) -> list[str]:
        """Passages added to the index since the last call (to be embedded)."""
        n = self.index.passages_count
        fresh = list(range(self._seen, n))
        self._seen = n
        self.pending += fresh
        return [self.index.passage_text(i) for i in fresh]

    def resolve(self, cached: Any, limit: int = 128) -> int:
        """Pick up vectors the embedder has finished (oldest first, at most `limit` looked
        up per call); returns how many resolved."""
        if not self.pending:
            return 0
        if len(self.pending) > PENDING_MAX:  # the embedder dropped them long ago
            del self.pending[:-PENDING_MAX]
        still: list[int] = []
        got = 0
        for k, n in enumerate(self.pending):
            if k >= limit:
                still += self.pending[k:]
                break
            v = cached(self.index.passage_text(n))
            if v is None:
                still.append(n)
            else:
                self._rows.append(v)
                self._nums.append(n)
                got += 1
        self.pending = still
        if got:
            self._matrix = None
        return got

    def cosines(self, query: Any) -> list[tuple[int, float]]:
        """(passage number, cosine) for every embedded passage."""
        if not self._rows:
            return []
        if self._matrix is None:
            import numpy as np

            self._matrix = np.vstack(self._rows)
        sims = self._matrix @ query
        return list(zip(self._nums, (float(s) for s in sims), strict=True))
