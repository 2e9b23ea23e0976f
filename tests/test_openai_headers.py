"""OpenAI's headers cross `/v1/chat/completions` both ways (proxy/upstream/headers.py):
the client's org, project and beta selectors go up (a route's own `extra_headers` win), the
provider's rate-limit state and request id come back. Official openai SDK → real app →
the real OpenAI stand-in, over both transports, streamed and not."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from aiohttp.test_utils import TestClient
from openai.types.chat import ChatCompletion

from proxy.app import init_app
from proxy.config import Settings
from store.base import MemoryStore
from tests.support.app import ClientFactory
from tests.support.openai_server import UpstreamServer

UP_KEY = "sk-up-route-key-0005"
ORG, PROJECT, BETA = "org-9Xb2LqTz7Kd1", "proj_Hk3Vw8Rn2Ys0", "assistants=v2"
RATE = {"x-ratelimit-limit-requests": "10000", "x-ratelimit-limit-tokens": "30000000",
        "x-ratelimit-remaining-requests": "9999", "x-ratelimit-remaining-tokens": "29999982",
        "x-ratelimit-reset-requests": "6ms", "x-ratelimit-reset-tokens": "0s"}
META = {"openai-processing-ms": "231", "openai-organization": "acme-research",
        "openai-version": "2020-10-01"}
UP_ID = "req_5f0c1a7e2b3d4c5e6f708192a3b4c5d6"
# What the upstream answers with: the above, its request id, and headers that stay upstream
SENT_BACK = {**RATE, **META, "x-request-id": UP_ID, "cf-ray": "8f1e2d3c4b5a6978-AMS",
             "set-cookie": "__cf_bm=abc; path=/"}
PROXY_ID = re.compile(r"^req_[0-9a-f]{16}$")  # proxy/handlers.py new_request_id
BOTH = pytest.mark.parametrize("transport", ["direct", "litellm"])
STREAMED = pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])


def _settings(upstream: UpstreamServer, transport: str = "auto", auth: str = "none",
              **extra_headers: str) -> Settings:
    upstream.api_key = UP_KEY
    return Settings(store={"path": ":memory:"}, auth={"mode": auth}, routes=[{
        "name": "t", "model": "t-*", "context_window": 4000, "max_output_tokens": 200,
        "recall": {"enabled": False},
        "upstream": {"model": "openai/gpt-4o", "api_base": upstream.url, "api_key": UP_KEY,
                     "transport": transport, "extra_headers": extra_headers}}])


@pytest.fixture
async def sdk() -> AsyncIterator[Any]:
    """The official client pointed at the proxy, with an org, a project and a beta."""
    made: list[openai.AsyncOpenAI] = []

    def make(client: TestClient[Any, Any], key: str = "sk-client",
             **kw: Any) -> openai.AsyncOpenAI:
        kw = {"organization": ORG, "project": PROJECT,
              "default_headers": {"OpenAI-Beta": BETA}, **kw}
        api = openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key=key,
                                 max_retries=0, **kw)
        made.append(api)
        return api
    yield make
    for api in made:
        await api.close()


async def _chat(api: openai.AsyncOpenAI, stream: bool) -> tuple[Any, str]:
    """One chat turn through the SDK: the raw reply's headers and the text."""
    raw = await api.chat.completions.with_raw_response.create(
        model="t-1", messages=[{"role": "user", "content": "hi"}], stream=stream)
    parsed = raw.parse()
    if isinstance(parsed, ChatCompletion):
        assert not stream
        return raw.headers, parsed.choices[0].message.content or ""
    text = "".join([c.choices[0].delta.content or "" async for c in parsed if c.choices])
    return raw.headers, text


@BOTH
@STREAMED
async def test_chat_carries_openai_headers_both_ways(
        aiohttp_client: ClientFactory, upstream: UpstreamServer, sdk: Any,
        transport: str, stream: bool) -> None:
    client = await aiohttp_client(init_app(_settings(upstream, transport),
                                           store=MemoryStore()))
    upstream.enqueue("hello back", headers=SENT_BACK)
    headers, text = await _chat(sdk(client), stream)
    assert text == "hello back"
    seen = upstream.history[-1].headers
    # up: the client's selectors as it sent them, once each; the route's key, not the client's
    assert seen.getall("OpenAI-Organization") == [ORG]
    assert seen.getall("OpenAI-Project") == [PROJECT]
    assert seen.getall("OpenAI-Beta") == [BETA]
    assert seen["Authorization"] == f"Bearer {UP_KEY}"
    # back: the provider's rate-limit state and meta, its request id under its own name
    for name, value in {**RATE, **META}.items():
        assert headers.get_list(name) == [value], name
    assert headers.get_list("X-Upstream-Request-ID") == [UP_ID]
    assert "cf-ray" not in headers and "set-cookie" not in headers
    # the proxy's own id stays the proxy's, streamed too (it is sent as the stream starts)
    assert PROXY_ID.match(headers["X-Request-ID"]), headers["X-Request-ID"]
    assert UP_ID not in headers.get_list("X-Request-ID")
    assert headers["X-Ctxwarden-Session"]  # the proxy's headers are all still there


@BOTH
@STREAMED
async def test_the_routes_configured_headers_win(
        aiohttp_client: ClientFactory, upstream: UpstreamServer, sdk: Any,
        transport: str, stream: bool) -> None:
    # spelt in another case than the SDK's: HTTP header names are case-insensitive
    settings = _settings(upstream, transport, **{"openai-organization": "org-RouteOwn0001",
                                                 "X-Team": "search"})
    client = await aiohttp_client(init_app(settings, store=MemoryStore()))
    await _chat(sdk(client), stream)
    seen = upstream.history[-1].headers
    assert seen.getall("OpenAI-Organization") == ["org-RouteOwn0001"]
    assert seen.getall("OpenAI-Project") == [PROJECT]  # the route does not set this one
    assert seen.getall("X-Team") == ["search"]


@STREAMED
async def test_in_passthrough_auth_the_callers_key_goes_with_its_org(
        aiohttp_client: ClientFactory, upstream: UpstreamServer, sdk: Any,
        stream: bool) -> None:
    client = await aiohttp_client(init_app(_settings(upstream, auth="passthrough"),
                                           store=MemoryStore()))
    upstream.enqueue("yours", headers=SENT_BACK)
    headers, text = await _chat(sdk(client, key=UP_KEY), stream)
    assert text == "yours"
    seen = upstream.history[-1].headers
    assert seen["Authorization"] == f"Bearer {UP_KEY}"
    assert (seen["OpenAI-Organization"], seen["OpenAI-Project"]) == (ORG, PROJECT)
    assert headers["x-ratelimit-remaining-tokens"] == "29999982"


@BOTH
async def test_nothing_else_of_the_clients_goes_up(
        aiohttp_client: ClientFactory, upstream: UpstreamServer, transport: str) -> None:
    client = await aiohttp_client(init_app(_settings(upstream, transport),
                                           store=MemoryStore()))
    resp = await client.post("/v1/chat/completions", json={
        "model": "t-1", "messages": [{"role": "user", "content": "hi"}]},
        headers={"X-Session-ID": "s-1", "X-Custom-Tracking": "abc", "Cookie": "a=b"})
    assert resp.status == 200
    seen = upstream.history[-1].headers
    for name in ("OpenAI-Organization", "OpenAI-Project", "OpenAI-Beta", "X-Session-ID",
                 "X-Custom-Tracking", "Cookie"):
        assert name not in seen, name
    assert "X-Upstream-Request-ID" not in resp.headers  # the stand-in sent none this time


async def test_pass_through_paths_send_the_routes_headers_over_the_clients(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    settings = _settings(upstream, **{"openai-organization": "org-RouteOwn0001",
                                      "X-Team": "search"})
    client = await aiohttp_client(init_app(settings, store=MemoryStore()))
    resp = await client.post("/v1/embeddings", json={"model": "m", "input": "x"}, headers={
        "OpenAI-Organization": ORG, "OpenAI-Project": PROJECT})
    assert resp.status == 200
    seen = upstream.history[-1].headers
    assert seen.getall("OpenAI-Organization") == ["org-RouteOwn0001"]
    assert seen.getall("OpenAI-Project") == [PROJECT]
    assert seen.getall("X-Team") == ["search"]
