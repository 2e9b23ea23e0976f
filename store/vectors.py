"""The passages' embeddings, beside the lexical index (store/relevance.py): a refinement
the request path uses where the embedder has already answered, never waits for."""

from __future__ import annotations

from typing import Any

from store.embed import key_of
from store.relevance import RelevanceIndex

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
        self.pending: list[tuple[int, bytes | None]] = []  # (passage, its key once hashed)

    @property
    def count(self) -> int:
        """Vectors held (each one passage's)."""
        return len(self._rows)

    def new_texts(self) -> list[str]:
        """Passages added to the index since the last call (to be embedded)."""
        n = self.index.passages_count
        self.pending += ((i, None) for i in range(self._seen, n))
        texts = [self.index.passage_text(i) for i in range(self._seen, n)]
        self._seen = n
        return texts

    def resolve(self, cached_key: Any, limit: int = 128) -> int:
        """Pick up vectors the embedder has finished (oldest first, at most `limit` looked
        up per call); returns how many resolved. A passage's cache key is hashed when it is
        first looked up and kept: an embedder that lags leaves the same passages pending
        turn after turn, and a cold history's thousands wait their turn unhashed."""
        if not self.pending:
            return 0
        if len(self.pending) > PENDING_MAX:  # the embedder dropped them long ago
            del self.pending[:-PENDING_MAX]
        still: list[tuple[int, bytes | None]] = []
        got = 0
        for k, (n, key) in enumerate(self.pending):
            if k >= limit:
                still += self.pending[k:]
                break
            if key is None:
                key = key_of(self.index.passage_text(n))
            v = cached_key(key)
            if v is None:
                still.append((n, key))
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
