"""Related words: what a question's plain words may be called where the answer stands.

A user asks "what growth did the report give for batteries?" of a page that says "battery
storage capacity grew by 9.98%", or "the full amount charged for the big order" of a
record noted "large order". BM25 (store/relevance.py) cannot join "growth" to "grew" or
"big" to "large", and the sentence vectors that could are not computed yet when an agent
loop runs back to back. This table can, in a dictionary lookup: for each English word of
the packaged all-MiniLM-L6-v2's vocabulary, its nearest words by the cosine of the model's
own input token embeddings (the first layer, before any context), at least `FLOOR`, at
most `PER_WORD`. Morphology (grew, growing, grown), near-synonyms (big/large, began/
started, poll/survey) and, being distributional, antonyms (big/small, high/low): a related
word counts at its cosine times its idf, never as much as the question's own word, and an
opposite not at all (`opposite`: a listed pair in its inflected forms, or a negation by
prefix; the table keeps them, `RelatedWords.of` leaves them out). A word whose
consonant doubled before its ending ("skipped") also stands for its root ("skip",
`undoubled`), which the stemmer does not reach.

Beside the model's words, the trade's (store/idioms.py): a check that "went red" printed
FAILED, a "machine" is an instance; they join each word's line at a middling cosine.

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

from store.idioms import WEIGHT as IDIOM_WEIGHT
from store.idioms import idioms as shop_talk
from store.terms import STOP, stem

TABLE = Path(__file__).with_name("related.tsv.gz")
FLOOR = 0.35  # lowest cosine kept in the table (recall.related_words can only raise it)
READ_MAX = 4096  # words whose lines are kept read (`RelatedWords.of`)
PER_WORD = 8
BLOCK = 2048  # rows of the similarity matrix computed at once (~170 MB of float32)
UNDOUBLED = 0.9  # "skipped" -> skip: the same word, its consonant doubled (`undoubled`)
_KEPT_DOUBLE = frozenset("aeiouylsfz")  # "passed", "called", "staffed" double them anyway


def undoubled(word: str) -> str | None:
    """The word before its consonant was doubled for -ed, -ing or -er ("skipped",
    "stopping", "planner": skip, stop, plan), where the stemmer stops at `skipp` and a
    tool prints `SKIP=9`; None for any other word. For a question's words only: changing
    the stemmer itself moved every index's ranks and cost the fourth set two facts
    (docs/design-notes.md)."""
    base = stem(word)
    if (base != word and word.endswith(("ed", "ing", "er", "ers", "ings")) and len(base) >= 4
            and base[-1] == base[-2] and base[-1] not in _KEPT_DOUBLE):
        return base[:-1]
    return None


# Opposites the model's distributional neighbours include (`high` -> `low` 0.58, `fail`
# -> `succeed` 0.42, `open` -> `closed` 0.51): a question's word never stands for its
# opposite. Each pair's words in their inflected forms (`_forms`), and a word against its
# negation by prefix (`successful` / `unsuccessful`). A black-box run's question "how
# high can their damages exposure go?" matched a table of risk ratings on its `high`
# cells and, through this table, its `low` ones.
_OPPOSITES = """
high-low warm-cold hot-cold late-early ceiling-floor approve-reject accept-reject
approve-disapprove big-small large-small huge-tiny increase-decrease rise-fall
raise-lower open-close open-closed start-end start-finish start-stop begin-end first-last
max-min maximum-minimum max-minimum min-maximum maximize-minimize before-after
success-failure succeed-fail successful-failed pass-fail enable-disable old-new old-young
slow-fast slow-quick
long-short true-false add-remove install-remove install-uninstall good-bad better-worse
best-worst win-lose gain-lose gain-loss profit-loss buy-sell upper-lower top-bottom
internal-external inner-outer left-right right-wrong correct-wrong correct-incorrect
input-output inbound-outbound allow-deny allow-prevent allow-restrict allow-forbid
private-public debit-credit cheap-expensive above-below over-under more-less more-fewer
most-least include-exclude import-export upload-download push-pull send-receive
in-out on-off up-down yes-no online-offline present-absent valid-invalid
available-unavailable visible-hidden plus-minus positive-negative ascending-descending
north-south east-west day-night summer-winter lock-unlock connect-disconnect
mount-unmount encrypt-decrypt enter-exit arrive-depart arrival-departure hire-fire
borrow-lend income-expense
"""
_NEGATIONS = ("un", "dis", "in", "im", "ir", "il", "non")


def _forms(base: str) -> set[str]:
    """`base` and its regular inflections (plural, past, -ing, comparative, superlative;
    a doubled last consonant, a `y` that becomes `i`, a silent `e` dropped)."""
    out = {base, base + "s", base + "es", base + "ed", base + "d", base + "ing", base + "er",
           base + "est", base + "r", base + "st", base + "ly"}
    if len(base) > 2 and base[-1] not in "aeiouwy" and base[-2] in "aeiou" and (
            base[-3] not in "aeiou"):
        out |= {base + base[-1] + suf for suf in ("er", "est", "ed", "ing")}
    if base.endswith("y"):
        out |= {base[:-1] + suf for suf in ("ier", "iest", "ied", "ies")}
    if base.endswith("e"):
        out.add(base[:-1] + "ing")
    return out


def _opposites() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for pair in _OPPOSITES.split():
        a, b = pair.split("-")
        for x, y in ((a, b), (b, a)):
            for f in _forms(x):
                out.setdefault(f, set()).update(_forms(y))
    return out


_BY_FORM = _opposites()


def opposite(a: str, b: str) -> bool:
    """`a` and `b` mean the opposite: a listed pair in any of their forms, or one is the
    other, or a word of its family, negated by a prefix (`success` / `unsuccessful`,
    `approve` / `disapproval`)."""
    if b in _BY_FORM.get(a, ()):
        return True
    for x, y in ((a, b), (b, a)):
        for p in _NEGATIONS:
            if y.startswith(p) and _family(x, y[len(p):]):
                return True
    return False


def _family(a: str, b: str) -> bool:
    """One word of the other's family: they agree but for their last two letters at
    most, on four letters or more (`approve` / `approval`, `success` / `successful`)."""
    n = min(len(a), len(b))
    k = 0
    while k < n and a[k] == b[k]:
        k += 1
    return k >= 4 and k >= n - 2


class RelatedWords:
    """word -> its related words with their cosines, best first. Each word's line is kept
    as the table has it ("large:59 huge:68") and read when first asked (its opposites left
    out: ~7 µs a word), then kept read: 19,000 strings take ~3 MB, where 100,000 (word,
    cosine) pairs took 18."""

    def __init__(self, table: dict[str, str],
                 idioms: dict[str, tuple[str, ...]] | None = None) -> None:
        self.table = table
        # the trade's own words, beside the model's (store/idioms.py)
        self.idioms = shop_talk() if idioms is None else idioms
        self._read: dict[str, list[tuple[str, float]]] = {}

    def __len__(self) -> int:
        return len(self.table)

    def of(self, word: str, min_similarity: float = FLOOR) -> list[tuple[str, float]]:
        word = word.lower()
        near = self._read.get(word)
        if near is None:
            line = self.table.get(word)
            said = self.idioms.get(word, ())
            single = undoubled(word)
            if not line and not said and not single:
                return []
            best = {w: IDIOM_WEIGHT for w in said if w != word}
            if single:
                best[single] = UNDOUBLED
            for item in line.split(" ") if line else ():
                w, _, c = item.rpartition(":")
                if not opposite(word, w):
                    best[w] = max(best.get(w, 0.0), int(c) / 100)
            near = sorted(best.items(), key=lambda x: -x[1])
            if len(self._read) >= READ_MAX:
                self._read.clear()
            self._read[word] = near
        return [(w, c) for w, c in near if c >= min_similarity]

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
