"""`ctxwarden bench replay`: real tau-bench trajectories through the proxy's own pipeline,
once per policy, measuring what the proxy really forwards.

Why the pipeline and not the simulator: on real conversations what matters is the proxy's
chunking, classing, tool-group and stub accounting (proxy/chunking.py, fitting.py,
pipeline.py), and those only run inside `Pipeline.prepare`. Each point where the agent
called the model (the next message is the assistant's) is one request, as in
bench/replay.py, in the session's order, so sticky evictions carry over turn to turn.

Per request we record the tokens in and forwarded, validity (provider rules, the window,
system prompt and first user message unchanged; a request even the tail of which cannot
fit is *refused*, as OpenAI would), and **reference misses**: the ids and rare tokens
(`proxy.analysis.rare_tokens`: numbers, ids, paths) of the assistant message that the
model actually wrote next which occur in an earlier message but in none of the forwarded
ones, i.e. every earlier source was evicted (a stub names the chunk, not its contents).
Miss rate = misses / reused tokens that had an earlier source.

Recall on = the real `LanceStore` in a temporary directory with the real local embedder
(sentence-transformers all-MiniLM-L6-v2, `store.embed`), flushed after every request so
the background embedder is assumed to keep up; a recalled passage counts as forwarded.
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import proxy  # noqa: F401  (offline defaults before litellm/tiktoken)
from bench.policies.experiment import Spec, specs
from bench.replay import requests_of, route
from proxy.analysis import rare_tokens, text_of
from proxy.config import Settings
from proxy.errors import ProxyError
from proxy.pipeline import Pipeline
from proxy.tokens import REPLY_PRIMING
from proxy.validate import validate_messages
from store.base import MemoryStore, Store


@dataclass
class ReplayRow:
    policy: str
    recall: bool
    window: int = 0
    trajectories: int = 0
    requests: int = 0
    refused: int = 0
    invalid: int = 0
    over_window: int = 0
    head_changed: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    reused: int = 0  # reused rare tokens with an earlier source
    misses: int = 0
    requests_with_miss: int = 0

    @property
    def reduction(self) -> float:
        return 1 - self.tokens_out / self.tokens_in if self.tokens_in else 0.0

    @property
    def miss_rate(self) -> float:
        return self.misses / self.reused if self.reused else 0.0

    @property
    def valid(self) -> int:
        forwarded = self.requests - self.refused
        return forwarded - self.invalid - self.over_window - self.head_changed

    def as_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "recall": self.recall, "window": self.window,
                "trajectories": self.trajectories, "requests": self.requests,
                "refused": self.refused, "valid": self.valid, "invalid": self.invalid,
                "over_window": self.over_window, "head_changed": self.head_changed,
                "token_reduction_pct": round(100 * self.reduction, 2),
                "reused_tokens": self.reused, "reference_misses": self.misses,
                "miss_rate_pct": round(100 * self.miss_rate, 2),
                "requests_with_miss": self.requests_with_miss}


class _RareCache:
    """Rare tokens per trajectory message, computed once; a forwarded message that is the
    very same object (the pipeline forwards kept messages as they came) reuses them."""

    def __init__(self, traj: list[dict[str, Any]]) -> None:
        self.traj = traj
        self.index = {id(m): i for i, m in enumerate(traj)}
        self.rare: dict[int, frozenset[str]] = {}

    def __call__(self, msg: dict[str, Any]) -> frozenset[str]:
        i = self.index.get(id(msg))
        if i is None or self.traj[i] is not msg:  # a stub or a message with recall attached
            return rare_tokens(text_of(msg))
        hit = self.rare.get(i)
        if hit is None:
            hit = self.rare[i] = rare_tokens(text_of(msg))
        return hit


async def replay_policy(trajectories: list[dict[str, Any]], window: int, policy: str | Spec,
                        recall: bool = False, on_request: Any = None) -> ReplayRow:
    """One policy (a registered name or a (label, name, params) variant) over every
    trajectory, in order; `on_request()` is called before each request."""
    label, name, params = specs([policy])[0]
    r = route(window, name, recall, policy_params=params)
    with tempfile.TemporaryDirectory(prefix="ctxwarden-replay-") as tmp:
        store = _store(Path(tmp)) if recall else MemoryStore()
        pipeline = Pipeline(Settings(routes=[r]), store)
        try:
            return await _run(trajectories, r, pipeline, store,
                              ReplayRow(label, recall, window, len(trajectories)), on_request)
        finally:
            await pipeline.turns.close()  # the inspector's turn summaries, written lazily
            await store.close()


def _store(path: Path) -> Store:
    from store.embed import get_embedder
    from store.lance import LanceStore

    return LanceStore(path / "db", get_embedder("sentence-transformers", "all-MiniLM-L6-v2"))


async def _run(trajectories: list[dict[str, Any]], r: Any, pipeline: Pipeline, store: Store,
               row: ReplayRow, on_request: Any) -> ReplayRow:
    counter = pipeline.runtimes[r.name].counter
    for t in trajectories:
        session = f"tau-{t['task_id']}-{t.get('trial', 0)}"
        traj: list[dict[str, Any]] = t["traj"]
        rare = _RareCache(traj)
        for msgs in requests_of(traj):
            row.requests += 1
            if on_request is not None:
                on_request()
            try:
                prepared = await pipeline.prepare({"model": "x", "messages": msgs}, r,
                                                  "bench", session)
            except ProxyError:
                row.refused += 1
                continue
            out: list[dict[str, Any]] = prepared.body["messages"]
            try:
                validate_messages(out)
            except ProxyError:
                row.invalid += 1
            sent = REPLY_PRIMING + sum(counter.message(m) for m in out)
            row.over_window += sent + r.max_output_tokens > row.window
            row.head_changed += out[0] != traj[0] or out[1] != traj[1]
            row.tokens_in += prepared.tokens_in
            row.tokens_out += sent
            _misses(row, traj[len(msgs)], msgs, out, rare)
            if prepared.new_evictions:
                await store.flush()
    return row


def _misses(row: ReplayRow, reply: dict[str, Any], history: list[dict[str, Any]],
            out: list[dict[str, Any]], rare: _RareCache) -> None:
    """Count the reply's reused rare tokens that the forwarded request did not contain."""
    used = rare(reply)
    if not used:
        return
    earlier: set[str] = set()
    for m in history:
        earlier |= rare(m) & used
    if not earlier:
        return
    forwarded: set[str] = set()
    for m in out:
        forwarded |= rare(m) & earlier
    missed = len(earlier - forwarded)
    row.reused += len(earlier)
    row.misses += missed
    row.requests_with_miss += missed > 0


def replay(trajectories: list[dict[str, Any]], window: int, policies: list[str | Spec],
           recall: bool, progress: bool = False) -> list[ReplayRow]:
    """Every policy in turn (a fresh pipeline and store each), in one event loop."""
    from bench.policies.report import progress_bar

    total = len(policies) * sum(len(requests_of(t["traj"])) for t in trajectories)
    with progress_bar(total, f"replay (recall {'on' if recall else 'off'})", progress) as bar:
        async def go() -> list[ReplayRow]:
            return [await replay_policy(trajectories, window, p, recall, bar.update)
                    for p in policies]
        return asyncio.run(go())
