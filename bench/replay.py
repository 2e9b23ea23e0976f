"""Replay real agent trajectories turn by turn through the pipeline.

Each trajectory is an agent session: at every point where the agent called the model
(the next message is the assistant's), the history so far is one request. We check what
a provider would check (valid tool pairs, within the window, system prompt and first user
message unchanged) and measure token reduction and the cache-prefix ratio.
"""

from __future__ import annotations

import asyncio
import statistics
from dataclasses import dataclass, field
from typing import Any

import proxy  # noqa: F401  (offline defaults before litellm/tiktoken)
from proxy.config import RouteSettings, Settings
from proxy.errors import ProxyError
from proxy.pipeline import Pipeline
from proxy.tokens import REPLY_PRIMING
from proxy.validate import validate_messages
from store.base import MemoryStore, Store


def requests_of(traj: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The prefixes an agent sent: every history that precedes an assistant message."""
    return [traj[:i] for i in range(1, len(traj)) if traj[i]["role"] == "assistant"]


@dataclass
class ReplayStats:
    requests: int = 0
    invalid: int = 0
    over_window: int = 0
    refused: int = 0
    head_changed: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    evicting_requests: int = 0
    prefix_ratios: list[float] = field(default_factory=list)

    @property
    def reduction(self) -> float:
        return 1 - self.tokens_out / self.tokens_in if self.tokens_in else 0.0

    @property
    def prefix_ratio(self) -> float:
        return statistics.fmean(self.prefix_ratios) if self.prefix_ratios else 0.0


def route(window: int, policy: str = "rwoe", recall: bool = False, **extra: Any) -> RouteSettings:
    return RouteSettings.model_validate({
        "name": "replay", "model": "*", "upstream": {"model": "openai/gpt-4o"},
        "context_window": window, "max_output_tokens": 256, "policy": policy,
        "recall": {"enabled": recall}, **extra})


async def replay(trajectories: list[dict[str, Any]], r: RouteSettings,
                 store: Store | None = None) -> ReplayStats:
    settings = Settings(routes=[r])
    pipeline = Pipeline(settings, store or MemoryStore())
    counter = pipeline.runtimes[r.name].counter
    stats = ReplayStats()
    for t in trajectories:
        session = f"tau-{t['task_id']}-{t.get('trial', 0)}"
        traj = t["traj"]
        for k, msgs in enumerate(requests_of(traj)):
            stats.requests += 1
            try:
                prepared = await pipeline.prepare({"model": "x", "messages": msgs}, r,
                                                  "bench", session)
            except ProxyError:
                stats.refused += 1
                continue
            out = prepared.body["messages"]
            try:
                validate_messages(out)
            except ProxyError:
                stats.invalid += 1
            sent = REPLY_PRIMING + sum(counter.message(m) for m in out)
            if sent + 256 > r.context_window:  # type: ignore[operator]
                stats.over_window += 1
            if out[0] != traj[0] or out[1] != traj[1]:
                stats.head_changed += 1
            stats.tokens_in += prepared.tokens_in
            stats.tokens_out += sent
            stats.evicting_requests += prepared.new_evictions > 0
            if k:  # the first request of a session has no previous prompt
                stats.prefix_ratios.append(prepared.prefix_ratio)
    return stats


if __name__ == "__main__":
    import json
    import sys

    data = json.load(open(sys.argv[1] if len(sys.argv) > 1 else
                          "tests/data/tau-bench-gpt-4o-airline.json"))
    s = asyncio.run(replay(data, route(3000)))
    print(s, f"reduction={s.reduction:.3f} prefix={s.prefix_ratio:.3f}")
