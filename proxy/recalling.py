"""Recall on the request path: which evicted passages of the session go back in this
turn, on which message, and which earlier blocks stay where they were (the parts, from
matching to rendering, are in proxy/step.py, proxy/recall.py and proxy/excerpt.py).

Only when the step clearly matches something evicted (`select`); a block goes on the
latest user message or tool result (`host_of`), near the tail; and a block from an
earlier turn stays on its message, byte for byte, while nothing else changes (`carried`),
so the provider's prefix cache keeps hitting.
"""

from __future__ import annotations

import asyncio

import structlog

from policies import PolicyContext
from proxy.answers import (
    asks_own_words,
    asks_quantity,
    asks_when,
    dated_passages,
    echoed_passages,
    stated_passages,
    users_passages,
)
from proxy.chunking import Conversation
from proxy.firsts import asks_first, first_passages
from proxy.fitting import Fit
from proxy.recall import Block, Recalled, RecallResult, host_of, make_block, select
from proxy.relate import Relevance
from proxy.results import matched_calls, results_of, with_results
from proxy.runtime import RouteRuntime
from proxy.session import SessionState
from proxy.step import questions
from store.base import RecallQuery, Store
from store.relevance import Hit
from store.terms import terms

log = structlog.get_logger("ctxwarden")


def within_session(rt: RouteRuntime, conv: Conversation, fit: Fit, rel: Relevance,
                   state: SessionState, room: int, target: int, ctx: PolicyContext,
                   kept: list[Block], asked_now: bool) -> tuple[Fit, RecallResult]:
    """Choose passages of evicted chunks not already in a kept block. When they do not
    fit the room left, fit again leaving room for them if the user asks now or this
    turn evicts anyway; otherwise (and after a cut) they take the free room, weakest
    dropped first."""
    settings = rt.route.recall
    query = rel.step.text
    result = RecallResult(blocks=kept, tokens=sum(b.tokens for b in kept), query=query)
    # what this request evicts of what the client sends: a message the client removed or
    # rewrote (a redaction, another branch of the same opening) is stored, never re-sent
    recallable = {p.chunk.id for p in conv.parts if p.chunk.id in fit.evicted}
    if not settings.enabled or not (rel.hits or rel.vectors) or not recallable:
        return fit, result
    shown = set().union(*(b.keys for b in kept))
    count = rt.counter.text
    out = sum(p.chunk.tokens for p in conv.parts if p.chunk.id in recallable)
    cap = settings.budget(room, rel.step.asks, out) - rt.block_overhead - result.tokens
    if asked_now and rel.step.asks:  # and what the request leaves free: nothing evicted
        cap = max(cap, room - fit.tokens - result.tokens - rt.block_overhead)
    stated: frozenset[tuple[str, int]] = frozenset()
    if rel.step.asks and asks_quantity(rel.step.words):  # proxy/answers.py
        words = set(terms(rel.step.words)).union(*(terms(w) for w in rel.related))
        stated = stated_passages(state.index, rel.hits, words)
    if rel.step.asks and asks_when(rel.step.words):  # a date written out near its words
        words = set(terms(rel.step.words)).union(*(terms(w) for w in rel.related))
        stated |= dated_passages(rel.hits, words)
    if rel.step.asks and asks_first(rel.step.words):  # the first line that matches, in
        stated |= first_passages(state.index, rel.hits, rel.step.words,  # a log's order
                                 state.evicted)
    if rel.step.asks:  # a row that is the extreme the question names states its answer
        stated |= {(h.chunk_id, h.piece) for h in rel.hits if h.note}
    if rel.step.asks and asks_own_words(rel.step.words):  # "what did I tell you about…"
        stated |= users_passages(rel.hits, lambda c: m.role if (m := state.meta.get(c))
                                 else None)
    if rel.step.asks:  # a value the agent named beside the question's words, in its record
        stated |= echoed_passages(rel.hits, lambda c: m.role if (m := state.meta.get(c))
                                  else None, state.evicted, rel.step.words)

    results = results_of(conv) if rel.step.asks else {}
    calls = matched_calls(rel.hits, results, settings.question_min_relevance)

    # a message that asks two things or more: as many passages for each (proxy/step.py)
    top_k = (settings.question_top_k * max(1, len(questions(rel.step.query)))
             if rel.step.asks else settings.top_k)

    def unshown(chunk_id: str) -> list[Hit]:
        """A chunk's passages but those a kept block shows already."""
        return [x for x in state.index.chunk_hits(chunk_id) if (chunk_id, x.piece) not in shown]

    def choose(recallable: set[str]) -> list[Recalled]:
        chosen = select([h for h in rel.hits if (h.chunk_id, h.piece) not in shown],
                        recallable, state.meta, query=query,
                        min_relevance=(min(settings.min_relevance,
                                           settings.question_min_relevance)
                                       if rel.step.asks else settings.min_relevance),
                        min_relative=(min(settings.min_relative,
                                          settings.question_min_relative)
                                      if rel.step.asks else settings.min_relative),
                        top_k=top_k,
                        budget=cap, count=count,
                        vectors=[v for v in rel.vectors if (v[0].chunk_id, v[0].piece)
                                 not in shown],
                        min_similarity=settings.min_similarity, related=rel.related,
                        stated=stated,
                        following=state.index.following if rel.step.asks else None,
                        preceding=state.index.preceding if rel.step.asks else None,
                        header=state.index.header,
                        whole=unshown if rel.step.asks else None,
                        question_similarity=(settings.question_min_similarity
                                             if rel.step.asks else None))
        if not calls:  # a question: a call it matched brings its results (proxy/results.py)
            return chosen
        return with_results(chosen, calls, results, state.index, recallable, state.meta,
                            count, cap)

    chosen = choose(recallable)
    if not chosen:
        return fit, result
    need = sum(r.tokens for r in chosen) + rt.block_overhead
    free = room - fit.tokens - result.tokens
    if need > free and not fit.cuts and (fit.new or asked_now):
        # Making room means evicting: worth a prefix change when the user asks now or
        # the turn evicts anyway; on a tool turn that evicts nothing, recall takes the
        # free room only and the prefix stays.
        refit = rt.fitter.fit(conv, state.evicted, room - need, min(target, room - need),
                              rt.policy, ctx)
        if refit.tokens <= room - need:
            fit, free = refit, room - refit.tokens
            # what it evicted to make that room can hold what the step asks better than
            # the passages chosen (a large tool output whose one line answers): choose
            # again among everything evicted now
            more = {p.chunk.id for p in conv.parts if p.chunk.id in fit.evicted}
            if not more <= recallable:
                chosen = choose(more) or chosen
    costs = [rt.fitter.part_cost(conv, p, fit.evicted) for p in conv.parts]
    host = host_of(conv, costs)
    block = make_block(chosen, host, count, free) if host is not None else None
    if block is None:
        return fit, result
    return fit, RecallResult(blocks=[*kept, block], tokens=result.tokens + block.tokens,
                             passages=list(block.passages), query=query)


async def across_sessions(store: Store, rt: RouteRuntime, conv: Conversation, fit: Fit,
                          result: RecallResult, tenant: str, session: str,
                          room: int) -> RecallResult:
    """A route that allows it also searches the tenant's other sessions: the store's
    vector search, under `recall.timeout_ms`, only when this session's own index found
    nothing (the request is valid without it, so a slow store is skipped and logged)."""
    settings = rt.route.recall
    budget = min(settings.budget(room), room - fit.tokens) - result.tokens
    in_context = frozenset(p.chunk.id for p in conv.parts if p.chunk.id not in fit.evicted)
    q = RecallQuery(tenant=tenant, session=session, text=result.query,
                    exclude_chunk_ids=in_context,
                    budget_tokens=budget - rt.block_overhead, top_k=settings.top_k,
                    min_similarity=settings.min_similarity, cross_session=True)
    if q.budget_tokens <= 0:
        return result
    try:
        found = await asyncio.wait_for(store.recall(q), settings.timeout_ms / 1000)
    except TimeoutError:
        log.warning("recall_skipped", reason="timeout", timeout_ms=settings.timeout_ms)
        return result
    chosen = [Recalled(Hit(p.chunk_id, i, p.text, p.similarity, p.similarity),
                       p.turn, p.role, p.klass, p.tokens + 16,
                       f"another session's passage, cosine {p.similarity:.2f}")
              for i, p in enumerate(found)]
    costs = [rt.fitter.part_cost(conv, p, fit.evicted) for p in conv.parts]
    host = host_of(conv, costs)
    block = make_block(chosen, host, rt.counter.text, budget) if host else None
    if block is None:
        return result
    return RecallResult(blocks=[*result.blocks, block], tokens=result.tokens + block.tokens,
                        passages=list(block.passages), query=result.query)


def carried(blocks: list[Block], conv: Conversation, fit: Fit, room: int,
            evicted: set[str]) -> list[Block]:
    """Earlier blocks that stay: the turn evicts, restores and cuts nothing (else the
    prefix changes anyway and recall is chosen afresh, as it is when the user asks
    something new), each host is still forwarded, no passage comes from a message of
    the session's (`evicted`) that the client no longer sends, and they fit the room
    left."""
    if not blocks or fit.new or fit.restored or fit.cuts:
        return []
    sent = {p.chunk.id for p in conv.parts}
    present = {c for c in sent if c not in fit.evicted}
    withdrawn = evicted - sent
    kept = [b for b in blocks if b.host in present
            and not any(r.hit.chunk_id in withdrawn for r in b.passages)]
    if fit.tokens + sum(b.tokens for b in kept) > room:
        return []
    return kept
