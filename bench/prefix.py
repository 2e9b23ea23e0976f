"""What fitting does to a session: validity, token reduction and the cache-prefix ratio.

The cache-prefix ratio of a request is the share of its tokens that repeat, message for
message, the session's previous forwarded prompt (what a provider's prefix cache can
serve); we average it over every request after a session's first. New messages are
never in the previous prompt, so even forwarding everything untouched scores below 1:
that ceiling ("none, unlimited window") is shown beside the policies. "Truncate every
turn" is the common proxy behaviour: drop the oldest messages until the request fits,
on every request (watermark 1.0, nothing sticky beyond what still does not fit).

    .venv/bin/python -m bench.prefix [--quick]
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from pathlib import Path
from typing import Any

import proxy  # noqa: F401  (offline defaults)
from bench.replay import Message, Meter, ReplayStats, replay, requests_of, route
from bench.sessions import generate
from bench.sessions import requests_of as generated_requests

ROOT = Path(__file__).resolve().parents[1]
TAU = ROOT / "tests" / "data" / "tau-bench-gpt-4o-airline.json"

CONFIGS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("rwoe (watermark 0.85, sticky)", "rwoe", {}),
    ("truncate every turn (watermark 1.0)", "truncate", {"watermark": 1.0}),
    ("lru (watermark 0.85, sticky)", "lru", {}),
)


def generated(quick: bool) -> list[dict[str, Any]]:
    """Generated sessions in tau-bench's shape ({task_id, traj}) so one replayer serves."""
    rng = random.Random(3)
    out = []
    for k in range(4 if quick else 12):
        s = generate(rng, 8000 + 2500 * k)
        # bench.replay takes trajectories and cuts them before each assistant message;
        # generated sessions end on a tool result, so every request is kept.
        assert len(generated_requests(s.messages)) >= 2
        out.append({"task_id": f"gen{k}", "trial": 0, "traj": s.messages})
    return out


MARKS = (0.0, 0.2, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9)


def bounds(trajectories: list[list[Message]], meter: Meter, budget: int,
           marks: tuple[float, ...] = MARKS) -> tuple[float, float, float]:
    """What the workload allows: (ceiling, best, its watermark), as mean cache-prefix
    ratios over every request after a session's first (`requests_of` each trajectory).

    ceiling: a bound no policy that forwards each turn's new messages whole can pass: they
    are never in the previous prompt, and the prompt is at most min(budget, the whole
    history), so a request's ratio is at most 1 - new / that. best: the best, over low
    watermarks `marks`, of dropping the oldest messages after the first (the system
    prompt) once a request is over `budget`, down to mark x budget: the prefix breaks
    right after the first message on each such turn and holds on the others. A policy
    that keeps each turn's new content can beat `best` only by breaking the prefix later
    than the oldest message."""
    def mean(mark: float | None) -> float:
        ratios: list[float] = []
        for traj in trajectories:
            head = meter.tokens(traj[0])
            kept: list[int] = []
            seen, prev = 1, 0
            for msgs in requests_of(traj):
                kept += (meter.tokens(m) for m in msgs[seen:])
                seen, total, broke = len(msgs), head + sum(kept), False
                if mark is None:  # the ceiling: new tokens against the largest prompt
                    if prev:
                        ratios.append(max(0.0, 1 - (total - prev) / min(budget, total)))
                    prev = total
                    continue
                if total > budget:
                    while len(kept) > 1 and head + sum(kept) > mark * budget:
                        kept.pop(0)
                    total, broke = head + sum(kept), True
                if prev:
                    ratios.append((head if broke else prev) / total)
                prev = total
        return sum(ratios) / len(ratios) if ratios else 0.0

    best = max(marks, key=mean)
    return mean(None), mean(best), best


def _row(label: str, s: ReplayStats) -> str:
    return (f"| {label} | {s.requests:,} | {s.invalid} | {s.over_window} | {s.refused} | "
            f"{s.head_changed} | {s.reduction:.1%} | **{s.prefix_ratio:.3f}** |")


async def table(data: list[dict[str, Any]], window: int) -> tuple[str, dict[str, float]]:
    lines = ["| policy | requests | invalid | over window | refused (400) | system/first "
             "user changed | token reduction | cache-prefix ratio |",
             "|---|---|---|---|---|---|---|---|"]
    figures: dict[str, float] = {}
    ceiling = await replay(data, route(10_000_000, policy="none"))
    for label, policy, extra in CONFIGS:
        s = await replay(data, route(window, policy=policy, **extra))
        lines.append(_row(label, s))
        figures[policy] = s.prefix_ratio
    lines.append(_row("ceiling: none, unlimited window", ceiling))
    figures["ceiling"] = ceiling.prefix_ratio
    return "\n".join(lines), figures


async def run(quick: bool = False) -> str:
    tau = json.loads(TAU.read_text())
    if quick:
        tau = tau[:40]
    tau_table, _ = await table(tau, 3000)
    gen_table, _ = await table(generated(quick), 4000)
    return "\n".join([
        f"**tau-bench** ({len(tau)} real airline-agent trajectories, every request an agent "
        "sent, 3,000-token window, 256 reserved for output):", "", tau_table, "",
        "**Generated coding-agent sessions** (bench/sessions.py, 8k–36k tokens of history, "
        "4,000-token window):", "", gen_table])


if __name__ == "__main__":
    print(asyncio.run(run(quick="--quick" in sys.argv)))
