"""Proxy overhead: the same request through ctxwarden and straight to the upstream.

Three processes, as in production: the fake upstream (zero latency), `ctxwarden serve`,
and this client. Each iteration sends the request directly and through the proxy (in
alternating order); overhead = the median of the per-iteration differences. Caches are
warm (the same session repeats), which is the steady state of an agent loop. Beside it, a
plain `litellm.acompletion("openai/…")` call to the same upstream, in the same run.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

import proxy  # noqa: F401
from bench.harness import ProxyProcess, free_port, wait_ready

ROOT = Path(__file__).resolve().parents[1]


def payload(n_messages: int, chars: int = 700) -> list[dict[str, Any]]:
    """n messages of ~`chars` each (50 ≈ 35 KB, 1,000 ≈ 870 KB with chars=870)."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."},
                                  {"role": "user", "content": "Start the task."}]
    i = 0
    while len(msgs) < n_messages - 1:
        cid = f"call_{i}"
        body = (f"line {i} " + "lorem ipsum dolor sit amet " * (chars // 27))[:chars]
        msgs += [{"role": "assistant", "content": None, "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": "read", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": cid, "content": body}]
        i += 1
    msgs.append({"role": "user", "content": "What next?"})
    return msgs[:n_messages] if msgs[n_messages - 1]["role"] != "tool" else msgs


async def _time(session: aiohttp.ClientSession, url: str, body: bytes,
                headers: dict[str, str]) -> float:
    t = time.perf_counter()
    async with session.post(url, data=body, headers=headers) as r:
        await r.read()
        if r.status != 200:
            raise RuntimeError(f"{url}: {r.status} {(await r.text())[:300]}")
    return (time.perf_counter() - t) * 1000


async def _first_byte(session: aiohttp.ClientSession, url: str, body: bytes,
                      headers: dict[str, str]) -> float:
    """Milliseconds to the first SSE `data:` line of a streamed reply (then drains it)."""
    t = time.perf_counter()
    async with session.post(url, data=body, headers=headers) as r:
        first = 0.0
        async for line in r.content:
            if not first and line.startswith(b"data:"):
                first = (time.perf_counter() - t) * 1000
        if r.status != 200 or not first:
            raise RuntimeError(f"{url}: {r.status}, no SSE data")
    return first


async def streaming(s: aiohttp.ClientSession, up: str, px: str, iters: int) -> float:
    """Time to first byte through the proxy minus direct, 50 messages, median (ms)."""
    msgs = payload(50, 700)
    body = orjson.dumps({"model": "bench-1", "messages": msgs, "stream": True})
    direct = orjson.dumps({"model": "mock-1", "messages": msgs, "stream": True})
    hdr = {"Content-Type": "application/json", "Authorization": "Bearer sk-test",
           "X-Session-ID": "bench-stream"}
    diffs = []
    for i in range(iters + 5):
        d = await _first_byte(s, f"{up}/chat/completions", direct, hdr)
        p = await _first_byte(s, f"{px}/chat/completions", body, hdr)
        if i >= 5:
            diffs.append(p - d)
    return statistics.median(diffs)


async def run(quick: bool = False) -> tuple[str, dict[str, Any]]:
    up_port, px_port = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    upstream = subprocess.Popen([sys.executable, "-m", "bench.upstream_proc", str(up_port)],
                                cwd=ROOT, env=env)
    tmp = tempfile.mkdtemp(prefix="ctxw-bench-")
    cfg = Path(tmp) / "config.yaml"
    cfg.write_text(f"""
server: {{port: {px_port}}}
store: {{path: {tmp}/lancedb}}
routes:
  - name: bench
    model: "bench-*"
    upstream: {{model: openai/mock-1, api_base: "http://127.0.0.1:{up_port}/v1", api_key: sk-test}}
    context_window: 128000
    max_output_tokens: 512
    policy: rwoe
  - name: small
    model: "small-*"
    upstream: {{model: openai/mock-1, api_base: "http://127.0.0.1:{up_port}/v1", api_key: sk-test}}
    context_window: 32000
    max_output_tokens: 512
    policy: rwoe
""")
    server = ProxyProcess(cfg, px_port).start()
    rows: list[tuple[str, str, float, float, float, float]] = []
    figures: dict[str, Any] = {}
    try:
        await wait_ready(f"http://127.0.0.1:{up_port}/v1/models", upstream)
        await server.ready()
        await asyncio.sleep(10)  # the store loads MiniLM in a thread at start: let it finish
        cases = [("short (3 messages)", 3, "bench-1"), ("50 messages, ~35 KB", 50, "bench-1"),
                 ("1,000 messages, ~870 KB (evicts)", 1000, "small-1")]
        iters = 30 if quick else 200
        import litellm

        async with aiohttp.ClientSession() as s:
            for label, n, model in cases:
                msgs = payload(n, 700 if n <= 50 else 870)
                body = orjson.dumps({"model": model, "messages": msgs})
                direct_body = orjson.dumps({"model": "mock-1", "messages": msgs})
                hdr = {"Content-Type": "application/json", "Authorization": "Bearer sk-test",
                       "X-Session-ID": f"bench-{n}"}
                for _ in range(5):  # warm: caches, sticky decisions, connections
                    await _time(s, f"http://127.0.0.1:{px_port}/v1/chat/completions", body, hdr)
                    await _time(s, f"http://127.0.0.1:{up_port}/v1/chat/completions",
                                direct_body, hdr)
                d_lat, p_lat, diff, l_lat = [], [], [], []
                for i in range(iters if n < 1000 else iters // 4):
                    order = (0, 1) if i % 2 else (1, 0)
                    got = [0.0, 0.0]
                    for which in order:
                        if which == 0:
                            got[0] = await _time(s, f"http://127.0.0.1:{up_port}/v1/chat/"
                                                 "completions", direct_body, hdr)
                        else:
                            got[1] = await _time(s, f"http://127.0.0.1:{px_port}/v1/chat/"
                                                 "completions", body, hdr)
                    d_lat.append(got[0])
                    p_lat.append(got[1])
                    diff.append(got[1] - got[0])
                for _ in range(max(5, iters // 10 if n < 1000 else 5)):
                    t = time.perf_counter()
                    await litellm.acompletion(model="openai/mock-1", messages=msgs,
                                              api_base=f"http://127.0.0.1:{up_port}/v1",
                                              api_key="sk-test")
                    l_lat.append((time.perf_counter() - t) * 1000)
                q = statistics.quantiles(diff, n=20)
                rows.append((label, f"{len(body) / 1024:.0f} KB", statistics.median(d_lat),
                             statistics.median(diff), q[-1], statistics.median(l_lat)))
                figures[label] = {"direct_p50_ms": statistics.median(d_lat),
                                  "overhead_p50_ms": statistics.median(diff),
                                  "overhead_p95_ms": q[-1],
                                  "litellm_p50_ms": statistics.median(l_lat)}
            figures["stream_ttfb_overhead_ms"] = await streaming(
                s, f"http://127.0.0.1:{up_port}/v1", f"http://127.0.0.1:{px_port}/v1", iters)
        figures["proxy_peak_rss_mb"] = server.peak_rss_mb()
    finally:
        server.stop()
        upstream.terminate()
        upstream.wait(timeout=30)
    lines = ["| request | body | direct p50 (ms) | proxy overhead p50 (ms) | overhead p95 (ms) "
             "| plain `litellm.acompletion` p50 (ms) |", "|---|---|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c:.2f} | **{d:.2f}** | {e:.2f} | {f:.2f} |"
              for a, b, c, d, e, f in rows]
    lines.append(f"\nStreaming, 50 messages: first SSE byte through the proxy "
                 f"**{figures['stream_ttfb_overhead_ms']:.2f} ms** after the direct call's "
                 "(median of per-iteration differences; target ≤ 2 ms).")
    lines.append(f"\nProxy peak RSS after the run: {figures['proxy_peak_rss_mb']:.0f} MB "
                 "(the proxy and its embedder process, MiniLM loaded).")
    return "\n".join(lines), figures


if __name__ == "__main__":
    table, _ = asyncio.run(run(quick="--quick" in sys.argv))
    print(table)
