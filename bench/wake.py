"""What this machine charges any process for the first work after a pause, proxy or not.

bench/pause.py shows the proxy's own work taking longer after a pause. This measures the
same on work that has nothing of ctxwarden in it, in a fresh interpreter per pause:

- **a bare round trip**: an aiohttp client posting a chat request (one 5,000-word user
  message) to an aiohttp server in the same process, answered with a small JSON reply, as
  the agent-loop section's direct call to its stand-in upstream;
- **memory pages**: one byte written in each 4 KiB page of a 64 MiB buffer (16,384
  pages, all resident before the first pause), and the same on a buffer advised into
  2 MiB pages (`MADV_HUGEPAGE`, 32 of them): the same bytes, 512 times fewer pages.

If the round trip costs several times more after a pause and the 4 KiB pages do too while
the 2 MiB pages barely do, what a pause takes away is per page (address translations
and cached lines), not clock speed, and every process on the machine pays it.

    .venv/bin/python -m bench.wake
"""

from __future__ import annotations

import asyncio
import mmap
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
PAUSES = (0.0, 0.05, 0.3, 1.5)
QUICK_PAUSES = (0.0, 0.3)
ROUNDS = 9  # per probe and pause; the first is dropped (warm-up)
BUFFER = 64 << 20


def _pages(huge: bool) -> tuple[mmap.mmap, Any]:
    import numpy as np

    buf = mmap.mmap(-1, BUFFER, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if huge and hasattr(mmap, "MADV_HUGEPAGE"):
        buf.madvise(mmap.MADV_HUGEPAGE)
    view = np.frombuffer(buf, dtype=np.uint8)
    view[:] = 1  # resident before the first pause
    return buf, view


def _touch(view: Any) -> float:
    started = time.perf_counter()
    view[::4096] += 1
    return (time.perf_counter() - started) * 1000


async def probe(pause: float) -> dict[str, float]:
    """Median milliseconds of each probe after `pause` seconds asleep."""
    import aiohttp
    from aiohttp import web

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"choices": [{"message": {"role": "assistant",
                                                           "content": "ok"}}]})

    app = web.Application(client_max_size=16 << 20)
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    body = orjson.dumps({"model": "m", "messages": [{"role": "user",
                                                     "content": "word " * 5000}]})
    small, huge = _pages(False), _pages(True)
    times: dict[str, list[float]] = {"round trip": [], "4 KiB pages": [], "2 MiB pages": []}
    try:
        async with aiohttp.ClientSession() as http:
            for _ in range(ROUNDS):
                await asyncio.sleep(pause)
                started = time.perf_counter()
                async with http.post(f"http://127.0.0.1:{port}/v1/chat/completions",
                                     data=body,
                                     headers={"Content-Type": "application/json"}) as r:
                    await r.read()
                times["round trip"].append((time.perf_counter() - started) * 1000)
                await asyncio.sleep(pause)
                times["4 KiB pages"].append(_touch(small[1]))
                await asyncio.sleep(pause)
                times["2 MiB pages"].append(_touch(huge[1]))
    finally:
        await runner.cleanup()
    return {k: statistics.median(v[1:]) for k, v in times.items()}


def _child(pause: float) -> dict[str, float]:
    code = ("import asyncio, sys, orjson; from bench.wake import probe; "
            "sys.stdout.buffer.write(orjson.dumps(asyncio.run(probe(float(sys.argv[1])))))")
    done = subprocess.run([sys.executable, "-c", code, str(pause)], cwd=ROOT, check=True,
                          capture_output=True)
    return {str(k): float(v) for k, v in orjson.loads(done.stdout).items()}


def run(quick: bool = False) -> str:
    rows = ["| pause before each | bare round trip p50 (ms) | 16,384 pages of 4 KiB (ms) | "
            "32 pages of 2 MiB, same bytes (ms) |", "|---|---|---|---|"]
    for pause in QUICK_PAUSES if quick else PAUSES:
        got = _child(pause)
        rows.append(f"| {pause:g} s | {got['round trip']:.2f} | {got['4 KiB pages']:.2f} | "
                    f"{got['2 MiB pages']:.2f} |")
    return ("The same pauses on work with nothing of ctxwarden in it (bench/wake.py), a "
            "fresh interpreter per pause: a bare aiohttp round trip in one process, and one "
            "byte written per page of a resident 64 MiB buffer in 4 KiB pages and in 2 MiB "
            "pages.\n\n" + "\n".join(rows))


def main(argv: Any = None) -> None:
    print(run("--quick" in (argv or sys.argv[1:])))


if __name__ == "__main__":
    main()
