"""Upstream faults through the real app: upstreams that refuse, stall, fail or break, and
clients that leave. Each keeps its meaning for the client and the proxy stays up. (The
transports alone: test_upstream_errors.py; 429 and a streamed disconnect: test_proxy.py.)
"""

from __future__ import annotations

import asyncio

import pytest

from tests.support.app import CHAT, ClientFactory, chat, config, make
from tests.support.openai_server import UpstreamServer
from tests.support.wire import closed_port, parse_sse


@pytest.mark.parametrize("stream", [False, True])
async def test_refused_and_stalled_upstreams_are_502_and_504(
        aiohttp_client: ClientFactory, upstream: UpstreamServer, stream: bool) -> None:
    base = f"http://127.0.0.1:{closed_port()}/v1"
    client = await make(aiohttp_client, config(base))
    resp = await client.post(CHAT, json=chat(stream))
    assert resp.status == 502
    err = (await resp.json())["error"]
    assert (err["type"], err["code"]) == ("upstream_error", "upstream_unreachable")
    assert err["message"].startswith(f"Could not connect to the upstream at {base}: ")
    assert "sk-up" not in err["message"]
    client = await make(aiohttp_client, config(upstream.url, upstream={
        "model": "openai/gpt-4o", "api_base": upstream.url, "api_key": "sk-up",
        "timeout": 0.2}))
    upstream.enqueue("too late", delay=1.5)
    resp = await client.post(CHAT, json=chat(stream))
    assert resp.status == 504
    assert await resp.json() == {"error": {
        "message": f"The upstream at {upstream.url} did not answer within 0.2s.",
        "type": "timeout_error", "code": "upstream_timeout"}}
    assert (await client.get("/healthz")).status == 200


@pytest.mark.parametrize("stream", [False, True])
async def test_upstream_500_is_502_and_503_stays_503(
        aiohttp_client: ClientFactory, upstream: UpstreamServer, stream: bool) -> None:
    client = await make(aiohttp_client, config(upstream.url))
    upstream.enqueue_error(500)
    resp = await client.post(CHAT, json=chat(stream))
    assert resp.status == 502
    assert await resp.json() == {"error": {
        "message": "The upstream answered HTTP 500: The server had an error while processing "
                   "your request. Sorry about that!",
        "type": "upstream_error", "code": "bad_gateway"}}
    upstream.enqueue_error(503, headers={"Retry-After": "20"})  # down for now: retry later
    resp = await client.post(CHAT, json=chat(stream))
    assert resp.status == 503 and resp.headers["Retry-After"] == "20"
    assert await resp.json() == {"error": {
        "message": "The upstream answered HTTP 503: The engine is currently overloaded, please "
                   "try again later",
        "type": "service_unavailable_error", "code": "upstream_unavailable"}}


async def test_streamed_429_keeps_retry_after(aiohttp_client: ClientFactory,
                                              upstream: UpstreamServer) -> None:
    client = await make(aiohttp_client, config(upstream.url))
    upstream.enqueue_error(429, headers={"Retry-After": "12"})
    resp = await client.post(CHAT, json=chat(stream=True))
    assert resp.status == 429 and resp.headers["Retry-After"] == "12"
    assert resp.content_type == "application/json"  # refused before any event was sent
    assert (await resp.json())["error"]["code"] == "rate_limit_exceeded"


@pytest.mark.parametrize("transport", ["direct", "litellm"])
async def test_a_stream_broken_midway_ends_with_an_error_event(
        aiohttp_client: ClientFactory, upstream: UpstreamServer, transport: str) -> None:
    client = await make(aiohttp_client, config(upstream.url, upstream={
        "model": "openai/gpt-4o", "api_base": upstream.url, "api_key": "sk-up",
        "transport": transport}))
    upstream.enqueue("one two three four five six", break_after=3, chunk_delay=0.005)
    resp = await client.post(CHAT, json=chat(stream=True))
    assert resp.status == 200  # the status line had left before the upstream broke
    events = parse_sse(await resp.read())
    assert "[DONE]" not in events
    assert any(e.get("choices") for e in events[:-1])
    last = events[-1]["error"]
    assert (last["type"], last["code"]) == ("upstream_error", "upstream_stream_broken")
    assert (await client.post(CHAT, json=chat())).status == 200  # and the proxy goes on


async def test_a_client_leaving_a_pending_request_cancels_the_upstream_call(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    client = await make(aiohttp_client, config(upstream.url))
    upstream.enqueue("never read", delay=3.0)
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(client.post(CHAT, json=chat()), 0.3)  # hangs up
    assert await upstream.wait_disconnects(1, timeout=2.0)  # the upstream saw it close
    assert upstream.served == 0
