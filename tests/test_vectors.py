"""Vectors beside the lexical index: each passage handed to the embedder once, its rows
landing in its own session as the batch comes back, never waited on; a passage embedded
as its lines, its cosine its best line's."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from typing import Any

import numpy as np
import pytest
from structlog.testing import capture_logs

import proxy.feeder
from proxy.relate import Relater
from store.relevance import RelevanceIndex
from store.vectors import UNIT_CHARS, Vectors, units
from tests.support.fakes import TopicEmbedder


def unit(v: list[float]) -> np.ndarray:
    a = np.asarray(v, dtype=np.float32)
    return a / np.linalg.norm(a)


def session(n: int, line: str = "passage {i} about release v2.{i}") -> Vectors:
    index = RelevanceIndex()
    for i in range(n):
        index.add(f"c{i}", line.format(i=i))
    return Vectors(index)


def test_each_passage_is_handed_over_once_and_waits_until_it_lands() -> None:
    vectors = session(2)
    assert vectors.new_passages() == [(0, "passage 0 about release v2.0"),
                                      (1, "passage 1 about release v2.1")]
    assert vectors.new_passages() == []  # handed over once
    assert vectors.waiting == 2 and vectors.cosines(unit([1.0, 0.0])) == []
    vectors.land(1, np.stack([unit([0.0, 1.0])]))
    assert vectors.waiting == 1
    assert vectors.cosines(unit([1.0, 0.0])) == [(1, 0.0)]
    vectors.give_up()  # the other will not come: it goes without a cosine
    assert vectors.waiting == 0
    vectors.index.add("c2", "a third passage")
    assert vectors.new_passages() == [(2, "a third passage")] and vectors.waiting == 1


def test_a_passage_is_embedded_as_its_lines_and_scores_as_its_best_line() -> None:
    """A fact is one line among others: a passage's vector blurs it, its line's does not."""
    lines = ["2025-03-07T20:32:55Z INFO  [inventory-worker-4] expire audit took=3066ms",
             "INFO:     Uvicorn running on http://0.0.0.0:26692 (Press CTRL+C to quit)",
             "2025-03-01T23:52:19Z WARN  [profile-worker-8] validate consent id=20711"]
    index = RelevanceIndex()
    index.add("log", "\n".join(lines))
    index.add("other", "nothing here")
    vectors = Vectors(index)
    handed = vectors.new_passages()
    assert [t for _, t in handed] == ["\n".join(lines), "nothing here"]
    assert [units(t) for _, t in handed] == [lines, ["nothing here"]]
    vectors.land(0, np.stack([unit(v) for v in ([0.0, 1.0], [1.0, 0.1], [0.1, 1.0])]))
    vectors.land(1, np.stack([unit([0.6, 0.8])]))
    assert vectors.count == 4
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
    passages land out of order (batches come back as they come): every passage still
    gets its own best unit's cosine, listed in passage order."""
    rng = np.random.default_rng(7)
    index = RelevanceIndex()
    for i in range(120):  # 1-5 lines each: ~360 units, past the first 256 rows
        index.add(f"c{i}", "\n".join(f"passage {i} line {j} " + "x" * 40
                                     for j in range(1 + i % 5)))
    vectors = Vectors(index)
    texts = dict(vectors.new_passages())
    want: dict[int, np.ndarray] = {}
    for n in [*range(60, 120), *range(60)]:  # the newer half lands first
        want[n] = np.stack([unit(list(rng.standard_normal(8))) for _ in units(texts[n])])
        vectors.land(n, want[n])
    assert vectors.waiting == 0 and vectors.count == sum(map(len, want.values())) > 256
    q = rng.standard_normal(8).astype(np.float32)
    got = vectors.cosines(q)
    assert [n for n, _ in got] == list(range(120))
    for n, c in got:
        assert c == pytest.approx(max(float(v @ q) for v in want[n]), abs=1e-6)


async def test_rows_land_in_their_session_whatever_the_embedders_cache_keeps() -> None:
    """The embedder's cache is an LRU shared by every session. When the request path
    looked vectors up there, one session's passages pushed another's out before it
    looked, and those never got a cosine; rows now go straight to the passage's session."""
    embedder = TopicEmbedder({"release": ["release"]}, cache_size=2)
    relater = Relater(embedder)
    first, second = session(30), session(30, "another session's line {i}")
    relater.feed(first)
    relater.feed(second)
    await relater.flush()
    assert first.waiting == second.waiting == 0
    assert first.count == second.count == 30
    assert [n for n, c in first.cosines(unit([1.0, 0.0])) if c > 0.9] == list(range(30))


class Stalled(TopicEmbedder):
    def _start(self, texts: list[str], urgent: bool) -> Any:
        return Future()  # never done


async def test_past_its_bound_the_feeder_drops_the_oldest_passages(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proxy.feeder, "FEED_MAX", 4)
    relater = Relater(Stalled({"x": ["x"]}))
    vectors = session(10)
    relater.feed(vectors)
    assert vectors.waiting == 4 and relater.backlog == 4  # six went without a vector
    await relater.close()


async def test_one_sessions_burst_does_not_hold_back_another_sessions_passages() -> None:
    """A history sent whole hands over hundreds of passages at once; a paced session's
    next tool output is embedded after one batch of them, not after all (the sessions
    take turns, a batch each), so its question can still find it by vector."""
    embedder = TopicEmbedder({"x": ["x"]})  # its `calls`: each batch, in order
    relater = Relater(embedder)
    burst, paced = session(200, "history line {i}"), session(3, "new tool output {i}")
    relater.feed(burst)
    relater.feed(paced)
    await asyncio.wait_for(relater.flush(), 10)
    first = next(i for i, batch in enumerate(embedder.calls)
                 if any("new tool output" in t for t in batch))
    assert first == 1  # after one batch of the burst
    assert burst.waiting == paced.waiting == 0 and burst.count == 200


async def test_a_session_gone_quiet_waits_behind_the_live_ones() -> None:
    """A finished loop (or one that stopped) can leave hundreds of passages waiting; a live
    loop's new ones go first, all of them, or its questions would find nothing by vector
    while the embedder works through a backlog nobody may ask about again. A request makes
    a quiet session live again."""
    now = [1000.0]
    embedder = TopicEmbedder({"x": ["x"]})
    relater = Relater(embedder, clock=lambda: now[0])
    quiet, live = session(100, "finished loop's line {i}"), session(40, "live output {i}")
    relater.feed(quiet)
    now[0] += proxy.feeder.IDLE_S + 1
    relater.feed(live)
    await asyncio.wait_for(relater.flush(), 10)
    whose = ["live" if any("live output" in t for t in batch) else "quiet"
             for batch in embedder.calls]
    assert whose == ["live"] * 3 + ["quiet"] * 7  # batches of FEED_BATCH = 16 units
    assert quiet.count == 100 and live.count == 40

    embedder.calls.clear()  # new texts: the embedder's cache has the first ones
    quiet, live = session(40, "stopped loop's line {i}"), session(40, "live output 2.{i}")
    relater.feed(quiet)
    now[0] += proxy.feeder.IDLE_S + 1
    relater.feed(live)
    relater.feed(quiet)  # its next request (nothing new in it): live again, first in turn
    await asyncio.wait_for(relater.flush(), 10)
    assert [any("live output" in t for t in b) for b in embedder.calls] == [False, True] * 3


async def test_past_its_bound_the_longest_queue_loses_its_oldest(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proxy.feeder, "FEED_MAX", 4)
    relater = Relater(Stalled({"x": ["x"]}))
    other, burst = session(2, "another session's line {i}"), session(10)
    relater.feed(other)  # first in, but not the one that overflowed the bound
    relater.feed(burst)
    assert (burst.waiting, other.waiting, relater.backlog) == (2, 2, 4)
    await relater.close()


async def test_past_its_bound_a_quiet_sessions_queue_loses_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A live session's passages are kept over a quiet one's, though the quiet queue is
    not the longest."""
    monkeypatch.setattr(proxy.feeder, "FEED_MAX", 4)
    now = [1000.0]
    relater = Relater(Stalled({"x": ["x"]}), clock=lambda: now[0])
    quiet, live = session(3, "stopped loop's line {i}"), session(4)
    relater.feed(quiet)
    now[0] += proxy.feeder.IDLE_S + 1
    relater.feed(live)
    assert (live.waiting, quiet.waiting, relater.backlog) == (4, 0, 4)
    await relater.close()


async def test_a_failed_batch_is_given_up_and_logged() -> None:
    class Failing(TopicEmbedder):
        def _start(self, texts: list[str], urgent: bool) -> Any:
            done: Future[Any] = Future()
            done.set_exception(RuntimeError("model crashed"))
            return done

    relater = Relater(Failing({"x": ["x"]}))
    vectors = session(3)
    with capture_logs() as logs:
        relater.feed(vectors)
        await asyncio.wait_for(relater.flush(), 10)
    assert vectors.waiting == 0 and vectors.count == 0
    assert [e["error"] for e in logs if e["event"] == "passage_embedding_failed"] == [
        "RuntimeError"]
