"""Per-session lexical relevance: BM25 over passages of every chunk a session has shown us.

Why lexical, in process, and hand-rolled (docs/design-notes.md has the measurements):
relevance must be known on the request path for every chunk, in context or evicted, on
the very turn a chunk arrives, without waiting for an embedding. An inverted index kept
per session and updated with only the new chunks answers a query over hundreds of
passages in well under a millisecond. `bm25s` (sparse matrices) must rebuild its index
for every added document, `tantivy` needs a commit and a reader reload per turn, and
LanceDB's full-text search needs an index build before new rows are searchable fast.

Terms and passages: store/terms.py; the lazy inverted index: store/postings.py. A
table's odd rows (store/notable.py) count a tag that a question naming their kind
("below zero", "the biggest") matches: `examine`, `notable_terms`.

Scores: Okapi BM25 (k1 = 1.2, b = 0.75) with the query's term weights, a passage's length
measured in characters (so it is known before the passage is indexed). `strength` is a
score in [0, 1] that does not depend on the other passages: the BM25 score divided by
Σ idf over the query's 8 most specific (highest-idf) terms — what a passage of average
length scores when it mentions each of them once — clamped at 1; a long query is not
diluted by its many common words, and terms only the query itself holds stay in the
yardstick (a match on two of a question's four telling words is about one half).
`chunk_scores` divides by the best passage's score instead, so the session's best match
is 1 (RWOE's similarity term).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from itertools import pairwise

from store.extremes import asked_columns, column_terms, ends, extremes
from store.notable import notable, placed, row_terms, said
from store.notablewords import asked
from store.postings import EAGER, Hit, Postings
from store.tabular import tables
from store.terms import PASSAGE_CHARS, WORD, identifiers, terms
from store.timedlines import timed_lines

__all__ = ["EAGER", "IDEAL_TERMS", "Hit", "RelevanceIndex"]

K1, B = 1.2, 0.75
IDEAL_TERMS = 8  # strength's yardstick: the query's most specific terms, not all of them
FEW = 16  # waiting passages a related word may be in, at most, to be indexed for it
FEW_BUDGET = 64  # and passages indexed so in all, on one request (store/postings.py)
NOTABLE_WEIGHT = 1.0  # a notable row's tag, named by a question: x its idf
# a question's sentences: "the most accounts" asks for a column's end, and "Draft the
# reason-for-suspicion paragraph" after it names no column to take it (not "7.1"'s dot)
_SENTENCES = re.compile(r"(?<=[.?!])\s+|\n+")


class RelevanceIndex(Postings):
    """BM25 over `Postings`: the query's terms (and a question's related words and
    phrases) scored against every passage that holds one, best first."""

    def __init__(self, passage_chars: int = PASSAGE_CHARS, eager: int = EAGER) -> None:
        super().__init__(passage_chars, eager)
        self._examined = 0  # chunks examined for notable rows, in the order added
        # passage -> its notable rows and column ends: (tag, said, the row's probes)
        self._notes: dict[int, list[tuple[str, str, tuple[str, ...]]]] = {}
        # the tags of the columns' ends found (store/extremes.py) -> the column's terms
        self._columns: dict[str, frozenset[str]] = {}
        self._units: dict[str, frozenset[str]] = {}  # tag -> its column's unit's terms

    @property
    def unexamined(self) -> int:
        return len(self._ids) - self._examined

    def examine(self, limit: int | None = None) -> int:
        """Find the notable rows (store/notable.py) of the chunks not examined yet, `limit`
        of them at most; how many are left. Their passages count the rows' tags from
        now on."""
        ids = self._ids
        stop = len(ids) if limit is None else min(len(ids), self._examined + limit)
        for cid in ids[self._examined:stop]:
            nums = self._chunks[cid]
            pieces = [self._text[n] for n in nums]
            text = "".join(pieces)
            tabs = tables(text)
            timed = timed_lines(text)  # a log's lines that say how long each took
            if not tabs and not timed:
                continue
            found = notable(text, tabs) if tabs else []
            for k, rows in placed(found, pieces).items() if found else ():
                extra = row_terms(rows)
                self.add_terms(nums[k], extra)
                self._notes.setdefault(nums[k], []).extend(
                    zip(extra, (said([r]) for r in rows), (r.probes for r in rows),
                        strict=True))
            ends_of = extremes(tabs) + timed if tabs else timed
            for k, top in placed(ends_of, pieces).items():  # a column's ends
                self.add_terms(nums[k], [e.tag for e in top])
                for e in top:
                    self._columns[e.tag] = column_terms(e.column)
                    if e.units:
                        self._units[e.tag] = self._units.get(e.tag, frozenset()) | e.units
                self._notes.setdefault(nums[k], []).extend(
                    (e.tag, f"{e.tag[1:4]} {e.column}", e.probes) for e in top)
        self._examined = stop
        return len(ids) - stop

    def notable_terms(self, question: str) -> dict[str, float]:
        """The tags of notable rows that `question` names ("the biggest amount": the
        highest values'), weighted NOTABLE_WEIGHT x idf, and of the columns' ends it names
        ("the most restarts": store/extremes.py), also by the share of the column's words
        it holds; the chunks the background has not examined yet are examined first."""
        tags = asked(question)
        if not (tags or ends(question)):
            return {}
        self.examine()
        columns: dict[str, float] = {}  # an end and a column's words in one sentence
        for sentence in _SENTENCES.split(question):
            for t, share in asked_columns(sentence, self._columns, self._units).items():
                columns[t] = max(share, columns.get(t, 0.0))
        self._settle([*tags, *columns])
        out = {t: NOTABLE_WEIGHT * self._idf(t) for t in tags if t in self._post}
        out.update((t, NOTABLE_WEIGHT * share * self._idf(t)) for t, share in columns.items()
                   if t in self._post)
        return out

    def phrases(self, text: str) -> dict[str, tuple[float, dict[int, int]]]:
        """The pairs of adjacent words of `text` (a space apart: "Mateo Ramaswamy", "Hotel
        Alfama", "Global Q3") that passages hold as such, each with its own idf and its
        occurrences per passage: "pair" -> (idf, {passage: count}). Bag-of-words BM25
        scores a roster that names Mateo Delacroix and Sanne Ramaswamy as high as the
        record of Mateo Ramaswamy; a pair both hold is rare where its words are not.
        Looked for only where both words' terms occur (their postings' intersection, as
        settled by `query_terms`), by a case-blind match on the passage's text."""
        words = list(WORD.finditer(text))
        out: dict[str, tuple[float, dict[int, int]]] = {}
        for m1, m2 in pairwise(words):
            gap = text[m1.end():m2.start()]
            if not gap or gap.strip(" "):
                continue
            a, b = m1.group(), m2.group()
            ta, tb = terms(a), terms(b)
            pa = self._post.get(ta[0]) if ta else None
            pb = self._post.get(tb[0]) if tb else None
            if not pa or not pb:
                continue
            small, big = (pa, pb) if len(pa) <= len(pb) else (pb, pa)
            rx = re.compile(rf"(?<![A-Za-z0-9]){re.escape(a)} +{re.escape(b)}(?![A-Za-z0-9])",
                            re.I)
            post = {}
            for n in small:
                if n in big:
                    k = len(rx.findall(self._text[n]))
                    if k:
                        post[n] = k
            if post:
                out[f"{a.lower()} {b.lower()}"] = (self._idf_of(len(post)), post)
        return out

    def query_terms(self, query: str, settle: bool = True) -> dict[str, float]:
        """Unique query terms with their idf (terms the index never saw are dropped).
        `settle=False` on a history that arrived whole: they count among the passages
        indexed so far, none indexed for them (a turn's few new ones are, as always)."""
        ts = list(dict.fromkeys(terms(query)))
        if settle or len(self._waiting) <= self.eager:
            self._settle(ts)
        return {t: self._idf(t) for t in ts if t in self._post}

    def rare_identifiers(self, text: str, exclude: frozenset[str] | set[str],
                         max_df: int = 2) -> dict[str, float]:
        """Distinctive identifiers of `text` (see `identifiers`) found in 1..`max_df` passages
        outside the `exclude`d chunks: what a tool output can be said to point back at,
        rather than the formatting its sibling outputs share."""
        ids = list(dict.fromkeys(identifiers(text)))
        self._settle(ids)
        out: dict[str, float] = {}
        owner = self._owner
        for t in ids:
            post = self._post.get(t)
            if post is None or len(post) > max_df + len(exclude) * 4:
                continue
            outside = sum(1 for n in post if owner[n] not in exclude)
            if 1 <= outside <= max_df:
                out[t] = self._idf(t)
        return out

    def related_terms(self, related: dict[str, tuple[str, float]],
                      own: dict[str, float]) -> dict[str, float]:
        """Terms of `related` words (store/related.py: word -> (the query's word, cosine))
        that the index holds and the query does not, weighted cosine x idf. On a history
        that arrived whole they count among the passages indexed so far (those holding one
        of the query's own terms, and what the background has indexed), and those few
        passages hold (at most `FEW` each, `FEW_BUDGET` in all, best cosine first) are
        indexed for them: settling them all indexed ~900 more passages of a 1,000-message
        history on its request (20 -> 63 ms), common words such as "person" or "small"
        being among them."""
        cos: dict[str, float] = {}
        for word, (_, c) in related.items():
            # a code stands whole ("eu-west-2", not "west" and "2"); a short one by its
            # letters too ("euc1" in gs-euc1-a-3246 is "euc"), never by its number; a
            # number stands for itself (an idiom's status code: "throttled" -> 429)
            ts = terms(word)
            for t in ts[:1] if "-" in word else ts:
                if t not in own and (t == word or not t.isdigit()) and c > cos.get(t, 0.0):
                    cos[t] = c
        if len(self._waiting) <= self.eager:
            self._settle(cos)
        else:
            self._settle_few(sorted(cos, key=lambda t: (-cos[t], t)), FEW, FEW_BUDGET)
        return {t: c * self._idf(t) for t, c in cos.items() if t in self._post}

    def search(self, query: str | dict[str, float],
               exclude: frozenset[str] | set[str] = frozenset(),
               ideal: float | None = None,
               phrases: dict[str, tuple[float, dict[int, int]]] | None = None) -> list[Hit]:
        """Every passage outside the `exclude`d chunks that shares a term with the query,
        best first. `ideal`: strength's yardstick, when the query's weights are not all
        its own words' (related words count in the score, not in the yardstick).
        `phrases` (see `phrases`) count as terms of their own, outside the yardstick."""
        q = self.query_terms(query) if isinstance(query, str) else query
        if not q or not self._owner:
            return []
        avg = self._total_len / len(self._owner)
        lens = self._len
        acc: dict[int, float] = {}
        get = acc.get
        for w, post in [*((w, self._post[t]) for t, w in q.items()),
                        *(phrases or {}).values()]:
            for n, tf in post.items():
                norm = K1 * (1.0 - B + B * lens[n] / avg)
                acc[n] = get(n, 0.0) + w * tf * (K1 + 1.0) / (tf + norm)
        if ideal is None:
            ideal = self.ideal(q)
        owner = self._owner
        tags = {t for t in q if t[:1] == "~"}  # a question's (notable_terms)
        notes = self._notes if tags else {}
        hits = [Hit(owner[n], self._piece[n], self._text[n], s, min(1.0, s / ideal),
                    *(_asked(note, q) if (note := notes.get(n)) else ("", ())))
                for n, s in acc.items() if owner[n] not in exclude]
        hits.sort(key=lambda h: (-h.score, h.chunk_id, h.piece))
        return hits

    @staticmethod
    def ideal(q: dict[str, float]) -> float:
        """What a passage of average length scores mentioning each of the query's
        `IDEAL_TERMS` most specific terms once (`strength` = score / this)."""
        return sum(sorted(q.values(), reverse=True)[:IDEAL_TERMS])

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


def _asked(note: list[tuple[str, str, tuple[str, ...]]], q: dict[str, float]
           ) -> tuple[str, tuple[tuple[str, ...], ...]]:
    """A passage's rows that the question's tags name: as recall's reason says them, and
    their probes (what a line of the row holds: recall shows that line first,
    proxy/excerpt.py), the row of the tag the question weighs most first."""
    named = [(q[t], said, probes) for t, said, probes in note if t in q]
    rows = sorted(((w, probes) for w, _, probes in named if probes), key=lambda x: -x[0])
    return ", ".join(said for _, said, _ in named), tuple(p for _, p in rows)
