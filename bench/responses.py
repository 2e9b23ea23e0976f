"""The Responses API through the real proxy: does `/v1/responses` fit as chat does?

The tau-bench trajectories of the agent-loop section (the first 40, a 3,000-token window,
the route's model `gpt-4o`), each replayed twice through one `ctxwarden serve`, in
sessions of their own: as chat requests, and as Responses requests whose `input` carries
the same history as items (the system prompt as `instructions`, an assistant's words as a
message item and its calls as `function_call` items, each result a
`function_call_output`). What reached the stand-in upstream is read back as chat messages
(proxy/items.py) and scored by the same replay (bench/replay.py): reference hits, valid
forwards (the stand-in refuses an input whose calls and outputs do not pair), tokens
forwarded, the cache-prefix ratio, and the server's overhead per request.

    .venv/bin/python -m bench.responses
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

import aiohttp

import proxy  # noqa: F401  (offline defaults)
from bench import agentgen
from bench.agentgen import FACT_KINDS
from bench.agentloop import (
    FULL,
    MAX_OUT,
    QUICK,
    TAU,
    TAU_MAX_OUT,
    TAU_WINDOW,
    WINDOW,
    AgentLoop,
    Facts,
    Phase,
    Plan,
    config,
)
from bench.harness import HttpTarget, ProxyProcess, free_port
from bench.replay import Meter, Replay, ReplayStats, Sent
from proxy.items import to_chat

Message = dict[str, Any]


def as_items(messages: list[Message]) -> tuple[str | None, list[Message]]:
    """A chat history as a Responses body's `instructions` and `input`."""
    instructions = None
    items: list[Message] = []
    for k, m in enumerate(messages):
        role = m.get("role")
        if role == "system" and k == 0:
            instructions = str(m.get("content") or "")
        elif role == "tool":
            items.append({"type": "function_call_output", "call_id": m["tool_call_id"],
                          "output": str(m.get("content") or "")})
        else:
            if m.get("content"):
                items.append({"role": role, "content": m["content"]})
            for c in m.get("tool_calls") or ():
                items.append({"type": "function_call", "call_id": c["id"],
                              "name": c["function"]["name"],
                              "arguments": c["function"]["arguments"]})
    return instructions, items


class ResponsesTarget(HttpTarget):
    """Sends a chat body as a Responses request; what the upstream received, as chat."""

    async def send(self, body: dict[str, Any], session: str) -> Sent:
        instructions, items = as_items(body["messages"])
        req: dict[str, Any] = {"model": self.model, "input": items}
        if instructions is not None:
            req["instructions"] = instructions
        if body.get("tools"):  # chat's nest the function; the Responses API's are flat
            req["tools"] = [{"type": "function", **t["function"]} for t in body["tools"]]
        sent, got = await self.post("/v1/responses", req, session)
        if got is not None:
            sent.messages = to_chat(got).messages
        return sent


Result = tuple[ReplayStats, list[float], Facts, Facts]  # tau, overheads, facts, cold


async def run_both(n: int = 40, plan: Plan = FULL) -> dict[str, Result]:
    from tests.support.openai_server import UpstreamServer

    trajs = json.loads(TAU.read_text())[:n]
    meter = Meter()
    generated = agentgen.sessions(plan.per_kind, plan.seed, WINDOW, plan.lo, plan.hi,
                                  tokens=meter.tokens)
    rng = random.Random(plan.seed)  # the agent-loop section's cold cases, drawn as it does
    pool = [(s, f) for s in generated for f in s.facts]
    rng.shuffle(pool)
    cold = [(agentgen.cold_case(s, f, rng), f, s.tools) for s, f in pool[:plan.cold]]
    upstream = await UpstreamServer(context_window=None, record=True).start()
    tmp = Path(tempfile.mkdtemp(prefix="ctxw-responses-"))
    port = free_port()
    proc = ProxyProcess(config(tmp, port, upstream.url, "rwoe"), port).start()
    out: dict[str, Result] = {}
    try:
        await proc.ready()
        async with aiohttp.ClientSession() as http:
            for label, kind in (("chat", HttpTarget), ("responses", ResponsesTarget)):
                stats = ReplayStats(label, TAU_WINDOW, TAU_MAX_OUT)
                replay = Replay(kind(http, proc.url, upstream, "tau-1"), stats, meter)
                for t in trajs:
                    await replay.session(t["traj"], f"{label}-{t['task_id']}-{t['trial']}")
                # the agent-loop section's back-to-back sessions: facts asked in plain words
                phase = Phase(ReplayStats(label, WINDOW, MAX_OUT))
                for i, s in enumerate(generated):
                    sid = f"gen-{label}-{i}"
                    qs = {(sid, k): f for k, f in s.question_requests().items()}
                    await AgentLoop(kind(http, proc.url, upstream, "loop-1"), phase, meter,
                                    s.tools, questions=qs).session(s.messages, sid)
                # each a whole history sent for the first time, its question last
                whole = Phase(ReplayStats(label, WINDOW, MAX_OUT))
                for i, (msgs, fact, tools) in enumerate(cold):
                    sid = f"cold-{label}-{i}"
                    await AgentLoop(kind(http, proc.url, upstream, "loop-1"), whole, meter,
                                    tools, questions={(sid, len(msgs)): fact}).session(
                                        msgs, sid, [msgs])
                out[label] = (stats, [], phase.facts, whole.facts)
        proc.stop()
        for line in proc.log_lines("request"):
            if line.get("overhead_ms") is not None and line.get("route") == "tau":
                label = "responses" if line.get("endpoint") == "responses" else "chat"
                out[label][1].append(float(line["overhead_ms"]))
    finally:
        proc.stop()
        await upstream.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def run(quick: bool = False) -> str:
    n, plan = (8, QUICK) if quick else (40, FULL)
    got = asyncio.run(run_both(n, plan))
    rows = ["| endpoint | tau-bench requests | reference hit rate | valid forwards | "
            "refused / errors | client tokens forwarded | cache-prefix ratio | "
            "overhead p50 / p95 (ms) | generated sessions: facts kept (tool / user / "
            "constraint) | cold whole histories: evidence kept |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for label, (s, ms, facts, cold) in got.items():
        kinds = " / ".join(f"{facts.kept[k]}/{facts.asked[k]}" for k in FACT_KINDS)
        ms.sort()
        p95 = ms[min(len(ms) - 1, int(0.95 * len(ms)))] if ms else float("nan")
        rows.append(f"| `{'/v1/chat/completions' if label == 'chat' else '/v1/responses'}` | "
                    f"{s.requests} | {s.hit_rate:.3f} | {s.valid} of {s.forwarded} | "
                    f"{s.refused} / {s.errors} | {1 - s.reduction:.3f} | "
                    f"{s.prefix_ratio:.3f} | "
                    f"{statistics.median(ms) if ms else float('nan'):.1f} / {p95:.1f} | "
                    f"{sum(facts.kept.values())}/{facts.total} ({kinds}) | "
                    f"{sum(cold.kept.values())}/{cold.total} |")
    return (f"tau-bench's first {n} trajectories at 3,000 tokens through one `ctxwarden serve` "
            "(RWOE, recall on), each as chat requests and again as Responses requests "
            "carrying the same history as items; what reached the stand-in upstream scored "
            "as chat (bench/responses.py). Overhead is the server's own (`overhead_ms`). "
            "Then the agent-loop section's back-to-back generated sessions (seed "
            f"{plan.seed}, an 8,000-token window, tools declared) through each endpoint: "
            "a fact is kept when its answer reached the upstream on the turn that asks "
            f"it; and its {plan.cold} cold cases, each a whole history new to the proxy "
            "with its question last.\n\n"
            + "\n".join(rows))


if __name__ == "__main__":
    print(run())
