"""The request's way through the house: chunk → score → offload → recall → assemble.

`Pipeline.prepare` turns a validated client body into the body to forward, never invalid,
never over the window. Chunks are stored (durably) before the request that drops them is
forwarded; if the store cannot take them, nothing is dropped and the caller gets a 503.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from policies import Policy, PolicyContext, get_policy
from proxy.analysis import MessageAnalyzer
from proxy.chunking import Chunker, Conversation
from proxy.config import ConfigError, RouteSettings, Settings
from proxy.errors import ContextLengthExceeded
from proxy.fitting import Fit, Fitter
from proxy.recall import Recaller
from proxy.session import Sessions, SessionState
from proxy.tokens import TokenCounter, encoding_for
from proxy.turnlog import TurnLog, summary
from store.base import Event, EvictedChunk, Store


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


class RouteRuntime:
    """Everything a route needs per request, built once."""

    def __init__(self, route: RouteSettings, window: int) -> None:
        self.route = route
        self.window = window
        self.counter = TokenCounter(encoding_for(route.upstream.model))
        self.analyzer = MessageAnalyzer(self.counter)
        self.chunker = Chunker(self.analyzer, route.classification)
        self.fitter = Fitter(self.counter)
        self.policy: Policy = get_policy(route.policy, **route.policy_params)

    def budgets(self, body: dict[str, Any], tools_tokens: int) -> tuple[int, int, int]:
        """(eviction budget, recall budget, reserved output)."""
        r = self.route
        reserved = body.get("max_completion_tokens") or body.get("max_tokens")
        reserved = int(reserved) if reserved else r.max_output_tokens
        room = self.window - reserved - tools_tokens - math.ceil(r.safety_margin * self.window)
        recall = int(room * r.recall.budget_fraction) if r.recall.enabled and room > 0 else 0
        return room - recall, recall, reserved


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
    def __init__(self, settings: Settings, store: Store) -> None:
        self.store = store
        self.sessions = Sessions(settings.server.max_sessions)
        self.runtimes = {r.name: RouteRuntime(r, resolve_window(r, i))
                         for i, r in enumerate(settings.routes)}
        self.recaller = Recaller(store)
        self.turns = TurnLog(store)  # per-turn summaries for the inspector, off the hot path

    async def prepare(self, body: dict[str, Any], route: RouteSettings, tenant: str,
                      session: str) -> Prepared:
        rt = self.runtimes[route.name]
        state = self.sessions.get(tenant, session)
        async with state.lock:
            if not state.loaded:
                state.evicted |= await self.store.evicted_ids(tenant, session)
                state.loaded = True
            return await self._prepare(rt, body, tenant, session, state)

    async def _prepare(self, rt: RouteRuntime, body: dict[str, Any], tenant: str, session: str,
                       state: SessionState) -> Prepared:
        messages: list[dict[str, Any]] = body["messages"]
        conv = rt.chunker.split(messages)
        for p in conv.parts:  # a recall counts as a reference (RWOE's boost)
            extra = state.recall_refs.get(p.chunk.id)
            if extra:
                p.chunk.refs.extend(extra)
        tools_tokens = rt.counter.tools(body.get("tools"))
        budget, recall_budget, reserved = rt.budgets(body, tools_tokens)
        tokens_in = rt.fitter.cost(conv, set()) + tools_tokens
        ctx = PolicyContext(turn=conv.turn, rng=random.Random(f"{session}:{conv.turn}"))
        target = int(budget * rt.route.watermark)
        fit = rt.fitter.fit(conv, state.evicted, budget, target, rt.policy, ctx)
        if fit.tokens > budget:
            raise _too_long(rt, conv, fit, budget, reserved, tools_tokens)
        events = await self._offload(rt, conv, fit, tenant, session)
        state.evicted |= {d.part.chunk.id for d in fit.new}
        out = rt.fitter.assemble(conv, messages, fit.evicted)
        recall = await self.recaller.recall(rt, conv, out, fit.evicted, tenant, session,
                                            recall_budget)
        for r in recall.events:
            state.recall_refs.setdefault(r.chunk_id, []).append(conv.turn)
        if recall.events:
            await self.store.log(recall.events)
        events.extend(recall.events)
        prompt = _fingerprints(rt, conv, fit, recall.tokens)
        ratio = _prefix_ratio(state.last_prompt, prompt)
        state.last_prompt = prompt
        forwarded = {**body, "messages": recall.messages}
        tokens_out = fit.tokens + recall.tokens + tools_tokens
        self.turns.submit(summary(
            rt, conv, fit, recall.events, tenant=tenant, session=session, budget=budget,
            recall_budget=recall_budget, tools=tools_tokens, tokens_in=tokens_in,
            tokens_out=tokens_out, recall_tokens=recall.tokens,
            query=recall.query))
        return Prepared(
            body=forwarded, route=rt.route, tenant=tenant, session=session, turn=conv.turn,
            tokens_in=tokens_in, tokens_out=tokens_out,
            budget=budget, evicted=len(fit.evicted), new_evictions=len(fit.new),
            recalled=len(recall.events), prefix_ratio=ratio, events=events,
        )

    async def _offload(self, rt: RouteRuntime, conv: Conversation, fit: Fit, tenant: str,
                       session: str) -> list[Event]:
        if not fit.new:
            return []
        policy = rt.route.policy
        chunks = [EvictedChunk(tenant, session, d.part.chunk.id, d.part.chunk.turn, d.part.role,
                               d.part.chunk.klass.value, d.part.chunk.tokens, d.part.info.text)
                  for d in fit.new]
        # Durable first: a StoreUnavailable here means nothing was dropped (caller answers 503).
        await self.store.offload(chunks)
        events = [Event(tenant, session, conv.turn, d.part.chunk.id, d.part.chunk.klass.value,
                        d.part.chunk.tokens, round(d.score, 6), "evict", d.reason, policy,
                        preview=_preview(d.part.info.text)) for d in fit.new]
        await self.store.log(events)
        return events


def _preview(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _fingerprints(rt: RouteRuntime, conv: Conversation, fit: Fit,
                  recall_tokens: int) -> list[tuple[str, int]]:
    """(identity, tokens) of each forwarded message, to measure prompt-cache reuse."""
    out = []
    for p in conv.parts:
        cost = rt.fitter.part_cost(conv, p, fit.evicted)
        if cost:
            out.append((p.chunk.id + ("/stub" if p.chunk.id in fit.evicted else ""), cost))
    if recall_tokens and out:
        fp, cost = out[-1]
        out[-1] = (fp + "/recall", cost + recall_tokens)
    return out


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
