"""All 200 tau-bench trajectories, turn by turn, through the real app to a strict upstream.

The upstream counts tokens as OpenAI does and rejects what OpenAI would reject (a prompt
over its window, a tool message without its call, a call without its answer), so "zero
rejected" here means every forwarded request was valid and fit the 3,000-token window.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

from bench.replay import requests_of
from proxy.app import init_app
from proxy.config import Settings
from store.base import MemoryStore
from tests.support.messages import tau_trajectories
from tests.support.openai_server import UpstreamServer

WINDOW, MAX_OUT = 3000, 256


async def test_every_tau_bench_request_is_valid_and_fits(
        aiohttp_client: Callable[..., Awaitable[TestClient[Any, Any]]],
        upstream: UpstreamServer) -> None:
    upstream.context_window = WINDOW - MAX_OUT  # the provider's room for the prompt
    upstream.record = True
    settings = Settings(store={"path": ":memory:"}, routes=[{
        "name": "tau", "model": "gpt-4o*",
        "upstream": {"model": "openai/gpt-4o", "api_base": upstream.url, "api_key": "sk-up"},
        "context_window": WINDOW, "max_output_tokens": MAX_OUT, "recall": {"enabled": False}}])
    client = await aiohttp_client(init_app(settings, store=MemoryStore()))
    sent = forwarded = tokens_in = tokens_out = refused = 0
    for t in tau_trajectories():
        session = f"tau-{t['task_id']}-{t.get('trial', 0)}"
        for msgs in requests_of(t["traj"]):
            sent += 1
            resp = await client.post("/v1/chat/completions", headers={"X-Session-ID": session},
                                     json={"model": "gpt-4o", "messages": msgs})
            if resp.status == 400:
                # The current turn alone (system prompt + the latest tool result) is larger
                # than the window: OpenAI would refuse it too, and says so the same way.
                err = (await resp.json())["error"]
                assert err["code"] == "context_length_exceeded", err
                refused += 1
                continue
            assert resp.status == 200, await resp.text()
            forwarded += 1
            out = upstream.history[-1].body["messages"]
            assert out[0] == msgs[0] and out[1] == msgs[1]  # system + first user, unchanged
            tokens_in += int(resp.headers["X-Ctxwarden-Tokens-In"])
            tokens_out += int(resp.headers["X-Ctxwarden-Tokens-Out"])
            upstream.history.clear()
    assert sent == 2454 and upstream.rejected == 0
    assert forwarded + refused == sent and refused < sent * 0.01
    reduction = 1 - tokens_out / tokens_in
    print(f"\ntau-bench via HTTP: {forwarded} forwarded, {refused} refused, "
          f"token reduction {reduction:.1%}")
    assert reduction > 0.2
