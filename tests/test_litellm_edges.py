"""Odd-but-legal upstream answers through the LiteLLM transport, over the real app: a 200
whose body is not JSON, Anthropic's overload as a stream event, a JSON reply to a streaming
request, SSE comment, `event:` and `id:` lines. Each reaches the client as what happened,
the way the direct transport reports the same answer where it has one."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from proxy.config import Settings
from tests.support.anthropic_server import AnthropicServer
from tests.support.app import CHAT, ClientFactory, chat, config, make
from tests.support.wire import parse_sse

ServerFactory = Callable[..., Awaitable[TestServer]]
GPT, CLAUDE, GEMINI = "openai/gpt-4o", "anthropic/claude-sonnet-4-5", "gemini/gemini-2.5-flash"
COMPLETION = {"id": "c1", "object": "chat.completion", "created": 0, "model": "m", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "the reply"},
     "finish_reason": "stop"}], "usage": {"prompt_tokens": 1, "completion_tokens": 2,
                                          "total_tokens": 3}}
MESSAGE = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
           "content": [{"type": "text", "text": "the reply"}], "stop_reason": "end_turn",
           "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 2}}
OVERLOADED = {"type": "service_unavailable_error", "code": "upstream_overloaded"}


def event(content: str | None = None, finish: str | None = None) -> bytes:
    delta = {"content": content} if content else {}
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
             "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


REPLY = event("A") + event("B") + event(finish="stop") + b"data: [DONE]\n\n"


def via(base: str, model: str = GPT, transport: str = "litellm") -> Settings:
    return config(base, upstream={"model": model, "api_base": base, "api_key": "sk-up",
                                  "transport": transport})


async def answering(aiohttp_server: ServerFactory, body: bytes, content_type: str) -> str:
    """A server that answers every POST 200 with `body` as `content_type`; its base URL."""
    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=body, headers={"Content-Type": content_type})

    app = web.Application()
    app.router.add_post("/{path:.*}", answer)
    server = await aiohttp_server(app)
    return str(server.make_url("/v1"))


@pytest.fixture
async def claude() -> AsyncIterator[AnthropicServer]:
    server = await AnthropicServer().start()
    try:
        yield server
    finally:
        await server.close()


@pytest.mark.parametrize(("model", "transport"), [
    (GPT, "direct"), (GPT, "litellm"), (CLAUDE, "litellm"), (GEMINI, "litellm")])
@pytest.mark.parametrize(("body", "reason"), [
    (b"", "Expecting value: line 1 column 1 (char 0)"),
    (b"{not json", "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
], ids=["empty", "bad-json"])
async def test_a_200_that_is_not_json_is_a_502_that_says_so(
        aiohttp_client: ClientFactory, aiohttp_server: ServerFactory, model: str,
        transport: str, body: bytes, reason: str) -> None:
    """LiteLLM raises it as a 500 (Gemini: a 422, which was a 400 blaming the client)."""
    base = await answering(aiohttp_server, body, "application/json")
    client = await make(aiohttp_client, via(base, model, transport))
    resp = await client.post(CHAT, json=chat())
    assert resp.status == 502
    message = (f"The upstream at {base} answered 200 with a body that is not JSON."
               if transport == "direct" else
               f"The upstream at {base} answered with a body that is not JSON: {reason}")
    assert await resp.json() == {"error": {"message": message, "type": "upstream_error",
                                           "code": "bad_gateway"}}


async def test_anthropic_overloaded_in_a_stream_is_overloaded(
        aiohttp_client: ClientFactory, claude: AnthropicServer) -> None:
    """LiteLLM raises Anthropic's `error` event as a 500 'Overloaded' (the kind dropped)."""
    client = await make(aiohttp_client, via(claude.url, CLAUDE))
    claude.enqueue_error(529)  # not streamed: 503, the reference
    resp = await client.post(CHAT, json=chat())
    overloaded = {"message": "The upstream is overloaded: Overloaded", **OVERLOADED}
    assert resp.status == 503 and await resp.json() == {"error": overloaded}
    claude.enqueue("one two three", break_after=3, type="overloaded_error")  # before any text
    resp = await client.post(CHAT, json=chat(stream=True))
    assert resp.status == 503 and resp.content_type == "application/json"
    assert "Retry-After" not in resp.headers and await resp.json() == {"error": overloaded}
    claude.enqueue("one two three", break_after=5, type="overloaded_error")  # after "one two"
    resp = await client.post(CHAT, json=chat(stream=True))
    assert resp.status == 200  # the status line had left: an error event ends the stream
    events = parse_sse(await resp.read())
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1]) == \
        "one two"
    assert events[-1] == {"error": {
        "message": f"The upstream at {claude.url} is overloaded and broke off the stream: "
                   "Overloaded", **OVERLOADED}}


@pytest.mark.parametrize(("model", "transport", "body", "content_type"), [
    (GPT, "direct", orjson.dumps(COMPLETION), "application/json"),
    (GPT, "litellm", orjson.dumps(COMPLETION), "application/json"),
    (CLAUDE, "litellm", orjson.dumps(MESSAGE), "application/json"),
    (GPT, "litellm", b"<html><title>Welcome</title></html>", "text/html; charset=utf-8")],
    ids=["direct", "litellm", "anthropic", "html"])
async def test_json_to_a_streaming_request_is_a_502(
        aiohttp_client: ClientFactory, aiohttp_server: ServerFactory, model: str,
        transport: str, body: bytes, content_type: str) -> None:
    """Read as SSE, the JSON holds no event: LiteLLM streamed only a finish_reason."""
    base = await answering(aiohttp_server, body, content_type)
    client = await make(aiohttp_client, via(base, model, transport))
    resp = await client.post(CHAT, json=chat(stream=True))
    assert resp.status == 502
    assert await resp.json() == {"error": {
        "message": f"The upstream at {base} answered a streaming request with "
                   f"{content_type}, not an event stream.",
        "type": "upstream_error", "code": "bad_gateway"}}


async def test_sse_comments_and_event_lines_pass(
        aiohttp_client: ClientFactory, aiohttp_server: ServerFactory) -> None:
    """Keep-alive comments, and `event:` lines on data events, are read past."""
    sse = b": keep-alive\n\nevent: message\n" + REPLY[:-14] + b": ping\n\n" + REPLY[-14:]
    base = await answering(aiohttp_server, sse, "text/event-stream")
    client = await make(aiohttp_client, via(base))
    events = parse_sse(await (await client.post(CHAT, json=chat(stream=True))).read())
    assert [e["choices"][0]["delta"].get("content") for e in events[:-1]] == ["A", "B", None]
    assert events[-2]["choices"][0]["finish_reason"] == "stop" and events[-1] == "[DONE]"


@pytest.mark.parametrize("quirk", [b"id: 1\n" + event("A") + b": ping\n\n",
                                   event("A") + b"event: ping\n\n",
                                   event("A") + b"retry: 1000\n\n"],
                         ids=["id-then-comment", "event-alone", "retry-alone"])
async def test_an_event_without_data_is_an_error_that_says_so(
        aiohttp_client: ClientFactory, aiohttp_server: ServerFactory, quirk: bytes) -> None:
    """The openai SDK under LiteLLM's OpenAI path dispatches a block with no data (after an
    `id:`, every later blank line) as an empty event and fails on it; no longer said to be
    the upstream breaking off. The direct transport relays the stream whole."""
    base = await answering(aiohttp_server, quirk + REPLY[len(event("A")):],
                           "text/event-stream")
    client = await make(aiohttp_client, via(base))
    events = parse_sse(await (await client.post(CHAT, json=chat(stream=True))).read())
    assert events[0]["choices"][0]["delta"]["content"] == "A"
    assert events[1:] == [{"error": {
        "message": f"LiteLLM could not read an event from the upstream at {base} as JSON, "
                   "so the stream ends here: Expecting value: line 1 column 1 (char 0)",
        "type": "upstream_error", "code": "upstream_stream_broken"}}]
    direct = await make(aiohttp_client, via(base, transport="direct"))
    raw = await (await direct.post(CHAT, json=chat(stream=True))).read()
    assert raw == quirk + REPLY[len(event("A")):]
