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

from store.relevance import RelevanceIndex

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

    Refinement only, never waited on: `new_passages` hands the passages the index gained
    since the last call to the embedder's feeder (proxy/relate.py), which splits them into
    units off the request path and, as each batch comes back, `land`s a passage's rows
    here (or `give_up`s on it: dropped past the feeder's bound, or in a batch that
    failed). `cosines` is one matrix product over what has landed; what has not simply
    has no cosine this turn. The request path looks nothing up: rows are pushed, not
    pulled from the embedder's cache, an LRU that other sessions' passages can empty
    before this session would have looked."""

    def __init__(self, index: RelevanceIndex, dim: int | None = None) -> None:
        self.index = index
        # the units' vectors, a passage's rows side by side: a buffer that grows by
        # doubling (a matrix rebuilt from a list of rows cost 3 ms a turn at 2,800 rows)
        self._buf: Any = None
        self._n = 0  # rows used
        self._starts: list[int] = []  # the first row of each passage landed
        self._passages: list[int] = []  # its passage number
        self._groups: Any = None  # (starts, order by passage number), rebuilt when grown
        self._seen = 0  # passages handed over so far
        self.waiting = 0  # handed over, neither landed nor given up

    @property
    def count(self) -> int:
        """Vectors held (each one unit's)."""
        return self._n

    @property
    def nbytes(self) -> int:
        """Memory the vectors take: the buffer as allocated, and each passage's place."""
        return (0 if self._buf is None else int(self._buf.nbytes)) + 64 * len(self._starts)

    def new_passages(self) -> list[tuple[int, str]]:
        """(number, text) of the passages added to the index since the last call: each
        handed over once, to come back through `land` or `give_up`."""
        n = self.index.passages_count
        new = [(i, self.index.passage_text(i)) for i in range(self._seen, n)]
        self._seen = n
        self.waiting += len(new)
        return new

    def land(self, passage: int, rows: Any) -> None:
        """Passage `passage`'s units' rows (its `units`, in order), as the embedder made
        them."""
        self.waiting -= 1
        if len(rows):
            self._append(passage, rows)
            self._groups = None

    def give_up(self) -> None:
        """A passage handed over that will not land: it goes without a cosine."""
        self.waiting -= 1

    def _append(self, passage: int, rows: Any) -> None:
        import numpy as np

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
