"""The fake Anthropic (tests/support/anthropic_server.py) speaks the Messages API to LiteLLM
and refuses what Anthropic refuses; through it, the upstream boundary sends the output the
proxy reserved as `max_tokens`, and Anthropic's errors keep their meaning."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from proxy.config import RouteSettings
from proxy.errors import (
    ContextLengthExceeded,
    ProxyError,
    RateLimited,
    RouteNotFound,
    UpstreamError,
)
from proxy.upstream import Upstream, UpstreamUnavailable, resolve
from tests.support.anthropic_server import AnthropicServer
from tests.support.messages import assistant, call, filler, tool, user
from tests.support.openai_server import UpstreamServer
from tests.support.upstream import KEY, TOOLS, body
from tests.support.wire import collect, parse_sse

MODEL = "anthropic/claude-sonnet-4-5"
HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}


@pytest.fixture
async def claude() -> AsyncIterator[AnthropicServer]:
    server = await AnthropicServer(api_key=KEY, context_window=4000).start()
    try:
        yield server
    finally:
        await server.close()


def route(url: str, max_output: int = 300, **up: Any) -> RouteSettings:
    return RouteSettings.model_validate({"name": "claude", "max_output_tokens": max_output,
                                         "upstream": {"model": MODEL, "api_base": url,
                                                      "api_key": KEY, **up}})


async def post(server: AnthropicServer, payload: dict[str, Any],
               headers: dict[str, str] = HEADERS) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.post(server.url + "/v1/messages", json=payload,
                                                    headers=headers) as resp:
        return resp.status, await resp.json()


def msgs(*m: dict[str, Any]) -> dict[str, Any]:
    return {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": list(m)}


def use(tid: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "tool_use", "id": tid, "name": "f",
                                              "input": {}}]}


def result(tid: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid,
                                         "content": "ok"}]}


REFUSALS: list[tuple[dict[str, Any], str]] = [
    ({"model": "claude-sonnet-4-5", "messages": [user("hi")]}, "max_tokens: Field required"),
    (msgs(assistant("hello"), user("hi")), 'messages: first message must use the "user" role'),
    (msgs(user("a"), user("b")), 'messages: roles must alternate between "user" and '
                                 '"assistant", but found multiple "user" roles in a row'),
    (msgs(user("a"), use("toolu_1"), user("b")),
     "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: "
     "toolu_1. Each `tool_use` block must have a corresponding `tool_result` block in the "
     "next message."),
    (msgs(user("a"), assistant("x"), result("toolu_9")),
     "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_9. "
     "Each `tool_result` block must have a corresponding `tool_use` block in the previous "
     "message."),
    (msgs(user("word " * 4100)), "prompt is too long: 4105 tokens > 4000 maximum"),
]


@pytest.mark.parametrize(("payload", "message"), REFUSALS)
async def test_the_fake_refuses_what_anthropic_refuses(
        claude: AnthropicServer, payload: dict[str, Any], message: str) -> None:
    status, err = await post(claude, payload)
    assert status == 400 and err["type"] == "error"
    assert err["error"]["type"] == "invalid_request_error"
    assert err["error"]["message"].startswith(message)
    assert claude.served == 0


async def test_the_window_counts_max_tokens_and_the_key_is_checked(
        claude: AnthropicServer) -> None:
    ok = msgs(user("a"), use("toolu_1"), result("toolu_1"))
    assert (await post(claude, ok))[0] == 200
    status, err = await post(claude, {**msgs(user("word " * 1000)), "max_tokens": 3500})
    assert status == 400 and err["error"]["message"].startswith(
        "input length and `max_tokens` exceed context limit: ")
    status, err = await post(claude, ok, headers={**HEADERS, "x-api-key": "sk-wrong"})
    assert (status, err) == (401, {"type": "error", "error": {
        "type": "authentication_error", "message": "invalid x-api-key"}})


async def test_litellm_and_the_fake_agree_on_tools_and_streams(
        up: Upstream, claude: AnthropicServer) -> None:
    r = route(claude.url)
    claude.enqueue(tool_calls=[{"name": "read_file", "arguments": '{"path": "a.py"}'}])
    reply = orjson.loads((await up.complete(r, body(user("read a.py"), tools=TOOLS))).body)
    called = reply["choices"][0]["message"]["tool_calls"][0]
    assert reply["choices"][0]["finish_reason"] == "tool_calls"
    assert (called["function"]["name"], orjson.loads(called["function"]["arguments"])) == (
        "read_file", {"path": "a.py"})
    sent = claude.history[-1]
    assert sent.headers["x-api-key"] == KEY and sent.body["tools"][0]["name"] == "read_file"
    history = [{"role": "system", "content": "Be brief."}, user("read a.py"),
               assistant(None, call(called["id"], "read_file", '{"path": "a.py"}')),
               tool(called["id"], filler(30))]
    claude.enqueue("it defines three handlers")
    events = parse_sse(await collect(await up.open_stream(r, body(*history, stream=True))))
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1]
                   if e["choices"])
    assert text == "it defines three handlers" and events[-1] == "[DONE]"
    got = claude.history[-1].body
    assert got["system"] == [{"type": "text", "text": "Be brief."}]  # top level, not a message
    assert [m["role"] for m in got["messages"]] == ["user", "assistant", "user"]
    assert got["messages"][2]["content"][0]["tool_use_id"] == called["id"]


async def test_max_tokens_is_the_output_the_proxy_reserved(
        up: Upstream, claude: AnthropicServer, upstream: UpstreamServer) -> None:
    """Fitted to window - 300: without `max_tokens` LiteLLM would ask for 64,000 and Anthropic
    would refuse a prompt this close to the window."""
    near = user(filler(1150))  # ~3,450 tokens
    reply = await up.complete(route(claude.url), body(near))
    assert orjson.loads(reply.body)["choices"][0]["message"]["content"].startswith("echo: ")
    assert claude.history[-1].body["max_tokens"] == 300
    await up.complete(route(claude.url), body(near, max_completion_tokens=50))
    assert claude.history[-1].body["max_tokens"] == 50  # the client's limit wins
    openai = RouteSettings.model_validate({"name": "o", "upstream": {
        "model": "openai/gpt-4o-mini", "api_base": upstream.url, "api_key": KEY}})
    await up.complete(openai, body(user("hi")))
    assert "max_tokens" not in upstream.history[-1].body  # OpenAI gets the client's body


ERRORS: list[tuple[int, dict[str, str], type[ProxyError], int, dict[str, Any]]] = [
    (429, {"retry-after": "7"}, RateLimited, 429, {
        "message": "This request would exceed the rate limit for your organization of 30,000 "
                   "input tokens per minute.", "type": "rate_limit_error",
        "code": "rate_limit_exceeded"}),
    (529, {}, UpstreamUnavailable, 503, {
        "message": "The upstream is overloaded: Overloaded", "type": "service_unavailable_error",
        "code": "upstream_overloaded"}),
    (529, {"retry-after": "4"}, UpstreamUnavailable, 503, {
        "message": "The upstream is overloaded: Overloaded", "type": "service_unavailable_error",
        "code": "upstream_overloaded"}),
    (503, {}, UpstreamUnavailable, 503, {
        "message": "The upstream answered HTTP 503: Service unavailable",
        "type": "service_unavailable_error", "code": "upstream_unavailable"}),
    (404, {}, RouteNotFound, 404, {"message": "model: claude-sonnet-4-5",
                                   "type": "invalid_request_error", "code": "model_not_found"}),
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("status", "headers", "cls", "out", "error"), ERRORS)
async def test_anthropic_errors_keep_their_meaning(
        up: Upstream, claude: AnthropicServer, stream: bool, status: int,
        headers: dict[str, str], cls: type[ProxyError], out: int, error: dict[str, Any]) -> None:
    claude.enqueue_error(status, headers=headers)
    with pytest.raises(ProxyError) as exc:
        if stream:
            await up.open_stream(route(claude.url), body(stream=True))
        else:
            await up.complete(route(claude.url), body())
    assert type(exc.value) is cls and exc.value.status == out
    assert exc.value.body() == {"error": error}
    retry = headers.get("retry-after")
    assert exc.value.headers == ({"Retry-After": retry} if retry else {})


@pytest.mark.parametrize("stream", [False, True])
async def test_over_the_window_and_a_wrong_base_path(
        up: Upstream, claude: AnthropicServer, stream: bool) -> None:
    async def call_(r: RouteSettings, b: dict[str, Any]) -> None:
        if stream:
            await up.open_stream(r, {**b, "stream": True})
        else:
            await up.complete(r, b)

    with pytest.raises(ContextLengthExceeded) as ctx:
        await call_(route(claude.url), body(user(filler(4000))))
    assert ctx.value.body()["error"]["code"] == "context_length_exceeded"
    assert ctx.value.message.startswith("prompt is too long: ")
    base = claude.url + "/v1"  # LiteLLM appends /v1/messages itself: /v1/v1/messages
    with pytest.raises(UpstreamError) as exc:
        await call_(route(base), body())
    assert exc.value.status == 502 and exc.value.body() == {"error": {
        "message": f"The upstream at {base} has no such API path (HTTP 404: 404: Not Found); "
                   "check the route's upstream.api_base",
        "type": "upstream_error", "code": "upstream_not_found"}}


@pytest.mark.parametrize("kind", [None, "overloaded_error"])
async def test_a_stream_cut_midway_ends_with_an_error_event(
        up: Upstream, claude: AnthropicServer, kind: str | None) -> None:
    """Dropped, or ended by Anthropic's own `error` event (it overloads mid-stream too:
    said as overloaded, with the code a 529 gets)."""
    claude.enqueue("one two three four five", break_after=5, type=kind)
    events = parse_sse(await collect(await up.open_stream(route(claude.url), body(stream=True))))
    assert "[DONE]" not in events and events[0]["choices"][0]["delta"]["content"] == "one"
    err = events[-1]["error"]
    if kind:
        assert err == {"message": f"The upstream at {claude.url} is overloaded and broke off "
                                  "the stream: Overloaded",
                       "type": "service_unavailable_error", "code": "upstream_overloaded"}
        return
    assert (err["type"], err["code"]) == ("upstream_error", "upstream_stream_broken")
    assert err["message"].startswith(f"The upstream at {claude.url} broke off the stream: "
                                     "Response payload is not completed: <TransferEncodingError")
    assert "Original exception" not in err["message"]


@pytest.mark.parametrize(("model", "limit"), [
    ("anthropic/claude-sonnet-4-5", 300),
    ("bedrock/us.anthropic.claude-sonnet-4-5-20250929-v1:0", 300),
    ("bedrock/converse/anthropic.claude-3-5-haiku-20241022-v1:0", 300),
    ("vertex_ai/claude-sonnet-4-5@20250929", 300),
    ("gemini/gemini-2.5-flash", None),  # no limit required: the body stays the client's
    ("ollama/llama3.1", None),
])
def test_every_claude_route_gets_the_reserved_output_as_its_limit(
        model: str, limit: int | None) -> None:
    target = resolve(route("http://127.0.0.1:9", model=model))
    assert target.transport == "litellm" and target.default_max_tokens == limit


@pytest.mark.parametrize("stream", [False, True])
async def test_a_parameter_anthropic_has_no_place_for_is_a_400_that_says_so(
        up: Upstream, claude: AnthropicServer, stream: bool) -> None:
    """OpenAI parameters LiteLLM cannot send to Anthropic (seed, store, logprobs…): LiteLLM's
    own message points at `litellm.drop_params` and a LiteLLM proxy's settings, which a
    ctxwarden user does not have (found by a black-box session)."""
    sent = body(seed=7, store=True, stream=stream)
    with pytest.raises(ProxyError) as exc:
        if stream:
            await up.open_stream(route(claude.url), sent)
        else:
            await up.complete(route(claude.url), sent)
    assert exc.value.status == 400
    assert exc.value.body() == {"error": {
        "message": "Unsupported parameter(s) for claude-sonnet-4-5 (anthropic, reached "
                   "through LiteLLM): 'seed', 'store'. Remove them from the request, or "
                   "set `drop_params: true` in the route's `upstream` to have them dropped.",
        "type": "invalid_request_error", "code": "unsupported_parameter", "param": "seed"}}
    assert claude.history == []  # nothing went out


async def test_a_route_may_drop_what_anthropic_has_no_place_for(
        up: Upstream, claude: AnthropicServer) -> None:
    """`upstream.drop_params`: the route, not the client, lets LiteLLM drop them."""
    claude.enqueue("fine")
    reply = await up.complete(route(claude.url, drop_params=True),
                              body(user("hi"), seed=7, store=True))
    assert orjson.loads(reply.body)["choices"][0]["message"]["content"] == "fine"
    sent = claude.history[-1].body
    assert "seed" not in sent and "store" not in sent
    with pytest.raises(ProxyError) as exc:  # a client cannot ask for it itself
        await up.complete(route(claude.url), body(user("hi"), seed=7, drop_params=True))
    assert exc.value.status == 400 and exc.value.body()["error"]["param"] == "seed"
