"""The passages' embeddings, beside the lexical index (store/relevance.py): a refinement
the request path uses where the embedder has already answered, never waits for.

A passage is embedded as its units: its lines, a line longer than `UNIT_CHARS` cut at a
sentence end. A fact is one line of a log, one field of a record, one sentence of a page,
and MiniLM tells that sentence from its neighbours where a whole 400-character passage's
vector blurs it (docs/design-notes.md: on the generated sessions the unit holding a tool
fact ranked first of the session's ~1,000-3,000 units for 10 of 17 questions, and in
the first three for 13; whole passages, none). A passage's cosine is its best unit's.
"""

from __future__ import annotations

import re
from typing import Any

from store.embed import key_of
from store.relevance import RelevanceIndex

PENDING_MAX = 8192
SPLIT_MAX = 32  # passages split and hashed per `resolve`, at most
UNIT_CHARS = 200
UNIT_MIN = 40  # shorter lines (a JSON field, a blank-ish log line) join the next ones
_SENTENCE_END = re.compile(r"[.!?;] ")


def units(text: str, size: int = UNIT_CHARS) -> list[str]:
    """`text` in pieces of at most `size` characters: its lines (stripped, empty ones
    dropped), short ones joined until a piece has `UNIT_MIN` characters, a line over
    `size` cut after its last sentence end within `size` (else at `size`)."""
    out: list[str] = []
    cur = ""
    for raw in text.splitlines():
        line = raw.strip()
        while line:
            if len(line) > size:
                ends = [m.end() for m in _SENTENCE_END.finditer(line, 0, size)]
                cut = ends[-1] if ends and ends[-1] > size // 3 else size
                piece, line = line[:cut].strip(), line[cut:].strip()
            else:
                piece, line = line, ""
            if cur and (len(cur) >= UNIT_MIN or len(cur) + 1 + len(piece) > size):
                out.append(cur)
                cur = piece
            else:
                cur = f"{cur} {piece}" if cur else piece
    if cur:
        out.append(cur)
    return out


class Vectors:
    """The passages' embeddings (their units'), where the embedder has already made them.

    Refinement only, never waited on: `pending` holds passages not embedded yet; each turn
    `resolve` looks a bounded number of them up in the embedder's cache (a hash and a dict
    read per unit), and `cosines` is one matrix product over what has resolved. What is
    not ready simply has no cosine this turn. A passage is split into its units only when
    it is first looked up (the embedder's feeder splits its own copy off the request
    path): a history sent whole costs no splitting on the request that brings it."""

    def __init__(self, index: RelevanceIndex, dim: int | None = None) -> None:
        self.index = index
        # the units' vectors, a passage's rows side by side: a buffer that grows by
        # doubling (a matrix rebuilt from a list of rows cost 3 ms a turn at 2,800 rows)
        self._buf: Any = None
        self._n = 0  # rows used
        self._starts: list[int] = []  # the first row of each resolved passage
        self._passages: list[int] = []  # its passage number
        self._groups: Any = None  # (starts, order by passage number), rebuilt when grown
        self._seen = 0  # passages handed to `pending` so far
        # (passage, its units' keys once split and hashed)
        self.pending: list[tuple[int, tuple[bytes, ...] | None]] = []
        self.missed: list[int] = []  # passages the last `resolve` looked up, not ready
        self._again: set[int] = set()  # passages handed over a second time (`lost`)
        self._version: int | None = None  # the embedder's count at the last `resolve`
        self._looked = 0  # passages looked up since that count last changed

    @property
    def count(self) -> int:
        """Vectors held (each one unit's)."""
        return self._n

    @property
    def nbytes(self) -> int:
        """Memory the vectors take: the buffer as allocated, and each passage's place."""
        return (0 if self._buf is None else int(self._buf.nbytes)) + 64 * len(self._starts)

    def new_texts(self) -> list[str]:
        """Passages added to the index since the last call (to be embedded, as `units`)."""
        n = self.index.passages_count
        self.pending += ((i, None) for i in range(self._seen, n))
        texts = [self.index.passage_text(i) for i in range(self._seen, n)]
        self._seen = n
        return texts

    def resolve(self, cached_key: Any, limit: int = 128, split: int = SPLIT_MAX,
                version: int | None = None) -> int:
        """Pick up passages whose units the embedder has all finished (at most `limit`
        looked up per call); returns how many resolved. The ones looked up and still not
        ready go behind the others, so the next call looks at the next ones: a passage
        that never gets a vector (dropped by the feeder past its bound, or in a batch
        that failed) cannot hide the ones behind it. A passage's units are split and
        hashed when it is first looked up, at most `split` a call (~4 µs each), and
        kept: an embedder that lags leaves the same passages pending turn after turn,
        and a cold history's thousands wait their turn unsplit. `version`: how many
        vectors the embedder has made so far; while it stays the same and every pending
        passage was looked up since it last changed, nothing can resolve and nothing is
        looked up (back to back, most turns)."""
        self.missed = []
        if not self.pending:
            return 0
        if version is None or version != self._version:
            self._version, self._looked = version, 0
        elif self._looked >= len(self.pending):
            return 0
        if len(self.pending) > PENDING_MAX:  # the embedder dropped them long ago
            del self.pending[:-PENDING_MAX]
        still: list[tuple[int, tuple[bytes, ...] | None]] = []
        got = looked = 0
        for n, keys in self.pending:
            if looked >= limit:
                break
            if keys is None:
                if split <= 0:
                    break
                split -= 1
                keys = tuple(key_of(u) for u in units(self.index.passage_text(n)))
            looked += 1
            vs = [cached_key(key) for key in keys]
            if any(v is None for v in vs):
                still.append((n, keys))
            else:
                self._append(n, vs)
                got += 1
        self.pending = self.pending[looked:] + still
        self._looked += looked
        self.missed = [n for n, _ in still]
        if got:
            self._groups = None
        return got

    def lost(self) -> list[str]:
        """The texts of the passages the last `resolve` missed, each at most once in its
        life: for a caller that knows everything it handed over was embedded (its feeder
        is idle), so these never will be unless handed over again: dropped past the
        feeder's bound, in a batch that failed, or pushed out of the embedder's cache
        (an LRU) by other sessions' passages before this session looked them up. One
        missed again after that is given up: it leaves `pending`, which would otherwise
        never fall to `CAUGHT_UP` (proxy/relate.py) and no question would wait again."""
        again = [n for n in self.missed if n not in self._again]
        if len(again) < len(self.missed):
            gone = set(self.missed).difference(again)
            self.pending = [(n, keys) for n, keys in self.pending if n not in gone]
        self._again.update(again)
        return [self.index.passage_text(n) for n in again]

    def _append(self, passage: int, rows: list[Any]) -> None:
        import numpy as np

        if not rows:
            return
        need = self._n + len(rows)
        if self._buf is None or need > len(self._buf):
            grown = np.empty((max(256, need, 2 * (0 if self._buf is None else len(self._buf))),
                              len(rows[0])), dtype=np.float32)
            if self._buf is not None:
                grown[:self._n] = self._buf[:self._n]
            self._buf = grown
        self._buf[self._n:need] = rows
        self._starts.append(self._n)
        self._passages.append(passage)
        self._n = need

    def cosines(self, query: Any) -> list[tuple[int, float]]:
        """(passage number, its best unit's cosine) for every passage with a unit
        embedded, in passage order."""
        if not self._n:
            return []
        import numpy as np

        if self._groups is None:
            passages = np.asarray(self._passages, dtype=np.int64)
            order = np.argsort(passages, kind="stable")
            self._groups = (np.asarray(self._starts, dtype=np.intp), order, passages[order])
        starts, order, nums = self._groups
        sims = self._buf[:self._n] @ query
        best = np.maximum.reduceat(sims, starts)[order]  # a passage's best unit
        return list(zip(nums.tolist(), best.astype(np.float64).tolist(), strict=True))
