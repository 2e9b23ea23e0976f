"""The same agent traffic through the real app to each provider family (OpenAI direct,
Anthropic and Gemini through LiteLLM): a history over the window is fitted and accepted, tool calls
stay paired, streams arrive, recall works, and upstream errors keep their meaning. Each
fake refuses what its provider refuses, so a 200 here means the provider would take it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from aiohttp.test_utils import TestClient

from store.base import MemoryStore
from tests.support.app import CHAT, STUB, ClientFactory, make, one_route
from tests.support.messages import assistant, long_session, user
from tests.support.providers import FAMILIES, MODELS, Provider, start
from tests.support.trips import ASK, NEEDLE_ID, session
from tests.support.wire import parse_sse

WINDOW, OUTPUT = 4000, 200
_ANTHROPIC_OVERLOADED = {"message": "The upstream is overloaded: Overloaded",
                         "type": "service_unavailable_error", "code": "upstream_overloaded"}
OVERLOADED = {"openai": _ANTHROPIC_OVERLOADED, "anthropic": _ANTHROPIC_OVERLOADED,
              "gemini": {"message": "The upstream answered HTTP 503: The model is overloaded. "
                                    "Please try again later.",
                         "type": "service_unavailable_error", "code": "upstream_unavailable"}}


@pytest.fixture(params=FAMILIES)
async def provider(request: pytest.FixtureRequest) -> AsyncIterator[Provider]:
    prov = await start(request.param, window=WINDOW)
    try:
        yield prov
    finally:
        await prov.server.close()


async def app_for(aiohttp_client: ClientFactory, prov: Provider,
                  **route: Any) -> TestClient[Any, Any]:
    settings = one_route(prov.server.url, name="agent", model="agent-*", upstream=prov.upstream,
                         context_window=WINDOW, max_output_tokens=OUTPUT, **route)
    return await make(aiohttp_client, settings, MemoryStore())


async def post(client: TestClient[Any, Any], msgs: list[dict[str, Any]], sid: str = "s-1",
               **fields: Any) -> Any:
    resp = await client.post(CHAT, headers={"X-Session-ID": sid},
                             json={"model": "agent-1", "messages": msgs, **fields})
    assert resp.status == 200, await resp.text()
    return resp


def sent_limit(prov: Provider) -> Any:
    """What the provider got as output limit: Anthropic must get one, the others the
    client's (none here)."""
    body = prov.history[-1].body
    if prov.family == "gemini":
        return (body.get("generationConfig") or {}).get("max_output_tokens", "-")
    return body.get("max_tokens") if prov.family == "anthropic" else body.get("max_tokens", "-")


async def test_a_history_over_the_window_is_fitted_and_accepted(
        aiohttp_client: ClientFactory, provider: Provider) -> None:
    client = await app_for(aiohttp_client, provider)
    msgs = long_session(14)
    resp = await post(client, msgs)
    assert int(resp.headers["X-Ctxwarden-Tokens-In"]) > 2 * WINDOW  # would be refused whole
    assert int(resp.headers["X-Ctxwarden-Evicted"]) > 0
    got = provider.history[-1].body
    assert provider.rejected == 0 and STUB.search(json.dumps(got))  # stubs, accepted
    calls, results = provider.tool_pairs(got)
    assert calls == list(results)  # each call kept is answered, in order (or both dropped)
    assert calls[-3:] == [provider.call_key(f"call_{i}", "read_file", f'{{"path": "src/m{i}.py"}}')
                          for i in (11, 12, 13)]  # the recent ones are kept
    assert sent_limit(provider) == (OUTPUT if provider.family == "anthropic" else "-")
    assert provider.first_user_text(got) == "Fix the build."  # the goal stays, and the system
    assert "You are an agent." in provider.system_text(got)
    resp = await post(client, [*msgs, assistant("Done."), user("and now?")])
    assert provider.rejected == 0 and provider.last_text(provider.history[-1].body) == "and now?"


async def test_tool_calls_round_trip_through_the_sdk(
        aiohttp_client: ClientFactory, provider: Provider) -> None:
    client = await app_for(aiohttp_client, provider)
    api: Any = openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key="sk-client",
                                  max_retries=0)
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}}}}]
    try:
        provider.enqueue(tool_calls=[{"name": "read_file", "arguments": '{"path": "a.py"}'}])
        msgs: list[dict[str, Any]] = [user("What does a.py define?")]
        first = await api.chat.completions.create(model="agent-1", messages=msgs, tools=tools)
        call = first.choices[0].message.tool_calls[0]
        assert first.choices[0].finish_reason == "tool_calls"
        assert (call.function.name, json.loads(call.function.arguments)) == (
            "read_file", {"path": "a.py"})
        msgs += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "def handler(): ..."}]
        provider.enqueue("a.py defines handler")
        stream = await api.chat.completions.create(model="agent-1", messages=msgs, tools=tools,
                                                   stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    finally:
        await api.close()
    assert text == "a.py defines handler"
    calls, results = provider.tool_pairs(provider.history[-1].body)
    key = provider.call_key(call.id, "read_file", '{"path": "a.py"}')
    assert calls == [key] and results == {key: "def handler(): ..."}
    assert provider.rejected == 0


async def test_a_stream_arrives_as_openai_sse(aiohttp_client: ClientFactory,
                                              provider: Provider) -> None:
    client = await app_for(aiohttp_client, provider)
    provider.enqueue("streamed words arrive in order")
    resp = await post(client, [user("hi")], stream=True, stream_options={"include_usage": True})
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    events = parse_sse(await resp.read())
    assert events[-1] == "[DONE]"
    chunks = [e for e in events[:-1] if e["object"] == "chat.completion.chunk"]
    assert len(chunks) == len(events) - 1
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks
                   if c["choices"]) == "streamed words arrive in order"
    assert any(c.get("usage") for c in chunks)  # include_usage is honoured
    assert provider.streamed(provider.history[-1])


async def test_an_evicted_fact_is_recalled(aiohttp_client: ClientFactory,
                                           provider: Provider) -> None:
    client = await app_for(aiohttp_client, provider, recall={"enabled": True})
    history = session(30)
    for end in range(8, len(history) + 1, 4):  # one request per agent step
        await post(client, history[:end])
    assert NEEDLE_ID not in json.dumps(provider.history[-1].body)  # evicted
    resp = await post(client, [*history, user(ASK)])
    assert resp.headers["X-Ctxwarden-Recalled"] != "0"
    last = provider.last_text(provider.history[-1].body)
    assert ASK in last and NEEDLE_ID in last and "<ctxwarden-recall" in last
    assert provider.rejected == 0


@pytest.mark.parametrize("stream", [False, True])
async def test_upstream_errors_keep_their_meaning(
        aiohttp_client: ClientFactory, provider: Provider, stream: bool) -> None:
    client = await app_for(aiohttp_client, provider)
    body = {"model": "agent-1", "stream": stream, "messages": [user("hi")]}
    provider.enqueue_error(429, headers={"retry-after": "7"})
    resp = await client.post(CHAT, json=body)
    assert resp.status == 429 and resp.headers["Retry-After"] == "7"
    assert (await resp.json())["error"]["code"] == "rate_limit_exceeded"
    provider.enqueue_overloaded()
    resp = await client.post(CHAT, json=body)
    assert resp.status == 503 and "Retry-After" not in resp.headers
    assert await resp.json() == {"error": OVERLOADED[provider.family]}
    provider.set_window(100)  # the provider's window is smaller than the route says
    resp = await client.post(CHAT, json={**body, "messages": [user("word " * 300)]})
    assert resp.status == 400
    err = (await resp.json())["error"]
    assert (err["type"], err["code"]) == ("invalid_request_error", "context_length_exceeded")
    assert (await client.get("/healthz")).status == 200


async def test_custom_tools_on_a_litellm_route_are_a_clear_400(
        aiohttp_client: ClientFactory, provider: Provider) -> None:
    """LiteLLM cannot translate OpenAI's custom tools: said before anything is fitted,
    not a 502 from inside LiteLLM's transform. The direct OpenAI path sends them as is."""
    client = await app_for(aiohttp_client, provider)
    tools = [{"type": "custom", "custom": {"name": "apply_patch"}}]
    resp = await client.post(CHAT, json={"model": "agent-1", "tools": tools,
                                         "messages": [user("patch it")]})
    if provider.family == "openai":
        assert resp.status == 200
        assert provider.history[-1].body["tools"] == tools
        return
    assert resp.status == 400
    assert await resp.json() == {"error": {
        "message": f"Custom tools (type 'custom') are OpenAI's; '{MODELS[provider.family]}' "
                   "is reached through LiteLLM, which cannot translate them. Declare the tool "
                   "as a function, or route this model to an OpenAI-compatible upstream.",
        "type": "invalid_request_error", "param": "tools", "code": "unsupported_tool_type"}}
    assert provider.history == []
