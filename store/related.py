"""Related words: what a question's plain words may be called where the answer stands.

A user asks "what growth did the report give for batteries?" of a page that says "battery
storage capacity grew by 9.98%", or "the full amount charged for the big order" of a
record noted "large order". BM25 (store/relevance.py) cannot join "growth" to "grew" or
"big" to "large", and the sentence vectors that could are not computed yet when an agent
loop runs back to back. This table can, in a dictionary lookup: for each English word of
the packaged all-MiniLM-L6-v2's vocabulary, its nearest words by the cosine of the model's
own input token embeddings (the first layer, before any context), at least `FLOOR`, at
most `PER_WORD`. Morphology (grew, growing, grown), near-synonyms (big/large, began/
started, poll/survey) and, being distributional, some antonyms (big/small): so a related
word counts at its cosine times its idf, never as much as the question's own word.

The table ships with ctxwarden (`related.tsv.gz`, ~0.5 MB): built from the model in
about 10 s of numpy (`python -m store.related`), it would otherwise cost every start that
long. `tests/test_related.py` rebuilds part of it from the installed model and compares.
"""

from __future__ import annotations

import gzip
import sys
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

from store.terms import STOP, stem

TABLE = Path(__file__).with_name("related.tsv.gz")
FLOOR = 0.35  # lowest cosine kept in the table (recall.related_words can only raise it)
PER_WORD = 8
BLOCK = 2048  # rows of the similarity matrix computed at once (~170 MB of float32)


class RelatedWords:
    """word -> its related words with their cosines, best first. Each word's line is kept
    as the table has it ("large:59 huge:68") and read when asked: 19,000 strings take ~3
    MB, where 100,000 (word, cosine) pairs took 18."""

    def __init__(self, table: dict[str, str]) -> None:
        self.table = table

    def __len__(self) -> int:
        return len(self.table)

    def of(self, word: str, min_similarity: float = FLOOR) -> list[tuple[str, float]]:
        line = self.table.get(word.lower())
        if not line:
            return []
        out = []
        for item in line.split(" "):
            w, _, c = item.rpartition(":")
            if int(c) / 100 >= min_similarity:
                out.append((w, int(c) / 100))
        return out

    def expand(self, words: Iterable[str], min_similarity: float
               ) -> dict[str, tuple[str, float]]:
        """Related words of `words` (stop words skipped): related word -> (the word it
        stands for, cosine), the best cosine where several words lead to one."""
        out: dict[str, tuple[str, float]] = {}
        for w in dict.fromkeys(x.lower() for x in words):
            if w in STOP:
                continue
            for r, c in self.of(w, min_similarity):
                if c > out.get(r, ("", 0.0))[1]:
                    out[r] = (w, c)
        return out

    @classmethod
    def load(cls, path: Path = TABLE) -> RelatedWords:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return cls(dict(line.rstrip("\n").split("\t", 1) for line in f))


@lru_cache(maxsize=1)
def related_words() -> RelatedWords:
    """The shipped table, loaded once per process (~0.1 s; never on a request's path
    after the first question)."""
    return RelatedWords.load()


def _vocabulary(model_dir: Path) -> tuple[list[str], Any]:
    """The model's whole-word, lower-case, alphabetic tokens of 3+ letters and their
    unit-length input embeddings."""
    import numpy as np
    from safetensors import safe_open

    with safe_open(str(model_dir / "model.safetensors"), "np") as f:
        emb = f.get_tensor("embeddings.word_embeddings.weight")
    vocab = (model_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    keep = [i for i, v in enumerate(vocab)
            if len(v) > 2 and v.isascii() and v.isalpha() and v.islower()]
    vectors = emb[keep].astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return [vocab[i] for i in keep], vectors


def build(model_dir: Path, words: Iterable[str] | None = None) -> dict[str, list[tuple[str, int]]]:
    """Each word's (or only `words`') nearest words, cosine in hundredths, best first;
    neighbours that stem like the word itself are left out (the index already joins
    them) and words with none are left out."""
    import numpy as np

    vocab, vectors = _vocabulary(model_dir)
    rows = list(range(len(vocab))) if words is None else [
        i for i, v in enumerate(vocab) if v in set(words)]
    out: dict[str, list[tuple[str, int]]] = {}
    for a in range(0, len(rows), BLOCK):
        block = rows[a:a + BLOCK]
        sims = vectors[block] @ vectors.T
        sims[np.arange(len(block)), block] = -1.0  # not itself
        top = np.argpartition(-sims, PER_WORD, axis=1)[:, :PER_WORD]
        for r, i in enumerate(block):
            own = stem(vocab[i])
            near = sorted(((int(round(float(sims[r, j]) * 100)), vocab[j]) for j in top[r]
                           if sims[r, j] >= FLOOR and stem(vocab[j]) != own),
                          key=lambda x: (-x[0], x[1]))
            if near:
                out[vocab[i]] = [(w, c) for c, w in near]
    return out


def write(table: dict[str, list[tuple[str, int]]], path: Path = TABLE) -> None:
    lines = [w + "\t" + " ".join(f"{r}:{c}" for r, c in near)
             for w, near in sorted(table.items())]
    # mtime 0: the same model gives the same bytes
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        f.write(("\n".join(lines) + "\n").encode("utf-8"))


if __name__ == "__main__":  # python -m store.related [model folder]
    from store.embed import PACKAGED_MODEL, resolve_model

    folder = Path(sys.argv[1] if len(sys.argv) > 1 else resolve_model(PACKAGED_MODEL))
    built = build(folder)
    write(built)
    print(f"{len(built)} words, {sum(map(len, built.values()))} related, {TABLE}")
