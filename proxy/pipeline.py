"""The request's way through the house: chunk → relate → fit → recall → offload → forward.

`Pipeline.prepare` turns a validated client body into the body to forward, never invalid,
never over the window. Chunks are stored (durably) before the request that drops them is
forwarded; if the store cannot take them, nothing is dropped and the caller gets a 503.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from policies import Policy, PolicyContext, get_policy
from proxy.analysis import MessageAnalyzer
from proxy.chunking import Chunker, Conversation
from proxy.config import ConfigError, RouteSettings, Settings
from proxy.errors import ContextLengthExceeded
from proxy.fitting import Fit, Fitter
from proxy.recall import (
    CLOSE,
    OPEN,
    Block,
    ChunkMeta,
    Recalled,
    RecallResult,
    host_of,
    make_block,
    place,
    select,
)
from proxy.relate import Relater, Relevance
from proxy.replica import Replica
from proxy.session import SessionKey, Sessions, SessionState
from proxy.tokens import REPLY_PRIMING, TokenCounter, encoding_for
from proxy.turnlog import TurnLog, summary
from store.base import Event, EvictedChunk, RecallQuery, Store
from store.errors import EventsUnrecorded, StoreUnavailable
from store.media import Media
from store.quiet import QUIET
from store.relevance import Hit
from store.vectors import Vectors

log = structlog.get_logger("ctxwarden")


@dataclass(slots=True)
class Prepared:
    body: dict[str, Any]
    route: RouteSettings
    tenant: str
    session: str
    turn: int
    tokens_in: int
    tokens_out: int
    budget: int
    evicted: int  # chunks out of context in this request
    new_evictions: int
    recalled: int
    prefix_ratio: float
    events: list[Event] = field(default_factory=list)
    # The store write and the session's new decisions, when `prepare(defer=True)` left
    # them for the caller to run once the upstream has accepted the request.
    pending: Callable[[], Awaitable[None]] | None = None

    async def commit(self) -> None:
        """Run what `prepare(defer=True)` deferred (a no-op otherwise, or the second time)."""
        pending, self.pending = self.pending, None
        if pending is not None:
            await pending()

    def headers(self) -> dict[str, str]:
        """What the client sees of the decisions (README: response headers)."""
        return {"X-Ctxwarden-Session": self.session,
                "X-Ctxwarden-Tokens-In": str(self.tokens_in),
                "X-Ctxwarden-Tokens-Out": str(self.tokens_out),
                "X-Ctxwarden-Evicted": str(self.evicted),
                "X-Ctxwarden-Recalled": str(self.recalled)}

    def log_fields(self) -> dict[str, Any]:
        """The request log line's fields (never message text or keys)."""
        return {"session": self.session, "route": self.route.name, "tenant": self.tenant,
                "turn": self.turn, "tokens_in": self.tokens_in, "tokens_out": self.tokens_out,
                "budget": self.budget, "evicted": self.evicted,
                "new_evictions": self.new_evictions, "recalled": self.recalled,
                "policy": self.route.policy, "prefix_ratio": round(self.prefix_ratio, 3)}


class RouteRuntime:
    """Everything a route needs per request, built once."""

    def __init__(self, route: RouteSettings, window: int) -> None:
        self.route = route
        self.window = window
        self.counter = TokenCounter(encoding_for(route.upstream.model),
                                    model=route.upstream.model)
        self.analyzer = MessageAnalyzer(self.counter)
        self.chunker = Chunker(self.analyzer, route.classification)
        self.fitter = Fitter(self.counter)
        self.policy: Policy = get_policy(route.policy, **route.policy_params)

        self.block_overhead = self.counter.text(OPEN + CLOSE) + 8

    def room(self, body: dict[str, Any], tools_tokens: int) -> tuple[int, int]:
        """(room for messages, reserved output). Recall takes its share of the room only on
        the turns that recall (`Pipeline._recall`), so the rest of the time it all goes to
        the conversation."""
        r = self.route
        reserved = body.get("max_completion_tokens") or body.get("max_tokens")
        reserved = int(reserved) if reserved else r.max_output_tokens
        room = self.window - reserved - tools_tokens - math.ceil(r.safety_margin * self.window)
        return room, reserved


def resolve_window(route: RouteSettings, index: int) -> int:
    if route.context_window:
        return route.context_window
    import litellm

    try:
        info = litellm.get_model_info(route.upstream.model)
        window = info.get("max_input_tokens") or info.get("max_tokens")
    except Exception:
        window = None
    if not window:
        raise ConfigError(f"routes[{index}].context_window: LiteLLM does not know the window of "
                          f"{route.upstream.model!r}; set context_window for route {route.name!r}")
    return int(window)


class Pipeline:
    def __init__(self, settings: Settings, store: Store, replica: Replica | None = None) -> None:
        self.store = store
        self.replica = replica  # a store shared by replicas: sessions' heads (replica.py)
        self.sessions = Sessions(settings.server.max_sessions,
                                 settings.server.session_memory_mb * 2**20)
        self.runtimes = {r.name: RouteRuntime(r, resolve_window(r, i))
                         for i, r in enumerate(settings.routes)}
        self.turns = TurnLog(store)  # per-turn summaries for the inspector, off the hot path
        # Vectors refine relevance where the store's embedder has them (a LanceStore's).
        self.relater = Relater(getattr(store, "embedder", None))

    async def close(self) -> None:
        await self.relater.close()
        if self.replica is not None:
            await self.replica.close()

    async def prepare(self, body: dict[str, Any], route: RouteSettings, tenant: str,
                      session: str | SessionKey, *, defer: bool = False) -> Prepared:
        """The body to forward. With `defer`, nothing is written and the session's state is
        left as it was until `Prepared.commit()`: for a caller whose upstream key nobody
        has accepted yet (auth passthrough), so a bogus key writes nothing."""
        key = session if isinstance(session, SessionKey) else SessionKey(session)
        rt = self.runtimes[route.name]
        if self.replica is not None and key.anchor is not None:  # claimed on another?
            await self.replica.claimed(self.sessions.get(tenant, key.id), tenant, key.id)
        sid, state = self.sessions.resolve(tenant, key)
        with QUIET.busy():  # background work waits (store/quiet.py)
            return await self._locked(rt, body, tenant, sid, state, defer)

    async def _locked(self, rt: RouteRuntime, body: dict[str, Any], tenant: str, sid: str,
                      state: SessionState, defer: bool) -> Prepared:
        async with state.lock:
            if self.replica is not None:  # another replica may have served it since
                await self.replica.refresh(state, tenant, sid)
            if not state.loaded:
                await self._load(state, tenant, sid)
            prepared = await self._prepare(rt, body, tenant, sid, state)
            if not defer:
                await prepared.commit()
            self.sessions.account(tenant, sid, state)
            return prepared

    async def _load(self, state: SessionState, tenant: str, session: str) -> None:
        """First sight of a session in this process: its sticky evictions, and the text of
        what it evicted (recallable even if the client no longer sends it)."""
        evicted = await self.store.evicted_ids(tenant, session)
        state.evicted |= evicted
        if evicted:
            for c in await self.store.fetch(tenant, session, sorted(evicted)):
                if state.index.add(c.chunk_id, c.text):
                    state.meta[c.chunk_id] = ChunkMeta(c.turn, c.role, c.klass)
        state.loaded = True

    async def _prepare(self, rt: RouteRuntime, body: dict[str, Any], tenant: str, session: str,
                       state: SessionState) -> Prepared:
        """validate and route happened at the edge; here: chunk → relate → fit → recall →
        assemble → offload and log (one durable store call) → the body to forward."""
        messages: list[dict[str, Any]] = body["messages"]
        # chunk: classes, turns, references, tool-call groups
        conv = rt.chunker.split(messages, state.prefix)
        state.prefix = conv.prefix(messages)
        for p in conv.parts:  # a recall counts as a reference (RWOE's boost)
            extra = state.recall_refs.get(p.chunk.id)
            if extra:
                p.chunk.refs.extend(extra)
        # relate: lexical relevance of every chunk, in context or evicted, to this step;
        # vectors refine where already computed (the step's own is awaited a few ms)
        if state.vectors is None and self.relater.embedder is not None:
            state.vectors = Vectors(state.index)
        settings = rt.route.recall
        rel = self.relater.relate(state.index, state.vectors, state.meta, conv,
                                  settings.vector_wait_ms if settings.enabled else 0,
                                  settings.min_similarity)
        # fit: sticky decisions, then the policy, down to the watermark; cut if must
        tools_tokens = rt.counter.request_extras(body)  # tools, functions, schemas
        room, reserved = rt.room(body, tools_tokens)
        tokens_in = REPLY_PRIMING + sum(p.chunk.tokens for p in conv.parts) + tools_tokens
        ctx = PolicyContext(turn=conv.turn, similarity=rel.similarity,
                            rng=random.Random(f"{session}:{conv.turn}"))
        target = int(room * rt.route.watermark)
        fit = rt.fitter.fit(conv, state.evicted, room, target, rt.policy, ctx)
        if fit.tokens > room:
            rt.fitter.cut(conv, fit, room)
            if fit.tokens > room:
                raise _too_long(rt, conv, fit, room, reserved, tools_tokens)
        # recall: evicted passages the step clearly asks about, within the room left;
        # blocks from earlier turns stay on their messages while nothing else changes
        await self.relater.finish(rel, state.index, state.vectors)
        # the user asks now: the latest user message or tool result is a user message (a
        # trailing system reminder or assistant prefill does not change that)
        asked_now = next((p.role == "user" for p in reversed(conv.parts)
                          if p.role in ("user", "tool")), False)
        kept = [] if asked_now else _carried(state.blocks, conv, fit, room)
        fit, recall = self._recall(rt, conv, fit, rel, state, room, target, ctx, kept,
                                   asked_now)
        if settings.cross_session and not recall.passages and rel.step.text:
            recall = await self._recall_across(rt, conv, fit, recall, tenant, session, room)
        state.blocks = recall.blocks
        # assemble: kept messages, stubs and cuts, the recall blocks on their hosts
        costs = [rt.fitter.part_cost(conv, p, fit.evicted) for p in conv.parts]
        out = rt.fitter.assemble(conv, messages, fit.evicted, fit.cuts)
        out = place(out, [p.chunk.id for p, c in zip(conv.parts, costs, strict=True) if c],
                    recall.blocks)
        # offload and log (`commit`): one durable append before anything evicted leaves
        chunks, events = self._record(rt, conv, fit, recall, tenant, session, messages)
        prompt = _fingerprints(conv, costs, fit, recall.blocks)
        ratio = _prefix_ratio(state.last_prompt, prompt)
        state.last_prompt = prompt
        tokens_out = fit.tokens + recall.tokens + tools_tokens
        recalled = [e for e in events if e.action == "recall"]
        row = summary(
            conv, fit, costs, recalled, tenant=tenant, session=session,
            policy=rt.route.policy, window=rt.window, budget=room,
            recall_budget=int(room * rt.route.recall.budget_fraction), tools=tools_tokens,
            tokens_in=tokens_in, tokens_out=tokens_out, recall_tokens=recall.tokens,
            query=recall.query)

        async def commit() -> None:
            await self._write(chunks, events)
            state.evicted |= {d.part.chunk.id for d in fit.new}
            state.evicted -= {d.part.chunk.id for d in fit.restored}
            for r in recall.passages:
                state.recall_refs.setdefault(r.hit.chunk_id, []).append(conv.turn)
            if self.replica is not None:  # after the chunks, before the forward
                await self.replica.publish(state, tenant, session)
            self.turns.submit(row)

        return Prepared(
            body={**body, "messages": out}, route=rt.route, tenant=tenant, session=session,
            turn=conv.turn, tokens_in=tokens_in, tokens_out=tokens_out, budget=room,
            evicted=len(fit.evicted), new_evictions=len(fit.new),
            recalled=sum(len(b.passages) for b in recall.blocks), prefix_ratio=ratio,
            events=events, pending=commit,
        )

    async def _write(self, chunks: list[EvictedChunk], events: list[Event]) -> None:
        """One durable append. When it fails with chunks in it, nothing was dropped: the
        StoreUnavailable reaches the client as a 503. When only the events failed (a
        write of events alone: a recall or a restore, nothing leaves the request; or a
        store without the log that stored the chunks, `EventsUnrecorded`), the request goes
        on: the decisions go to the log line `events_unrecorded` and are retried in the
        background."""
        if not (chunks or events):
            return
        try:
            await self.store.record(chunks, events)
        except (StoreUnavailable, EventsUnrecorded) as exc:
            if chunks and not isinstance(exc, EventsUnrecorded):
                raise
            log.warning("events_unrecorded", error=str(exc), retry=True,
                        events=[f"{e.action} {e.chunk_id}: {e.reason}" for e in events])
            self.turns.retry(events)

    def _recall(self, rt: RouteRuntime, conv: Conversation, fit: Fit, rel: Relevance,
                state: SessionState, room: int, target: int, ctx: PolicyContext,
                kept: list[Block], asked_now: bool) -> tuple[Fit, RecallResult]:
        """Choose passages of evicted chunks not already in a kept block. When they do not
        fit the room left, fit again leaving room for them if the user asks now or this
        turn evicts anyway; otherwise (and after a cut) they take the free room, weakest
        dropped first."""
        settings = rt.route.recall
        query = rel.step.text
        result = RecallResult(blocks=kept, tokens=sum(b.tokens for b in kept), query=query)
        in_context = {p.chunk.id for p in conv.parts if p.chunk.id not in fit.evicted}
        recallable = (fit.evicted | state.evicted) - in_context
        if not settings.enabled or not (rel.hits or rel.vectors) or not recallable:
            return fit, result
        shown = set().union(*(b.keys for b in kept))
        count = rt.counter.text
        cap = int(room * settings.budget_fraction) - rt.block_overhead - result.tokens
        chosen = select([h for h in rel.hits if (h.chunk_id, h.piece) not in shown],
                        recallable, state.meta, query=query,
                        min_relevance=(min(settings.min_relevance,
                                           settings.question_min_relevance)
                                       if rel.step.asks else settings.min_relevance),
                        min_relative=settings.min_relative, top_k=settings.top_k,
                        budget=cap, count=count,
                        vectors=[v for v in rel.vectors if (v[0].chunk_id, v[0].piece)
                                 not in shown],
                        min_similarity=settings.min_similarity)
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
        costs = [rt.fitter.part_cost(conv, p, fit.evicted) for p in conv.parts]
        host = host_of(conv, costs)
        block = make_block(chosen, host, count, free) if host is not None else None
        if block is None:
            return fit, result
        return fit, RecallResult(blocks=[*kept, block], tokens=result.tokens + block.tokens,
                                 passages=list(block.passages), query=query)

    async def _recall_across(self, rt: RouteRuntime, conv: Conversation, fit: Fit,
                             result: RecallResult, tenant: str, session: str,
                             room: int) -> RecallResult:
        """A route that allows it also searches the tenant's other sessions: the store's
        vector search, under `recall.timeout_ms`, only when this session's own index found
        nothing (the request is valid without it, so a slow store is skipped and logged)."""
        settings = rt.route.recall
        budget = min(int(room * settings.budget_fraction), room - fit.tokens) - result.tokens
        in_context = frozenset(p.chunk.id for p in conv.parts if p.chunk.id not in fit.evicted)
        q = RecallQuery(tenant=tenant, session=session, text=result.query,
                        exclude_chunk_ids=in_context,
                        budget_tokens=budget - rt.block_overhead, top_k=settings.top_k,
                        min_similarity=settings.min_similarity, cross_session=True)
        if q.budget_tokens <= 0:
            return result
        try:
            found = await asyncio.wait_for(self.store.recall(q), settings.timeout_ms / 1000)
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

    def _record(self, rt: RouteRuntime, conv: Conversation, fit: Fit, recall: RecallResult,
                tenant: str, session: str,
                messages: list[dict[str, Any]]) -> tuple[list[EvictedChunk], list[Event]]:
        """Evicted and cut chunks with their events, restore and recall events: what this
        turn writes, in one durable store call (`_write`)."""
        policy = rt.route.policy
        gone = [(d.part, d.score, "evict", d.reason) for d in fit.new]
        gone += [(p, 0.0, "cut", f"tool output over the window: head and tail kept, "
                  f"{p.chunk.tokens - (p.cut_tokens or 0)} tokens cut")
                 for p in fit.cut_parts]
        chunks = [EvictedChunk(tenant, session, p.chunk.id, p.chunk.turn, p.role,
                               p.chunk.klass.value, p.chunk.tokens, p.info.text,
                               Media.of(messages[p.chunk.index]))
                  for p, _, _, _ in gone]
        events = [Event(tenant, session, conv.turn, p.chunk.id, p.chunk.klass.value,
                        p.chunk.tokens, round(score, 6), action, reason, policy,
                        preview=_preview(p.info.text)) for p, score, action, reason in gone]
        events += [Event(tenant, session, conv.turn, d.part.chunk.id, d.part.chunk.klass.value,
                         d.part.chunk.tokens, round(d.score, 6), "restore", d.reason, policy,
                         preview=_preview(d.part.info.text)) for d in fit.restored]
        events += recall.events(tenant, session, conv.turn, policy)
        return chunks, events


def _preview(text: str, width: int = 100) -> str:
    """The text's first `width` characters, whitespace collapsed. Reads a bounded head
    (a cold history evicts ~900 chunks at once: splitting each whole cost ~10 ms)."""
    head = text[: width * 8]
    flat = " ".join(head.split())
    if len(flat) <= width and len(head) < len(text):  # mostly blank head: read it all
        flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _fingerprints(conv: Conversation, costs: list[int], fit: Fit,
                  blocks: list[Block]) -> list[tuple[str, int]]:
    """(identity, tokens) of each forwarded message, to measure prompt-cache reuse."""
    on = {b.host: b for b in blocks}
    out = []
    for p, cost in zip(conv.parts, costs, strict=True):
        if cost:
            mark = "/stub" if p.chunk.id in fit.evicted else ("/cut" if p.cut_tokens else "")
            b = on.get(p.chunk.id)
            if b is not None:
                mark += "/recall:" + ",".join(f"{r.hit.chunk_id}.{r.hit.piece}"
                                              for r in b.passages)
                cost += b.tokens
            out.append((p.chunk.id + mark, cost))
    return out


def _carried(blocks: list[Block], conv: Conversation, fit: Fit, room: int) -> list[Block]:
    """Earlier blocks that stay: the turn evicts, restores and cuts nothing (else the
    prefix changes anyway and recall is chosen afresh, as it is when the user asks
    something new), each host is still forwarded, and they fit the room left."""
    if not blocks or fit.new or fit.restored or fit.cuts:
        return []
    present = {p.chunk.id for p in conv.parts if p.chunk.id not in fit.evicted}
    kept = [b for b in blocks if b.host in present]
    if fit.tokens + sum(b.tokens for b in kept) > room:
        return []
    return kept


def _prefix_ratio(prev: list[tuple[str, int]], cur: list[tuple[str, int]]) -> float:
    """Share of this prompt's tokens that repeat the previous prompt message for message:
    what a provider's prefix cache can serve."""
    total = sum(c for _, c in cur)
    if not prev or not total:
        return 0.0
    same = 0
    for (a, _), (b, cost) in zip(prev, cur, strict=False):
        if a != b:
            break
        same += cost
    return same / total


def _too_long(rt: RouteRuntime, conv: Conversation, fit: Fit, budget: int, reserved: int,
              tools: int) -> ContextLengthExceeded:
    return ContextLengthExceeded(
        f"This request cannot fit the context window of route {rt.route.name!r}: what must "
        f"stay (system and developer messages, the first user message, the latest turn) is "
        f"{fit.permanent_tokens} tokens, and {fit.tokens} after evicting everything evictable, "
        f"but only {budget} fit (window {rt.window} - reserved output {reserved} - tools "
        f"{tools} - safety margin and recall budget). Shorten the latest message or the "
        f"system prompt, lower max_tokens, or use a route with a larger window.",
        param="messages",
    )
