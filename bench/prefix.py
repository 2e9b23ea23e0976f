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
from bench.replay import ReplayStats, replay, route
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
