"""Relate: how much every chunk of a session — in context or evicted — bears on this step.

Lexical first, always, in about a millisecond (store/relevance.py). Vectors refine where
they are ready: every new passage is handed to the embedder as background work (it runs
in its own process, store/embedproc.py), the step's words are asked for urgently, and the
request waits for that at most `recall.vector_wait_ms`; a passage whose rows have not
landed yet has no cosine this turn. A question waits for its own vector up
to `recall.question_vector_wait_ms`, and only when the session's passages are embedded
(at most `CAUGHT_UP` passages waiting: a paced loop), the embedder answers now and its
words do not clearly match one or two evicted chunks (`_clear`); back to back the
embedder lags and no question waits. Nothing else blocks on a model. The feeder
lands each batch's rows in the passages' own session (store/vectors.py): the request path
looks nothing up in the embedder's cache. What the agent said right after reading tool
outputs counts for those outputs in RWOE's similarity (`_read_from`), and the step's own
chunks count 1.0 there: the proposal a reply answers is what the turn is about.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from proxy.analysis import text_of
from proxy.chunking import Conversation
from proxy.feeder import Feeder
from proxy.recall import ChunkMeta
from proxy.step import QUERY_CHARS, Related, Step, asking, current_step, related_of, search
from store.quiet import QUIET
from store.related import RelatedWords, related_words
from store.relevance import Hit, RelevanceIndex
from store.vectors import Vectors

log = structlog.get_logger("ctxwarden")
CALL_CHARS = 300  # of a call's arguments, as context for its output's passages
DRAIN_SLICE = 8  # waiting passages indexed per slice (~0.35 ms); requests run in between
DRAIN_DELAY = 0.01  # s: the request that brought them is forwarded first
EXAMINE_SLICE = 2  # chunks examined for notable rows per slice (~0.2 ms each, 3 ms at most)
EXAMINE_REST_S = 0.02  # ... once no request has been prepared for this long
CAUGHT_UP = 16  # passages still to embed, at most, for a question's wait to pay off
CLEAR_CHUNKS = 2  # evicted chunks matched strongly, at most, for a match to be clear
READ_FROM = 0.8  # of a summary's similarity, to the outputs it summed up


@dataclass(slots=True)
class Relevance:
    step: Step
    hits: list[Hit]
    similarity: dict[str, float]  # chunk id -> [0, 1], RWOE's cos term
    query_vector: asyncio.Task[Any] | None = None
    vectors: list[tuple[Hit, float]] = field(default_factory=list)
    related: Related = field(default_factory=dict)  # a question's related words


class Relater:
    def __init__(self, embedder: Any | None, related: RelatedWords | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.embedder = embedder  # a store.embed.CachedEmbedder, or None (lexical only)
        # a question's words also match their related words (store/related.py)
        self.related = related_words() if related is None else related
        # new passages to the embedder, the sessions in turn (proxy/feeder.py)
        self.feeder = None if embedder is None else Feeder(embedder, clock)
        # indexes with passages waiting, in turn order (id -> index), and the one task
        # that drains them a slice each in turn: a task per history ran a slice of every
        # waiting history in each turn of the event loop, and after eight cold histories
        # back to back a request waited 20-38 ms for the loop to read it
        self._drains: dict[int, RelevanceIndex] = {}
        self._drainer: asyncio.Task[None] | None = None

    def prefetch(self, vectors: Vectors | None, messages: list[dict[str, Any]],
                 question_wait_ms: int) -> str | None:
        """A question's vector, asked for as soon as its body is parsed: the request it
        comes in would wait for it (`relate`) after its analysis, chunking and fit; asked
        now, the model works meanwhile. Only where `relate` would wait for it (the
        session's passages embedded, the embedder idle); the question's words if asked."""
        if (self.embedder is None or vectors is None or question_wait_ms <= 0
                or not messages or messages[-1].get("role") != "user"
                or vectors.waiting > CAUGHT_UP):
            return None
        words = text_of(messages[-1])[-QUERY_CHARS:]
        if (not words or not asking(words) or self.embedder.cached(words) is not None
                or not self.embedder.answers_now()):
            return None
        return words if self.embedder.embed_nowait([words]) else None

    def relate(self, index: RelevanceIndex, vectors: Vectors | None,
               meta: dict[str, ChunkMeta], conv: Conversation, wait_ms: int,
               min_similarity: float = 0.5, related_similarity: float = 1.0,
               question_wait_ms: int = 0, asked: str | None = None,
               clear: float = 1.0, evicted: frozenset[str] | set[str] = frozenset(),
               ) -> Relevance:
        """`asked`: the question whose vector `prefetch` asked for (it is in flight).
        `clear`: the lexical strength at which a match is clear (`recall.min_relevance`):
        a question with one in what the session has `evicted` does not wait for its own
        vector."""
        step = current_step(conv)
        related = related_of(step, self.related, related_similarity)
        if step.reply or related:  # terms it will not settle: they must not count among
            index.catch_up()  # what the background reached (Postings.catch_up)
        for p in conv.parts:
            index.add(p.chunk.id, p.info.text)
            if p.tool_name and not index.annotated(p.chunk.id):  # about what its call asked
                index.annotate(p.chunk.id, f"{p.tool_name} {p.tool_args[:CALL_CHARS]} "
                                           f"{p.said[:CALL_CHARS]}")
            m = meta.get(p.chunk.id)
            if m is None or m.klass != p.chunk.klass.value:  # the tail is PERMANENT only now
                meta[p.chunk.id] = ChunkMeta(p.chunk.turn, p.role, p.chunk.klass.value)
        index.mark()
        hits = search(index, step, related)
        similarity = index.chunk_scores(hits)
        for cid in step.source:  # the step itself: the proposal a reply answers
            similarity[cid] = 1.0
        rel = Relevance(step, hits, _read_from(conv, similarity), related=related)
        if index.waiting or index.unexamined:
            self._drain_later(index)
        if self.embedder is None or vectors is None:
            return rel
        self.feed(vectors)
        if step.words:
            qv = self.embedder.cached(step.words)
            if (step.asks and vectors.waiting <= CAUGHT_UP  # the passages have vectors
                    and not _clear(hits, evicted, clear)):
                wait_ms = max(wait_ms, question_wait_ms)
            if qv is not None:
                rel.vectors = _matches(index, vectors, qv, step)
                _blend(rel.similarity, rel.vectors, min_similarity)
            elif wait_ms > 0 and (asked == step.words or self.embedder.answers_now()):
                rel.query_vector = asyncio.ensure_future(
                    self.embedder.embed_within([step.words], wait_ms / 1000))
            else:  # loading or busy: no wait can pay off; it lands for a later turn
                self.embedder.embed_nowait([step.words], urgent=False)
        return rel

    async def finish(self, rel: Relevance, index: RelevanceIndex,
                     vectors: Vectors | None) -> None:
        """The step's vector, if it arrived within its wait: cosines for recall."""
        task, rel.query_vector = rel.query_vector, None
        if task is None or vectors is None:
            return
        try:
            got = await task
        except Exception as exc:  # the embedder is a refinement: never a failed request
            log.warning("query_vector_failed", error=type(exc).__name__)
            return
        if got is not None:
            rel.vectors = _matches(index, vectors, got[0], rel.step)

    def _drain_later(self, index: RelevanceIndex) -> None:
        """A cold history's passages wait unindexed (each query indexed what it could
        match); index the rest in the background, a slice at a time."""
        self._drains.setdefault(id(index), index)
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.get_running_loop().create_task(self._drain(),
                                                                   name="index")

    async def _drain(self) -> None:
        await asyncio.sleep(DRAIN_DELAY)
        while self._drains:
            key, index = next(iter(self._drains.items()))
            del self._drains[key]
            if index.waiting:
                await QUIET.wait()  # it holds the GIL: never while a request is prepared
                index.index_some(DRAIN_SLICE)
            else:  # its tables' notable rows (store/notable.py), in a rest only: back to
                # back, a question that names one examines what is left itself
                await QUIET.wait(EXAMINE_REST_S)
                index.examine(EXAMINE_SLICE)
            if index.waiting or index.unexamined:  # its turn again after the others'
                self._drains[key] = index
            await asyncio.sleep(0)

    def feed(self, vectors: Vectors) -> None:
        """Hand the passages `vectors`' index gained to the embedder (proxy/feeder.py)."""
        if self.feeder is not None:
            self.feeder.feed(vectors)

    @property
    def backlog(self) -> int:
        """Passages handed over whose vectors are not computed yet (`/admin/store`'s
        `vectors_pending`, `/metrics`' `ctxwarden_vectors_pending`)."""
        return 0 if self.feeder is None else self.feeder.backlog

    async def flush(self, timeout: float = 300.0) -> None:
        """Until every passage handed over is embedded (tests and benchmarks: a paced
        agent loop gives the embedder this time between turns)."""
        if self.feeder is not None:
            await self.feeder.flush(timeout)

    async def close(self) -> None:
        if self.feeder is not None:
            await self.feeder.close()
        task, self._drainer = self._drainer, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _read_from(conv: Conversation, similarity: dict[str, float]) -> dict[str, float]:
    """What the agent said of outputs it had just read bears on those outputs as much
    (`READ_FROM` of it): "one crashed partway through" is about the listing whose row
    reads `crashed`. For RWOE's similarity, not recall: a passage is recalled by its
    own words."""
    parts = conv.parts
    for i in range(1, len(parts)):
        p = parts[i]
        s = similarity.get(p.chunk.id)
        if s and p.role == "assistant" and p.group is None and parts[i - 1].role == "tool":
            j = i - 1
            while j >= 0 and parts[j].role == "tool":
                cid = parts[j].chunk.id
                similarity[cid] = max(similarity.get(cid, 0.0), READ_FROM * s)
                j -= 1
    return similarity


def _clear(hits: list[Hit], evicted: frozenset[str] | set[str], floor: float) -> bool:
    """Lexical matching found what the question asks, in its own words: evicted passages
    as strong as recall wants (`floor`), in at most `CLEAR_CHUNKS` chunks, so its vector
    would add little. A match in context does not count: recall brings back evicted
    passages only, and an earlier question in the same words is no answer. Counting
    matches in context too, on 54 paced fact questions (seed 0, three session sets), the
    two that only the vector found had none above 0.20 and ~70 % of the waits were
    skipped; counting only evicted ones two generated questions more were kept, with
    every passage embedded first. Strong matches spread over more chunks are words many
    records share ("the gap between US10 and MX50": both codes in every row of that
    pair, at 1.0), and the vector tells which record is meant (docs/design-notes.md)."""
    strong = {h.chunk_id for h in hits if h.strength >= floor and h.chunk_id in evicted}
    return 0 < len(strong) <= CLEAR_CHUNKS


def _matches(index: RelevanceIndex, vectors: Vectors, qv: Any,
             step: Step) -> list[tuple[Hit, float]]:
    out = []
    for n, c in vectors.cosines(qv):
        h = index.hit(n)
        if h.chunk_id not in step.source:
            out.append((h, c))
    return out


def _blend(similarity: dict[str, float], cosines: list[tuple[Hit, float]],
           floor: float) -> None:
    """RWOE's sim: the better of the lexical share and the cosine, per chunk, counting a
    cosine only past `floor` (below it MiniLM does not tell a match from noise)."""
    for h, c in cosines:
        if c >= floor and c > similarity.get(h.chunk_id, 0.0):
            similarity[h.chunk_id] = min(1.0, c)
