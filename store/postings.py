"""The lazy inverted index under store/relevance.py: a session's passages and postings.

Lazy in bulk: a chunk's passages are split and numbered when it is added, but their
terms reach the postings only when needed. A turn's few new passages are indexed at
once (up to `eager` waiting); a whole history arriving cold (1,000 messages, ~600 KB)
waits, and each query first indexes the waiting passages that can hold one of its
terms (a term is a lower-cased substring of the word it came from: a word, an
identifier or one of its pieces, a stem's prefix; an -ies/-ied stem's "y" is left off),
found with one `str.find` per term over the waiting text, plus those whose chunk's
table header holds it. A chunk's annotation (its call, and what the calling message said)
holding one is counted in its waiting passages, which are not indexed for it: such
annotations hold common words ("Next: run the tests"), and a query holding one indexed
most of a cold history. BM25's length norm counts a passage's characters,
not its terms, so it is known without indexing: for the terms a query settles, scores and
document frequencies are the same as if everything had been indexed up front (those it
does not settle, a reply's words and a question's related words, count among what is
indexed).
`index_some` indexes the rest off the request path; a later request whose query has
terms it will not settle first indexes whatever is still left (`catch_up`), so no
request's scores depend on how far that got.

A table's header says what its columns hold, and a row passages further down holds only
values ("ap-southeast-2 | ranked | 283.4 s"): each passage after a table's first counts
the header's terms once (`add`; store/terms.py `table_header`), its text unchanged.
Terms and passages: store/terms.py.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import islice

from store.terms import PASSAGE_CHARS, Blob, passages, table_header, terms

EAGER = 64  # waiting passages indexed at once: a turn's new ones, not a cold history's


@dataclass(frozen=True, slots=True)
class Hit:
    chunk_id: str
    piece: int  # passage number within the chunk
    text: str
    score: float  # raw BM25
    strength: float  # score / the query's ideal score, in [0, 1]
    note: str = ""  # its notable rows, when the query asked for them (store/notable.py)
    rows: tuple[tuple[str, ...], ...] = ()  # ... and what each row's line holds
    # its place among the matches of the question it answers best, where a message asks
    # two or more (proxy/step.py `search`): recall takes each question's best few first
    rank: int = 0


class Postings:
    """Passages of every chunk added (chunks are added once, by id) and their terms' postings
    ({term: {passage: tf}}), indexed lazily (see the module). store/relevance.py scores
    queries over them."""

    def __init__(self, passage_chars: int = PASSAGE_CHARS, eager: int = EAGER) -> None:
        self.passage_chars = passage_chars
        self.eager = eager
        # chunk id -> its passage numbers, consecutive: a range, which the garbage
        # collector does not track (a list per chunk made every full collection longer)
        self._chunks: dict[str, range] = {}
        self._owner: list[str] = []  # passage -> chunk id
        self._piece: list[int] = []
        self._text: list[str] = []
        self._len: list[int] = []  # in characters (BM25's length norm: see the module)
        self._post: dict[str, dict[int, int]] = {}  # term -> {passage: tf}
        self._total_len = 0
        self._annotated: dict[str, frozenset[str]] = {}  # chunk id -> its call's terms
        # chunk id -> the table header its first passage opens with, which its later
        # passages count (`add`), and the header's terms
        self._heads: dict[str, frozenset[str]] = {}
        self._head_lines: dict[str, str] = {}
        self._waiting: dict[int, None] = {}  # passages not in the postings yet, in order
        self._blob: Blob | None = None  # their text, lowered, to find terms in
        self._mark = 0  # passages below it came with earlier requests (`catch_up`)
        self._ids: list[str] = []  # chunk ids in the order added
        # terms a passage counts beyond its text's (`add_terms`), until it is indexed
        self._extra: dict[int, list[str]] = {}
        # waiting passages whose chunk's annotation is counted already (`_settle`)
        self._noted: set[int] = set()

    def __len__(self) -> int:
        return len(self._chunks)

    def __contains__(self, chunk_id: str) -> bool:
        return chunk_id in self._chunks

    @property
    def chars(self) -> int:
        """Characters of text held (every chunk added): what a session's memory scales with."""
        return self._total_len

    @property
    def passages_count(self) -> int:
        return len(self._owner)

    @property
    def waiting(self) -> int:
        """Passages added but not indexed yet."""
        return len(self._waiting)

    def add(self, chunk_id: str, text: str) -> bool:
        """Add a chunk's passages (they wait: see the class); False (and nothing done) if it
        is in the index already."""
        if chunk_id in self._chunks:
            return False
        first = len(self._owner)
        for k, piece in enumerate(passages(text, self.passage_chars)):
            self._waiting[len(self._owner)] = None
            self._owner.append(chunk_id)
            self._piece.append(k)
            self._text.append(piece)
            self._len.append(len(piece))
            self._total_len += len(piece)
        self._chunks[chunk_id] = range(first, len(self._owner))
        if len(self._owner) - first > 1:
            head = table_header(self._text[first])
            if head:
                self._heads[chunk_id] = frozenset(terms(head))
                self._head_lines[chunk_id] = head
        self._ids.append(chunk_id)
        self._blob = None
        return True

    def add_terms(self, n: int, extra: list[str]) -> None:
        """Passage `n` counts `extra` terms beyond its text's (a notable row's tag: store/
        relevance.py); its text is unchanged."""
        if n in self._waiting:
            self._extra.setdefault(n, []).extend(extra)
        else:
            self._count(n, Counter(extra))

    def annotated(self, chunk_id: str) -> bool:
        return chunk_id in self._annotated

    def annotate(self, chunk_id: str, context: str) -> bool:
        """Count each term of `context` once more in every passage of the chunk, once per
        chunk: a tool output's call (its name and arguments) says what all of the output
        is about, though few of its passages repeat those words (`read_file` of
        `deploy/staging.env` is the staging settings, line after line of `KEY=value`).
        The passages' text is unchanged; only what they match grows."""
        nums = self._chunks.get(chunk_id)
        if nums is None or chunk_id in self._annotated:
            return False
        extra = self._annotated[chunk_id] = frozenset(terms(context))
        for n in nums:
            if n not in self._waiting:
                self._count(n, dict.fromkeys(extra, 1))
        return True

    def catch_up(self) -> int:
        """Index the passages still waiting from earlier requests (those before `mark`),
        how many. A query's scores then do not depend on how far the background got
        between two requests: a partly indexed history gives other document frequencies
        for terms a query does not settle (a reply's, a question's related words), so two
        replicas, or one at another pace, would forward different recalls. Called only
        for such a query (proxy/relate.py): one that settles all its terms (a turn ending
        in tool results, a question without related words) scores the same either way.
        Between the turns of an agent loop the background has finished; after a history
        sent whole and answered at once, the first such request indexes the rest (~90
        ms for 1,000 messages, once)."""
        done = 0
        waiting = self._waiting
        while waiting:
            n = next(iter(waiting))
            if n >= self._mark:
                break
            self._index(n)
            done += 1
        return done

    def mark(self) -> None:
        """The passages added so far are an earlier request's for `catch_up`."""
        self._mark = len(self._owner)

    def index_some(self, limit: int) -> int:
        """Index up to `limit` waiting passages, oldest first; how many still wait."""
        for n in list(islice(self._waiting, limit)):
            self._index(n)
        return len(self._waiting)

    def _index(self, n: int) -> None:
        del self._waiting[n]
        self._blob = None
        tf = Counter(terms(self._text[n]))
        owner = self._owner[n]
        if n in self._noted:
            self._noted.discard(n)
        else:
            for t in self._annotated.get(owner, ()):
                tf[t] += 1
        if self._piece[n]:
            for t in self._heads.get(owner, ()):
                tf[t] += 1
        extra = self._extra.pop(n, None)
        if extra:
            tf.update(extra)
        self._count(n, tf)

    def _count(self, n: int, tf: dict[str, int]) -> None:
        post = self._post
        for t, c in tf.items():
            d = post.get(t)
            if d is None:
                post[t] = {n: c}
            else:
                d[n] = d.get(n, 0) + c

    def _settle(self, wanted: Iterable[str]) -> None:
        """Index every waiting passage that may hold one of the `wanted` terms."""
        if len(self._waiting) <= self.eager:  # a turn's worth: all of it, exactly
            self.index_some(self.eager)
            return
        want = set(wanted)
        if not want:
            return
        if self._blob is None:
            self._blob = Blob({n: self._text[n] for n in self._waiting})
        hit = self._blob.holders(want)
        for cid, extra in self._annotated.items():  # counted, not indexed: a chunk's
            if not want.isdisjoint(extra):  # annotation holds common words ("next")
                once = dict.fromkeys(extra, 1)
                for n in self._chunks[cid]:
                    if n in self._waiting and n not in self._noted:
                        self._count(n, once)
                        self._noted.add(n)
        for cid, extra in self._heads.items():
            if not want.isdisjoint(extra):
                hit.update(n for n in self._chunks[cid][1:] if n in self._waiting)
        hit.update(n for n, extra in self._extra.items() if not want.isdisjoint(extra))
        for n in sorted(hit):
            if n in self._waiting:
                self._index(n)

    def _settle_few(self, wanted: Iterable[str], limit: int, budget: int) -> None:
        """Index the waiting passages of each `wanted` term (in order) that at most
        `limit` of them may hold, `budget` passages in all: on a history sent whole, a
        question's related word that few passages hold ("renew") can be the answer's
        only word, where a common one ("time") would index most of the history."""
        wanted = list(wanted)
        if not wanted:  # no blob to build (a join of the whole waiting text)
            return
        if self._blob is None:
            self._blob = Blob({n: self._text[n] for n in self._waiting})
        blob = self._blob  # indexing drops `_blob`; this one still finds what waits
        for t in wanted:
            if budget <= 0:
                return
            for n in sorted(blob.few_holders(t, limit) or ()):
                if n in self._waiting and budget > 0:
                    self._index(n)
                    budget -= 1

    def add_many(self, items: Iterable[tuple[str, str]]) -> int:
        return sum(self.add(cid, text) for cid, text in items)

    def passage_text(self, n: int) -> str:
        return self._text[n]

    def chunk_hits(self, chunk_id: str) -> list[Hit]:
        """A chunk's passages, in order, as Hits scoring nothing."""
        return [self.hit(n) for n in self._chunks.get(chunk_id, ())]

    def hit(self, n: int, score: float = 0.0, strength: float = 0.0) -> Hit:
        """Passage `n` as a Hit (for matches found another way: vectors)."""
        return Hit(self._owner[n], self._piece[n], self._text[n], score, strength)

    def following(self, chunk_id: str, piece: int) -> str:
        """The passage after `piece` in its chunk ("" after the last)."""
        nums = self._chunks.get(chunk_id)
        return self._text[nums[piece + 1]] if nums is not None and piece + 1 < len(nums) else ""

    def header(self, chunk_id: str) -> str:
        """The header line of the table the chunk opens with, if it spans passages."""
        return self._head_lines.get(chunk_id, "")

    def preceding(self, chunk_id: str, piece: int) -> str:
        """The passage before `piece` in its chunk ("" before the first)."""
        nums = self._chunks.get(chunk_id)
        return self._text[nums[piece - 1]] if nums is not None and 0 < piece < len(nums) else ""

    def text(self, chunk_id: str) -> str:
        return "".join(self._text[n] for n in self._chunks.get(chunk_id, ()))

    def idf(self, term: str) -> float:
        self._settle((term,))
        return self._idf(term)

    def df(self, term: str) -> int:
        """How many indexed passages hold `term` (0 for a term not indexed yet)."""
        return len(self._post.get(term, ()))

    def _idf(self, term: str) -> float:
        return self._idf_of(len(self._post.get(term, ())))

    def _idf_of(self, df: int) -> float:
        n = len(self._owner)
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))
