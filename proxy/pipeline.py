"""The request's way through the house: chunk → relate → fit → recall → offload → forward.

`Pipeline.prepare` turns a validated client body into the body to forward (`Prepared`,
proxy/prepared.py), never invalid, never over the window. Chunks are stored (durably)
before the request that drops them is forwarded; if the store cannot take them, nothing
is dropped and the caller gets a 503. A turn that drops nothing (it recalls or restores)
may log its decisions beside the forward (`prepare(beside=True)`: the server's handler,
which answers its client once they are written).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

import structlog

from policies import PolicyContext
from proxy import gcrest
from proxy.analysis import MsgInfo
from proxy.coldpool import ColdPool
from proxy.config import RouteSettings, Settings
from proxy.hush import Hush
from proxy.prepared import Prepared
from proxy.recall import ChunkMeta, place
from proxy.recalling import across_sessions, carried, within_session
from proxy.records import fingerprints, prefix_ratio, record
from proxy.recount import Recounter
from proxy.relate import Relater
from proxy.replica import Replica
from proxy.runtime import RouteRuntime, resolve_window, too_long
from proxy.sent import SentBodies
from proxy.session import SessionKey, Sessions, SessionState
from proxy.timing import Laps
from proxy.tokens import REPLY_PRIMING
from proxy.turnlog import TurnLog, summary
from proxy.writes import Writes
from store.base import Store
from store.quiet import QUIET
from store.vectors import Vectors

log = structlog.get_logger("ctxwarden")


class Pipeline:
    def __init__(self, settings: Settings, store: Store, replica: Replica | None = None) -> None:
        self.store = store
        self.replica = replica  # a store shared by replicas: sessions' heads (replica.py)
        self.sessions = Sessions(settings.server.max_sessions,
                                 settings.server.session_memory_mb * 2**20)
        self.runtimes = {r.name: RouteRuntime(r, resolve_window(r, i))
                         for i, r in enumerate(settings.routes)}
        self.turns = TurnLog(store)  # per-turn summaries for the inspector, off the hot path
        self.cold = ColdPool(settings.server.cold_workers)  # whole histories on two cores
        self.recount = Recounter()  # ... their estimated messages counted afterwards
        self.sent = SentBodies(settings.server.keep_sent)  # GET /admin/sent
        # Vectors refine relevance where the store's embedder has them (a LanceStore's).
        self.relater = Relater(getattr(store, "embedder", None))
        # ... and its child process stops while a cold history is prepared (proxy/hush.py)
        self.hush = Hush(getattr(self.relater.embedder, "process", None))
        self.writes = Writes(store, self.turns)  # one durable append a turn (proxy/writes.py)

    async def close(self) -> None:
        await self.writes.close()  # decisions still being logged, before the store closes
        self.cold.close()
        await self.recount.close()
        await self.relater.close()
        if self.replica is not None:
            await self.replica.close()

    async def prepare(self, body: dict[str, Any], route: RouteSettings, tenant: str,
                      session: str | SessionKey, *, defer: bool = False,
                      beside: bool = False) -> Prepared:
        """The body to forward. With `defer`, nothing is written and the session's state is
        left as it was until `Prepared.commit()`: for a caller whose upstream key nobody
        has accepted yet (auth passthrough), so a bogus key writes nothing. With
        `beside`, a turn that drops nothing returns before its decisions are written;
        `Prepared.settled()` waits for them."""
        key = session if isinstance(session, SessionKey) else SessionKey(session)
        rt = self.runtimes[route.name]
        if self.replica is not None and key.anchor is not None:  # claimed on another?
            await self.replica.claimed(self.sessions.get(tenant, key.id), tenant, key.id)
        laps = Laps()
        sid, state = self.sessions.resolve(tenant, key)
        state.users += 1  # kept in the LRU while this request waits for its lock too
        try:
            with QUIET.busy():  # background work waits (store/quiet.py)
                return await self._locked(rt, body, tenant, sid, state, defer, beside, laps)
        finally:
            state.users -= 1

    async def _locked(self, rt: RouteRuntime, body: dict[str, Any], tenant: str, sid: str,
                      state: SessionState, defer: bool, beside: bool, laps: Laps) -> Prepared:
        async with state.lock:
            laps.lap("wait")  # for the session's previous request
            if self.replica is not None:  # another replica may have served it since
                await self.replica.refresh(state, tenant, sid)
            # The session's first read of the store overlaps the messages' analysis (a
            # cold history's is half in a worker process: proxy/coldpool.py).
            load = None if state.loaded else asyncio.ensure_future(
                self._load(state, tenant, sid))
            recall = rt.route.recall  # a question's vector: asked for first, used in relate
            asked = self.relater.prefetch(state.vectors, body["messages"],
                                          recall.question_vector_wait_ms
                                          if recall.enabled else 0)
            with contextlib.ExitStack() as hold:
                def cold() -> None:  # a cold history: the embedder and the collector wait
                    hold.enter_context(self.hush.held())
                    hold.enter_context(gcrest.COLD.held())

                try:
                    known = await self.cold.infos(rt.analyzer, body["messages"],
                                                  state.prefix, on_cold=cold)
                    laps.lap("analyse")
                finally:
                    if load is not None:
                        await load
                laps.lap("load")
                prepared = await self._prepare(rt, body, tenant, sid, state, known, asked, laps)
                if not defer:
                    await prepared.commit(beside)
                    laps.lap("commit")
            self.recount.later(state, rt.analyzer)
            self.sessions.account(tenant, sid, state)
            return prepared

    async def _load(self, state: SessionState, tenant: str, session: str) -> None:
        """First sight of a session in this process: its sticky evictions, and the text of
        what it evicted, so its index scores as the process that evicted it did (recall
        takes only what the request still holds: recalling.within_session)."""
        evicted = await self.store.evicted_ids(tenant, session)
        state.evicted |= evicted
        if evicted:
            for c in await self.store.fetch(tenant, session, sorted(evicted)):
                if state.index.add(c.chunk_id, c.text):
                    state.meta[c.chunk_id] = ChunkMeta(c.turn, c.role, c.klass)
        state.loaded = True

    async def _prepare(self, rt: RouteRuntime, body: dict[str, Any], tenant: str, session: str,
                       state: SessionState, known: tuple[list[MsgInfo], int],
                       asked: str | None, laps: Laps) -> Prepared:
        """validate and route happened at the edge; here: chunk → relate → fit → recall →
        assemble → offload and log (one durable store call) → the body to forward; `laps`
        takes each phase's time (the request log's `phases_ms`)."""
        messages: list[dict[str, Any]] = body["messages"]
        # chunk: classes, turns, references, tool-call groups
        conv = rt.chunker.split(messages, state.prefix, known)
        state.prefix = conv.prefix(messages)
        conv.offset = state.turn_offset(conv)  # a client that trims its history
        for p in conv.parts:  # a recall counts as a reference (RWOE's boost)
            extra = state.recall_refs.get(p.chunk.id)
            if extra:
                p.chunk.refs.extend(extra)
        laps.lap("chunk")
        # relate: lexical relevance of every chunk, in context or evicted, to this step;
        # vectors refine where already computed (the step's own is awaited a few ms)
        if state.vectors is None and self.relater.embedder is not None:
            state.vectors = Vectors(state.index)
        settings = rt.route.recall
        rel = self.relater.relate(state.index, state.vectors, state.meta, conv,
                                  settings.vector_wait_ms if settings.enabled else 0,
                                  settings.min_similarity, settings.related_words,
                                  settings.question_vector_wait_ms if settings.enabled else 0,
                                  asked, settings.min_relevance, state.evicted)
        laps.lap("relate")
        # fit: sticky decisions, then the policy, down to the watermark; cut if must
        tools_tokens = rt.counter.request_extras(body)  # tools, functions, schemas
        room, reserved = rt.room(body, tools_tokens)
        tokens_in = REPLY_PRIMING + sum(p.chunk.tokens for p in conv.parts) + tools_tokens
        ctx = PolicyContext(turn=conv.turn, similarity=rel.similarity,
                            rng=random.Random(f"{session}:{conv.turn}"),
                            horizon=conv.horizon)
        target = int(room * rt.route.watermark)
        fit = rt.fitter.fit(conv, state.evicted, room, target, rt.policy, ctx)
        if fit.tokens > room:
            rt.fitter.cut(conv, fit, room)
            if fit.tokens > room:
                raise too_long(rt, conv, fit, room, reserved, tools_tokens,
                               "max_completion_tokens" if body.get("max_completion_tokens")
                               else "max_tokens")
        laps.lap("fit")
        # recall: evicted passages the step clearly asks about, within the room left;
        # blocks from earlier turns stay on their messages while nothing else changes
        await self.relater.finish(rel, state.index, state.vectors)
        laps.lap("vector")  # the question's own, if it was waited for
        # the user asks now: the latest user message or tool result is a user message (a
        # trailing system reminder or assistant prefill does not change that)
        asked_now = next((p.role == "user" for p in reversed(conv.parts)
                          if p.role in ("user", "tool")), False)
        kept = [] if asked_now else carried(state.blocks, conv, fit, room, state.evicted)
        fit, recall = within_session(rt, conv, fit, rel, state, room, target, ctx, kept,
                                     asked_now)
        if settings.cross_session and not recall.passages and rel.step.text:
            recall = await across_sessions(self.store, rt, conv, fit, recall, tenant, session,
                                             room)
        laps.lap("recall")
        # assemble: kept messages, stubs and cuts, the recall blocks on their hosts
        costs = [rt.fitter.part_cost(conv, p, fit.evicted) for p in conv.parts]
        out = rt.fitter.assemble(conv, messages, fit.evicted, fit.cuts)
        out = place(out, [p.chunk.id for p, c in zip(conv.parts, costs, strict=True) if c],
                    recall.blocks)
        # offload and log (`commit`): one durable append before anything evicted leaves
        chunks, events = record(rt, conv, fit, recall, tenant, session, messages)
        prompt = fingerprints(conv, costs, fit, recall.blocks)
        ratio = prefix_ratio(state.last_prompt, prompt)
        tokens_out = fit.tokens + recall.tokens + tools_tokens
        recalled = [e for e in events if e.action == "recall"]
        row = summary(
            conv, fit, costs, recalled, tenant=tenant, session=session,
            policy=rt.route.policy, window=rt.window, budget=room,
            recall_budget=rt.route.recall.budget(room), tools=tools_tokens,
            tokens_in=tokens_in, tokens_out=tokens_out, recall_tokens=recall.tokens,
            query=recall.query)
        laps.lap("record")

        forwarded = {**body, "messages": out}

        async def commit(beside: bool) -> None:
            if chunks:  # what the forward drops is durable before it goes (never forget)
                await self.writes.write(chunks, events)
            state.evicted |= {d.part.chunk.id for d in fit.new}
            state.evicted -= {d.part.chunk.id for d in fit.restored}
            state.blocks, state.last_prompt = recall.blocks, prompt  # what was sent
            for r in recall.passages:
                state.recall_refs.setdefault(r.hit.chunk_id, []).append(conv.turn)
            if self.replica is not None:  # after the chunks, before the forward
                await self.replica.publish(state, tenant, session)
            self.turns.submit(row)
            self.sent.put(tenant, session, conv.logged, forwarded)  # GET /admin/sent
            if not chunks and events:  # decisions that drop nothing: a recall, a restore
                if beside:
                    prepared.beside = self.writes.beside(self.writes.write(chunks, events))
                else:
                    await self.writes.write(chunks, events)

        prepared = Prepared(
            body=forwarded, route=rt.route, tenant=tenant, session=session,
            turn=conv.logged, tokens_in=tokens_in, tokens_out=tokens_out, budget=room,
            evicted=len(fit.evicted), new_evictions=len(fit.new),
            recalled=sum(len(b.passages) for b in recall.blocks), prefix_ratio=ratio,
            events=events, pending=commit, laps=laps,
            kept=tuple(i for i, c in enumerate(costs) if c),
        )
        return prepared
