"""The rest of OpenAI's API passes through unchanged (proxy/passthrough.py): official
openai SDK and raw aiohttp → real app → the real OpenAI stand-in."""

from __future__ import annotations

import asyncio
from typing import Any

import openai
import orjson
import pytest
from structlog.testing import capture_logs

from proxy.app import init_app
from proxy.config import Settings
from store.base import MemoryStore
from tests.support.app import ClientFactory, settings_for
from tests.support.openai_server import UpstreamServer
from tests.support.wire import closed_port

UP_KEY = "sk-up-route-key-0004"


async def _client(aiohttp_client: ClientFactory, settings: Settings) -> Any:
    return await aiohttp_client(init_app(settings, store=MemoryStore()))


def _keyed(upstream: UpstreamServer, **auth: Any) -> Settings:
    upstream.api_key = UP_KEY
    s = settings_for(upstream)
    route = s.routes[0].model_dump()
    route["upstream"]["api_key"] = UP_KEY
    return Settings(store={"path": ":memory:"}, auth=auth or {"mode": "none"}, routes=[route])


async def test_embeddings_go_upstream_unchanged_with_the_route_key(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    client = await _client(aiohttp_client, _keyed(upstream))
    api = openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key="sk-client",
                             max_retries=0)
    try:
        with capture_logs() as logs:
            got = await api.embeddings.create(model="text-embedding-3-small",
                                              input=["alpha beta", "gamma"])
    finally:
        await api.close()
    assert [d.index for d in got.data] == [0, 1] and len(got.data[0].embedding) == 8
    assert got.model == "text-embedding-3-small" and got.usage.total_tokens == 3
    seen = upstream.history[-1]
    # the client's model and input as it sent them (the route's model is not swapped in),
    # and the route's key instead of the client's
    assert seen.path == "/v1/embeddings"
    assert seen.body["model"] == "text-embedding-3-small"
    assert seen.body["input"] == ["alpha beta", "gamma"]
    assert seen.headers["Authorization"] == f"Bearer {UP_KEY}"
    line = [e for e in logs if e["event"] == "passthrough"]
    assert [(e["method"], e["path"], e["route"], e["status"]) for e in line] == [
        ("POST", "/v1/embeddings", "test", 200)]


async def test_provider_errors_come_back_as_the_provider_sent_them(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    client = await _client(aiohttp_client, _keyed(upstream))
    resp = await client.post("/v1/embeddings", json={"model": "text-embedding-3-small"})
    assert resp.status == 400
    assert await resp.json() == {"error": {"message": "'input' is a required property",
                                           "type": "invalid_request_error", "param": None,
                                           "code": None}}


async def test_query_and_method_are_kept(aiohttp_client: ClientFactory,
                                         upstream: UpstreamServer) -> None:
    client = await _client(aiohttp_client, _keyed(upstream))
    resp = await client.get("/v1/files?limit=3&purpose=batch",
                            headers={"OpenAI-Beta": "assistants=v2"})
    assert resp.status == 200
    assert await resp.json() == {"object": "list", "data": [], "has_more": False}
    seen = upstream.history[-1]
    assert seen.path == "/v1/files?limit=3&purpose=batch"
    assert seen.headers["OpenAI-Beta"] == "assistants=v2"
    # GET /v1/models/{id} is ours; deleting a fine-tuned model is the provider's
    gone = await client.delete("/v1/models/ft:gpt-4o:acme:x1")
    assert await gone.json() == {"id": "ft:gpt-4o:acme:x1", "object": "model", "deleted": True}
    assert upstream.history[-1].path == "/v1/models/ft:gpt-4o:acme:x1"


async def test_a_stream_is_relayed_byte_for_byte(aiohttp_client: ClientFactory,
                                                 upstream: UpstreamServer) -> None:
    client = await _client(aiohttp_client, _keyed(upstream))
    upstream.enqueue("three little words")
    resp = await client.post("/v1/responses", json={"model": "gpt-4.1", "input": "hi",
                                                    "stream": True})
    assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
    raw = await resp.read()
    events = [e for e in raw.split(b"\n\n") if e]
    assert [e.split(b"\n")[0] for e in events] == [b"event: response.output_text.delta"] * 3
    deltas = [orjson.loads(e.split(b"data: ", 1)[1])["delta"] for e in events]
    assert "".join(deltas) == "three little words"


async def test_a_client_leaving_mid_stream_closes_the_upstream(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    client = await _client(aiohttp_client, _keyed(upstream))
    upstream.enqueue(" ".join(["tok"] * 200), chunk_delay=0.02)
    with capture_logs() as logs:
        resp = await client.post("/v1/responses", json={"model": "gpt-4.1", "input": "hi",
                                                        "stream": True})
        await resp.content.readline()
        resp.close()  # the client walks away mid-stream
        assert await upstream.wait_disconnects(1, timeout=3.0)
        for _ in range(150):  # the handler notices at its next write
            if any(e["event"] == "passthrough_client_disconnected" for e in logs):
                break
            await asyncio.sleep(0.02)
    events = [e["event"] for e in logs]
    assert "passthrough_client_disconnected" in events  # said as what it is, not a fault
    assert "passthrough_broken" not in events and "internal_error" not in events


async def test_caller_key_goes_upstream_in_passthrough_mode(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    client = await _client(aiohttp_client, _keyed(upstream, mode="passthrough"))
    refused = await client.post("/v1/embeddings", json={"model": "m", "input": "x"},
                                headers={"Authorization": "Bearer sk-wrong-caller-key"})
    assert refused.status == 401
    assert (await refused.json())["error"]["code"] == "invalid_api_key"
    assert upstream.history[-1].headers["Authorization"] == "Bearer sk-wrong-caller-key"
    ok = await client.post("/v1/embeddings", json={"model": "m", "input": "x"},
                           headers={"Authorization": f"Bearer {UP_KEY}"})
    assert ok.status == 200


async def test_own_paths_keep_their_methods(aiohttp_client: ClientFactory,
                                            upstream: UpstreamServer) -> None:
    client = await _client(aiohttp_client, settings_for(upstream))
    before = len(upstream.history)
    resp = await client.get("/v1/chat/completions")
    assert resp.status == 405
    assert await resp.json() == {"error": {
        "message": "Method GET is not allowed on /v1/chat/completions",
        "type": "invalid_request_error", "code": "method_not_allowed"}}
    assert resp.headers["Allow"] == "POST"
    assert (await client.delete("/v1/models")).status == 405
    slash = await client.post("/v1/chat/completions/", json={"model": "test-1"})
    assert slash.status == 404 and (await slash.json())["error"]["code"] == "unknown_url"
    assert len(upstream.history) == before  # none went upstream


@pytest.mark.parametrize("path", ["/v1/embeddings", "/v1/files"])
async def test_without_an_openai_wire_route_the_path_is_unknown(
        aiohttp_client: ClientFactory, path: str) -> None:
    settings = Settings(store={"path": ":memory:"}, routes=[{
        "name": "claude", "model": "claude-*", "context_window": 4000,
        "upstream": {"model": "anthropic/claude-sonnet-4-5", "api_key": "sk-ant",
                     "transport": "litellm"}}])
    client = await _client(aiohttp_client, settings)
    resp = await client.post(path, json={"model": "text-embedding-3-small", "input": "x"})
    assert resp.status == 404
    assert await resp.json() == {"error": {
        "message": f"Unknown path: POST {path} (ctxwarden passes the rest of OpenAI's API to "
                   "a route whose provider speaks OpenAI's wire format, and no route does)",
        "type": "invalid_request_error", "code": "unknown_url"}}


async def test_an_unreachable_upstream_is_a_502(aiohttp_client: ClientFactory) -> None:
    port = closed_port()
    settings = settings_for_base(f"http://127.0.0.1:{port}/v1")
    client = await _client(aiohttp_client, settings)
    resp = await client.post("/v1/embeddings", json={"model": "m", "input": "x"})
    assert resp.status == 502
    err = (await resp.json())["error"]
    assert err["type"] == "upstream_error" and f"127.0.0.1:{port}" in err["message"]


def settings_for_base(api_base: str) -> Settings:
    return Settings(store={"path": ":memory:"}, routes=[{
        "name": "t", "model": "t-*", "context_window": 4000,
        "upstream": {"model": "openai/gpt-4o", "api_base": api_base, "api_key": "sk-up"}}])
