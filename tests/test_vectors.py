"""Vectors beside the lexical index: picked up from the embedder's cache, never waited on;
a passage embedded as its lines, its cosine its best line's."""

from __future__ import annotations

import numpy as np
import pytest

from store.embed import key_of
from store.relevance import RelevanceIndex
from store.vectors import UNIT_CHARS, Vectors, units


class CacheFake:
    """The embedder's cache as the request path sees it: `finish` a text, and `history`
    records every key looked up."""

    def __init__(self) -> None:
        self.done: dict[bytes, np.ndarray] = {}
        self.history: list[bytes] = []

    def finish(self, text: str, vector: list[float]) -> None:
        v = np.asarray(vector, dtype=np.float32)
        self.done[key_of(text)] = v / np.linalg.norm(v)

    def cached_key(self, key: bytes) -> np.ndarray | None:
        self.history.append(key)
        return self.done.get(key)


def fresh(n: int, line: str = "passage {i} about release v2.{i}"
          ) -> tuple[Vectors, list[str], CacheFake]:
    """`n` passages just handed over (none looked up yet), their texts, an empty cache."""
    index = RelevanceIndex()
    for i in range(n):
        index.add(f"c{i}", line.format(i=i))
    vectors = Vectors(index)
    return vectors, vectors.new_texts(), CacheFake()


def test_a_lagging_embedder_leaves_passages_pending_and_resolves_them_later() -> None:
    index = RelevanceIndex()
    index.add("a", "the staging database lives on pg-stg-5171")
    index.add("b", "unit tests passed in 4.2 seconds")
    vectors = Vectors(index)
    texts = vectors.new_texts()
    assert texts == ["the staging database lives on pg-stg-5171",
                     "unit tests passed in 4.2 seconds"]
    cache = CacheFake()
    assert vectors.resolve(cache.cached_key) == 0  # nothing embedded yet: no cosine
    assert vectors.cosines(np.array([1.0, 0.0], dtype=np.float32)) == []
    cache.finish(texts[1], [0.0, 1.0])
    assert vectors.resolve(cache.cached_key) == 1
    assert [n for n, _ in vectors.pending] == [0]
    cache.finish(texts[0], [1.0, 0.0])
    assert vectors.resolve(cache.cached_key) == 1
    assert vectors.pending == []
    sims = dict(vectors.cosines(np.array([1.0, 0.0], dtype=np.float32)))
    assert sims == {0: 1.0, 1: 0.0}
    # looked up by the key hashed once in new_texts, the same key on every turn
    k0, k1 = key_of(texts[0]), key_of(texts[1])
    assert cache.history == [k0, k1, k0, k1, k0]


def test_a_passage_is_hashed_once_and_only_when_its_turn_to_be_looked_up_comes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import store.vectors

    hashed: list[str] = []

    def counting_key_of(text: str) -> bytes:
        hashed.append(text)
        return key_of(text)

    monkeypatch.setattr(store.vectors, "key_of", counting_key_of)
    index = RelevanceIndex()
    for i in range(300):  # a cold history's worth
        index.add(f"c{i}", f"passage {i} of a long history, id-{i:04d}")
    vectors = Vectors(index)
    vectors.new_texts()
    assert hashed == []  # nothing hashed on the request that brought them
    cache = CacheFake()
    vectors.resolve(cache.cached_key, limit=128, split=32)
    assert len(hashed) == 32  # at most 32 split and hashed a turn
    for _ in range(12):  # the next ones, then the first ones again
        vectors.resolve(cache.cached_key, limit=128, split=32)
    assert len(hashed) == 300 and len(set(hashed)) == 300  # each once, never again


def test_resolve_looks_up_at_most_limit_passages_a_turn() -> None:
    vectors, _, cache = fresh(5)
    assert vectors.resolve(cache.cached_key, limit=2) == 0
    assert len(cache.history) == 2
    # the two looked up go behind the rest: the next turn looks at the next two
    assert [n for n, _ in vectors.pending] == [2, 3, 4, 0, 1]


def test_passages_that_never_resolve_do_not_hide_the_ones_behind_them() -> None:
    """The feeder drops the oldest passages past its bound (and a failed batch is given
    up): those never get a vector. Looking only at the oldest `limit` each turn, they
    stood in front of every passage behind them for good, embedded or not."""
    vectors, texts, cache = fresh(300, "passage {i} of a long history, id-{i:04d}")
    for t in texts[128:]:  # the first 128 were dropped; the rest were embedded
        cache.finish(t, [1.0, 0.0])
    got = sum(vectors.resolve(cache.cached_key, limit=128, split=128) for _ in range(3))
    assert got == 172
    assert sorted(n for n, _ in vectors.pending) == list(range(128))


def test_a_passage_is_embedded_as_its_lines_and_scores_as_its_best_line() -> None:
    """A fact is one line among others: a passage's vector blurs it, its line's does not."""
    lines = ["2025-03-07T20:32:55Z INFO  [inventory-worker-4] expire audit took=3066ms",
             "INFO:     Uvicorn running on http://0.0.0.0:26692 (Press CTRL+C to quit)",
             "2025-03-01T23:52:19Z WARN  [profile-worker-8] validate consent id=20711"]
    index = RelevanceIndex()
    index.add("log", "\n".join(lines))
    index.add("other", "nothing here")
    vectors = Vectors(index)
    texts = vectors.new_texts()
    assert texts == ["\n".join(lines), "nothing here"]  # passages: split off the path
    cache = CacheFake()
    cut = [u for t in texts for u in units(t)]
    assert cut == [*lines, "nothing here"]
    cache.finish(cut[0], [0.0, 1.0])
    assert vectors.resolve(cache.cached_key) == 0  # a passage waits for all its lines
    for t, v in zip(cut[1:], ([1.0, 0.1], [0.1, 1.0], [0.6, 0.8]), strict=True):
        cache.finish(t, v)
    assert vectors.resolve(cache.cached_key) == 2 and vectors.count == 4
    sims = dict(vectors.cosines(np.array([1.0, 0.0], dtype=np.float32)))
    assert sims.keys() == {0, 1}
    assert sims[0] == pytest.approx(1.0 / np.hypot(1.0, 0.1))  # the port's line, not a mean
    assert sims[1] == pytest.approx(0.6)


def test_units_are_lines_short_ones_joined_and_a_long_line_cut_at_a_sentence_end() -> None:
    page = ("The survey was fielded online among 6,098 adults in fourteen countries. "
            + "Critics argue the figures overstate the trend. " * 6)
    record = '{\n  "ticket": "CS-524618",\n  "status": "escalated to tier 2",\n  "n": 3\n}'
    cut = units(record + "\n\n" + page, UNIT_CHARS)
    assert cut[0] == '{ "ticket": "CS-524618", "status": "escalated to tier 2",'  # >= 40
    assert cut[1].startswith('"n": 3 } The survey was fielded')
    assert all(len(u) <= UNIT_CHARS for u in cut)
    assert " ".join(cut) == " ".join(ln.strip() for ln in (record + "\n" + page).splitlines()
                                     ).strip()
    assert units("x" * 450) == ["x" * 200, "x" * 200, "x" * 50]  # no sentence end: at size
    long_lines = ["a" * 50, "b" * 60]
    assert units("\n".join(long_lines)) == long_lines  # lines of 40+ stand alone


def test_cosines_stay_each_passages_best_unit_as_the_buffer_grows() -> None:
    """Rows go into a buffer that grows by doubling, a passage's units side by side, and
    passages resolve out of order (an older one waits while newer ones are ready): every
    passage still gets its own best unit's cosine, listed in passage order."""
    rng = np.random.default_rng(7)
    index = RelevanceIndex()
    for i in range(120):  # 1-5 lines each: ~360 units, past the first 256 rows
        index.add(f"c{i}", "\n".join(f"passage {i} line {j} " + "x" * 40
                                     for j in range(1 + i % 5)))
    vectors = Vectors(index)
    texts = vectors.new_texts()
    cache = CacheFake()
    want: dict[int, list[np.ndarray]] = {}
    for n in [*range(60, 120), *range(60)]:  # the newer half is embedded first
        for u in units(texts[n]):
            cache.finish(u, list(rng.standard_normal(8)))
            want.setdefault(n, []).append(cache.done[key_of(u)])
        vectors.resolve(cache.cached_key, limit=200)
    assert vectors.pending == [] and vectors.count == sum(map(len, want.values())) > 256
    q = rng.standard_normal(8).astype(np.float32)
    got = vectors.cosines(q)
    assert [n for n, _ in got] == list(range(120))
    for n, c in got:
        assert c == pytest.approx(max(float(v @ q) for v in want[n]), abs=1e-6)


def test_a_lost_passage_is_handed_over_again_once() -> None:
    """`lost`: what the last resolve missed, for a feeder that is idle (so it will never
    come); each passage once, so an embedder that fails the same batch is not fed it
    forever, and one missed after that is no longer pending."""
    vectors, texts, cache = fresh(3)
    cache.finish(texts[1], [1.0, 0.0])
    assert vectors.resolve(cache.cached_key) == 1
    assert vectors.lost() == [texts[0], texts[2]]
    cache.finish(texts[2], [0.0, 1.0])  # the second time, one of them made it
    assert vectors.resolve(cache.cached_key) == 1 and vectors.missed == [0]
    assert vectors.lost() == []  # missed again, handed over once already: given up
    assert vectors.pending == []  # so a question may wait for its vector again


def test_nothing_is_looked_up_again_until_the_embedder_has_made_a_vector() -> None:
    """Back to back the embedder lags: most turns nothing new has been embedded, and
    looking the same passages up again could find nothing."""
    vectors, texts, cache = fresh(3)
    assert vectors.resolve(cache.cached_key, version=0) == 0
    looked = len(cache.history)
    assert looked == 3
    assert vectors.resolve(cache.cached_key, version=0) == 0
    assert len(cache.history) == looked  # the same count: not one lookup
    cache.finish(texts[0], [1.0, 0.0])
    assert vectors.resolve(cache.cached_key, version=1) == 1  # it made one: look again
    assert len(cache.history) == looked + 3
