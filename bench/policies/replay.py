"""`ctxwarden bench replay`: real tau-bench trajectories through the proxy's own pipeline,
once per policy, measuring what the proxy really forwards.

Why the pipeline and not the simulator: on real conversations what matters is the proxy's
chunking, classing, tool-group and stub accounting, and those only run inside
`Pipeline.prepare`. The replay itself is the core in bench/replay.py (requests, validity,
the window, reference misses); this module adds the policy variants, recall on a real
store and the row the CLI and docs/policies.md print.

Miss rate = reference misses / references with an earlier source (bench/replay.py says
what a reference is).

Recall on = the real `LanceStore` in a temporary directory with the real local embedder
(sentence-transformers all-MiniLM-L6-v2, `store.embed`), flushed after every request that
evicted, so the background embedder is assumed to keep up; a recalled passage counts as
forwarded.
"""

from __future__ import annotations

import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.policies.experiment import Spec, specs
from bench.replay import PipelineTarget, Replay, ReplayStats, requests_of, route


@dataclass
class ReplayRow(ReplayStats):
    recall: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"policy": self.label, "recall": self.recall, "window": self.window,
                "trajectories": self.trajectories, "requests": self.requests,
                "refused": self.refused, "valid": self.valid, "invalid": self.invalid,
                "over_window": self.over_window, "head_changed": self.head_changed,
                "token_reduction_pct": round(100 * self.reduction, 2),
                "reused_tokens": self.reused, "reference_misses": self.misses,
                "miss_rate_pct": round(100 * self.miss_rate, 2),
                "requests_with_miss": self.requests_with_miss,
                "prefix_ratio": round(self.prefix_ratio, 3)}


class _Counted(Replay):
    """The core, calling `on_request()` (a progress bar) before each request."""

    def __init__(self, target: PipelineTarget, row: ReplayRow, on_request: Any) -> None:
        super().__init__(target, row)
        self.on_request = on_request

    async def send(self, step: int, messages: list[dict[str, Any]], session: str) -> Any:
        if self.on_request is not None:
            self.on_request()
        return await super().send(step, messages, session)


async def replay_policy(trajectories: list[dict[str, Any]], window: int, policy: str | Spec,
                        recall: bool = False, on_request: Any = None) -> ReplayRow:
    """One policy (a registered name or a (label, name, params) variant) over every
    trajectory, in order; `on_request()` is called before each request."""
    label, name, params = specs([policy])[0]
    r = route(window, name, recall, policy_params=params)
    row = ReplayRow(label, window, r.max_output_tokens, recall=recall)
    with tempfile.TemporaryDirectory(prefix="ctxwarden-replay-") as tmp:
        async with PipelineTarget(r, _store(Path(tmp)) if recall else None, recall) as target:
            await _Counted(target, row, on_request).trajectories(trajectories)
    return row


def _store(path: Path) -> Any:
    from store.embed import get_embedder
    from store.lance import LanceStore

    return LanceStore(path / "db", get_embedder("sentence-transformers", "all-MiniLM-L6-v2"))


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
