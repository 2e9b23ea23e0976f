"""tau-bench beyond the first 40: every trajectory, in process, per block of 40, and at
other windows.

The agent-loop section replays the first 40 airline trajectories through the app, as
issue 10 measured them; much of the recall and stub work was tuned on those. So the same
route (3,000 tokens, 256 reserved, recall on) also replays all of them through the
pipeline in this process (`bench.replay.PipelineTarget`, lexical recall: no embedder, no
HTTP), and reports each block of 40 apart: the blocks after the first are held out. The
window was chosen there too, so all of them are replayed again at `WINDOWS` (a smaller
one, where the system prompt takes half, and larger ones).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.replay import ReplayStats, replay, route

BLOCK = 40
WINDOWS = (2_500, 4_000, 6_000)


@dataclass
class HeldOut:
    policy: str
    blocks: list[ReplayStats]

    @property
    def reused(self) -> int:
        return sum(s.reused for s in self.blocks)

    @property
    def hit_rate(self) -> float:
        return 1 - sum(s.misses for s in self.blocks) / self.reused if self.reused else 0.0


async def measure(path: Path, policies: tuple[str, ...], window: int, limit: int | None = None
                  ) -> list[HeldOut]:
    trajs: list[dict[str, Any]] = json.loads(path.read_text())[:limit]
    out = []
    for policy in policies:
        r = route(window, policy, recall=True)
        blocks = [await replay(trajs[i:i + BLOCK], r, label=policy)
                  for i in range(0, len(trajs), BLOCK)]
        out.append(HeldOut(policy, blocks))
    return out


def verdict(results: list[HeldOut]) -> list[str]:
    """The issue's tau-bench target read on every trajectory too."""
    rw = next((r for r in results if r.policy == "rwoe"), None)
    if rw is None:
        return []
    others = ", ".join(f"{r.policy} {r.hit_rate:.3f}" for r in results if r is not rw)
    ahead = all(rw.hit_rate > r.hit_rate for r in results if r is not rw)
    n = sum(s.trajectories for s in rw.blocks)
    return [f"- tau-bench reference hits over all {n} trajectories, in process (no "
            f"target of its own: issue 10 measured the first 40): {rw.hit_rate:.3f} "
            f"({'at least' if rw.hit_rate >= 0.9 else 'below'} 0.90; "
            f"{'ahead of' if ahead else 'not ahead of all of'} {others})."]


def table(results: list[HeldOut], window: int) -> str:
    """The per-block hit rates, the best policy's overall figure in bold."""
    if not results:
        return ""
    spans, start = [], 0
    for s in results[0].blocks:
        spans.append(f"{start}-{start + s.trajectories - 1}")
        start += s.trajectories
    n = sum(s.requests for s in results[0].blocks)
    lines = [f"All {start} trajectories ({n:,} requests) at {window:,} tokens, in process "
             "(lexical recall, no embedder, no HTTP; bench/tauall.py): reference hit rate "
             f"over all of them and by block of {BLOCK}. The first block is the one above, "
             "where the recall and stub rules were tuned; the others are held out.", "",
             "| policy | all | " + " | ".join(spans) + " |",
             "|" + "---|" * (2 + len(spans))]
    best = max(r.hit_rate for r in results)
    for r in results:
        cell = f"{r.hit_rate:.3f}"
        lines.append(f"| {r.policy} | {'**' + cell + '**' if r.hit_rate == best else cell} | "
                     + " | ".join(f"{s.hit_rate:.3f}" for s in r.blocks) + " |")
    return "\n".join(lines)


async def windows(path: Path, policies: tuple[str, ...], sizes: tuple[int, ...] = WINDOWS,
                  limit: int | None = None) -> dict[int, list[ReplayStats]]:
    """Every trajectory at each window, per policy (in `policies`' order)."""
    trajs: list[dict[str, Any]] = json.loads(path.read_text())[:limit]
    return {w: [await replay(trajs, route(w, p, recall=True), label=p) for p in policies]
            for w in sizes}


def windows_table(results: dict[int, list[ReplayStats]], policies: tuple[str, ...]) -> str:
    """Reference hits (cache-prefix ratio) per window and policy; each window's best hit
    rate in bold."""
    if not results:
        return ""
    n = next(iter(results.values()))[0].trajectories
    lines = [f"All {n} trajectories at other windows (256 reserved, the same route "
             "otherwise, in process): reference hit rate (cache-prefix ratio).", "",
             "| window | " + " | ".join(policies) + " |", "|" + "---|" * (1 + len(policies))]
    for w, stats in results.items():
        best = max(s.hit_rate for s in stats)
        cells = [(f"**{s.hit_rate:.3f}**" if s.hit_rate == best else f"{s.hit_rate:.3f}")
                 + f" ({s.prefix_ratio:.3f})" for s in stats]
        lines.append(f"| {w:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
