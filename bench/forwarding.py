"""Forwarding cost: what each way of sending one chat request upstream costs, same run.

Why: the proxy's overhead budget (≤ 8 ms at 50 messages, ≤ 60 ms at 1,000) is smaller than
LiteLLM's default OpenAI call, so the transport is a measured choice. The fake upstream
runs in its own process (zero delay, no token counting), so its CPU does not land on the
client's event loop; each method runs back to back after a pause (see run()).

    python -m bench.forwarding [--quick]
"""

from __future__ import annotations

import asyncio
import copy
import gc
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import openai
import orjson

import proxy  # noqa: F401  (offline defaults; litellm is imported after it, lazily)
from proxy.config import RouteSettings
from proxy.upstream import Upstream

ROOT = Path(__file__).resolve().parents[1]
SIZES = {3: 0, 50: 35_000, 1000: 870_000}  # messages -> target JSON bytes (0: short chat)
_SERVER = ("import asyncio, sys\n"
           "from tests.support.openai_server import UpstreamServer\n"
           "async def main():\n"
           "    await UpstreamServer(context_window=None, record=False).start(int(sys.argv[1]))\n"
           "    print('ready', flush=True)\n"
           "    await asyncio.Event().wait()\n"
           "asyncio.run(main())\n")

Call = Callable[[], Awaitable[Any]]
KEY = "sk-bench"


def messages(n: int, target_bytes: int) -> list[dict[str, Any]]:
    """An agent loop: system, goal, tool calls and their results, a question; ~target bytes."""
    msgs = _loop(n, 400)
    if target_bytes:  # scale the tool results so the whole body lands on the target size
        pairs = max(1, (n - 3) // 2)
        extra = (target_bytes - len(orjson.dumps({"messages": msgs}))) // pairs
        msgs = _loop(n, max(20, 400 + extra))
    return msgs


def _loop(n: int, result_chars: int) -> list[dict[str, Any]]:
    text = ("The function parse_config in src/app/config.py reads YAML, validates keys and "
            "returns a Settings object; line 42 raises KeyError when 'routes' is missing. ")
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                  {"role": "user", "content": "Fix the failing config test."}]
    i = 0
    while len(msgs) + 2 <= n - 1:
        cid = f"call_{i:04d}"
        msgs.append({"role": "assistant", "content": None, "tool_calls": [{
            "id": cid, "type": "function",
            "function": {"name": "read_file", "arguments": f'{{"path": "src/f{i}.py"}}'}}]})
        body = (f"[{i}] " + text * (result_chars // len(text) + 1))[:result_chars]
        msgs.append({"role": "tool", "tool_call_id": cid, "content": body})
        i += 1
    while len(msgs) < n:
        msgs.append({"role": "user", "content": "What should we change next?"})
    return msgs


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def run(quick: bool = False) -> str:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-c", _SERVER, str(port)], cwd=ROOT,
                            stdout=subprocess.PIPE)
    assert proc.stdout is not None
    await asyncio.get_running_loop().run_in_executor(None, proc.stdout.readline)
    base = f"http://127.0.0.1:{port}/v1"
    session = aiohttp.ClientSession()
    sdk = openai.AsyncOpenAI(base_url=base, api_key=KEY, max_retries=0)
    up = Upstream()
    rows: dict[str, dict[int, tuple[float, float]]] = {}
    sizes: dict[int, int] = {}
    try:
        for n, target in SIZES.items():
            msgs = messages(n, target)
            body = {"model": "gpt-4o-mini", "messages": msgs, "temperature": 0}
            sizes[n] = len(orjson.dumps(body))
            reps = (5 if n >= 1000 else 15) if quick else (30 if n >= 1000 else 100)
            for name, fn in _methods(base, body, session, sdk, up).items():
                # Back to back, after a pause: LiteLLM leaves logging work (tasks, threads)
                # behind each call, which must not be billed to the next method; and
                # interleaving with pauses would measure wake-ups, not forwarding.
                gc.collect()  # the previous method's garbage is not this one's cost
                await asyncio.sleep(0.2)
                samples: list[float] = []
                for i in range(reps + 3):  # 3 warm-up calls
                    t0 = time.perf_counter()
                    result = await fn()
                    took = result if isinstance(result, float) else time.perf_counter() - t0
                    if i >= 3:
                        samples.append(took * 1000)
                rows.setdefault(name, {})[n] = (statistics.median(samples), _pct(samples, 0.95))
    finally:
        await up.close()
        await sdk.close()
        await session.close()
        proc.terminate()
        proc.wait(timeout=10)
    return _table(rows, sizes, quick)


def _methods(base: str, body: dict[str, Any], session: aiohttp.ClientSession,
             sdk: openai.AsyncOpenAI, up: Upstream) -> dict[str, Call]:
    import litellm  # after `proxy` (offline defaults), which the imports above guarantee
    from litellm.llms.openai.chat.gpt_transformation import OpenAIGPTConfig

    url = base + "/chat/completions"
    direct = RouteSettings.model_validate({"name": "d", "upstream": {
        "model": "openai/gpt-4o-mini", "api_base": base, "api_key": KEY}})
    via_litellm = RouteSettings.model_validate({"name": "l", "upstream": {
        "model": "openai/gpt-4o-mini", "api_base": base, "api_key": KEY,
        "transport": "litellm"}})
    msgs = body["messages"]

    async def raw_post() -> None:
        async with session.post(url, data=orjson.dumps(body), headers={
                "Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}) as r:
            orjson.loads(await r.read())

    async def sdk_call() -> None:
        await sdk.chat.completions.create(**body)

    async def litellm_call() -> None:
        await litellm.acompletion(model="openai/gpt-4o-mini", messages=msgs, api_base=base,
                                  api_key=KEY, temperature=0, max_retries=0)

    async def transform() -> float:
        mine = copy.deepcopy(msgs)  # the transform edits in place; the copy is not timed
        t0 = time.perf_counter()
        OpenAIGPTConfig().transform_request("gpt-4o-mini", mine, {"temperature": 0},
                                            {"custom_llm_provider": "openai",
                                             "api_base": base}, {})
        return time.perf_counter() - t0

    async def ours(route: RouteSettings) -> None:
        await up.complete(route, body)

    async def ours_stream(route: RouteSettings) -> None:
        stream: Any = await up.open_stream(route, {**body, "stream": True})
        async for _ in stream:
            pass
        await stream.aclose()

    return {
        "raw aiohttp POST (floor)": raw_post,
        "openai SDK": sdk_call,
        'litellm.acompletion("openai/…")': litellm_call,
        "Upstream direct, non-stream": lambda: ours(direct),
        "Upstream direct, stream": lambda: ours_stream(direct),
        "Upstream litellm, non-stream": lambda: ours(via_litellm),
        "Upstream litellm, stream": lambda: ours_stream(via_litellm),
        "LiteLLM OpenAIGPTConfig.transform_request (CPU only)": transform,
    }


def _table(rows: dict[str, dict[int, tuple[float, float]]], sizes: dict[int, int],
           quick: bool) -> str:
    head = " | ".join(f"{n:,} msgs ({sizes[n] / 1000:.1f} KB) p50 / p95" for n in SIZES)
    lines = [f"Forwarding cost per call, ms (loopback fake upstream in its own process"
             f"{', quick run' if quick else ''})", "",
             f"| method | {head} |", "|---|" + "---|" * len(SIZES)]
    for name, by_n in rows.items():
        cells = " | ".join(f"{by_n[n][0]:.2f} / {by_n[n][1]:.2f}" for n in SIZES)
        lines.append(f"| {name} | {cells} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(asyncio.run(run(quick="--quick" in sys.argv)))
