"""The turns after a history sent whole: what an agent pays once it resumes a conversation.

A client resuming a chat (or a stateless caller) sends the whole history once; its agent
then goes on, turn after turn, the model answering at once (our fake upstream). The cold
request leaves most of the history's passages for the background to index; the turns
after it must not wait for that (proxy/relate.py: only a query with terms it does not
settle catches up). Through `ctxwarden serve`, RWOE on the agent-loop route: each
history new to the proxy, then four turns ending in tool results back to back, then a
user's reply to the agent ("Yes, go ahead": its words are not settled, so it catches up),
then, after a pause (the background's indexing done), one more tool turn. Overhead is the server's
own (`overhead_ms` in its request log: from the body's first byte to the request ready
to forward).
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp

from bench import agentgen
from bench.agentloop import config
from bench.harness import HttpTarget, ProxyProcess, free_port

SIZES = (250, 1000)  # messages: ~50k tokens (the range) and ~200k
REPS, QUICK_REPS = 3, 1
TOOL_TURNS = 4
# The pause after each history's reply: the relevance index's drain (~90 ms of CPU for
# 1,000 messages) is long done; the embedder's is not (minutes: its vectors are a
# refinement nobody waits for), and it goes on beside the next histories, as it would.
SETTLE_S = 3.0
AFTER = "tool turn after a pause"


def _call(cid: str, name: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": "{}"}}]}


def _turns(s: agentgen.Session, rep: int) -> list[tuple[str, list[dict[str, Any]]]]:
    """(label, messages) of every request: the history, the tool turns, the reply."""
    name = s.tools[0]["function"]["name"]
    msgs = s.messages
    out = [("cold", msgs)]
    for j in range(TOOL_TURNS):
        cid = f"next_{rep}_{j}"
        msgs = [*msgs, _call(cid, name), {"role": "tool", "tool_call_id": cid, "content":
                                          f"step {j}: build ok, 14 files, app-{rep}{j}77.tar"}]
        out.append(("first tool turn" if j == 0 else "later tool turns", msgs))
    msgs = [*msgs, {"role": "assistant", "content": "The build passes. Shall I deploy it "
                                                    "to staging now?"},
            {"role": "user", "content": "Yes, go ahead."}]
    out.append(("reply", msgs))
    return out


async def measure(sizes: tuple[int, ...], reps: int) -> dict[int, dict[str, list[float]]]:
    from tests.support.openai_server import UpstreamServer

    upstream = await UpstreamServer(context_window=None, record=True).start()
    tmp = Path(tempfile.mkdtemp(prefix="ctxw-coldnext-"))
    port = free_port()
    proxy = ProxyProcess(config(tmp, port, upstream.url, "rwoe"), port).start()
    order: list[tuple[str, int, str]] = []
    try:
        await proxy.ready()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http:
            target = HttpTarget(http, proxy.url, upstream, "loop-1")
            warm = agentgen.long_history(7, 300)  # tables, tokenizers, the cold worker
            await target.send({"messages": warm.messages, "tools": warm.tools}, "warm")
            await asyncio.sleep(SETTLE_S)
            for size in sizes:
                for rep in range(reps):
                    s = agentgen.long_history(2000 + 10 * size + rep, size)
                    sid = f"coldnext-{size}-{rep}"
                    turns = _turns(s, rep)
                    for label, msgs in turns:
                        order.append((sid, size, label))
                        await target.send({"messages": msgs, "tools": s.tools}, sid)
                    await asyncio.sleep(SETTLE_S)
                    last = turns[-1][1]
                    cid = f"after_{rep}"
                    order.append((sid, size, AFTER))
                    await target.send({"messages": [*last, _call(cid, s.tools[0]["function"][
                        "name"]), {"role": "tool", "tool_call_id": cid, "content": "done"}],
                        "tools": s.tools}, sid)
        proxy.stop()
        logged = [ln for ln in proxy.log_lines()
                  if str(ln.get("session", "")).startswith("coldnext-")]
    finally:
        proxy.stop()
        await upstream.close()
        shutil.rmtree(tmp, ignore_errors=True)
    if len(logged) != len(order):
        raise RuntimeError(f"{len(order)} requests sent, {len(logged)} logged")
    out: dict[int, dict[str, list[float]]] = {}
    for (sid, size, label), ln in zip(order, logged, strict=True):
        if ln["session"] != sid or ln.get("status") != 200:
            raise RuntimeError(f"unexpected log line for {sid}: {ln}")
        out.setdefault(size, {}).setdefault(label, []).append(float(ln["overhead_ms"]))
    return out


def run(quick: bool = False) -> str:
    sizes = SIZES[:1] if quick else SIZES
    got = asyncio.run(measure(sizes, QUICK_REPS if quick else REPS))
    labels = ["cold", "first tool turn", "later tool turns", "reply", AFTER]
    rows = ["| history | " + " | ".join(f"{lb}: p50 / max (ms)" for lb in labels) + " |",
            "|---|" + "---|" * len(labels)]
    for size in sizes:
        cells = [f"{statistics.median(v):.1f} / {max(v):.1f}"
                 for v in (got[size][lb] for lb in labels)]
        rows.append(f"| {size:,} messages | " + " | ".join(cells) + " |")
    reps = QUICK_REPS if quick else REPS
    return (f"Each size {reps} histories (bench/agentgen.py `long_history`, coding sessions "
            f"with smaller outputs), each new to the proxy, then {TOOL_TURNS} tool turns "
            "back to back, a reply, and after a 3 s pause one more tool turn "
            "(bench/coldnext.py). Server-side overhead (its request log's `overhead_ms`)."
            "\n\n" + "\n".join(rows))


def main(argv: Any = None) -> None:
    print(run("--quick" in (argv or sys.argv[1:])))


if __name__ == "__main__":
    main()
