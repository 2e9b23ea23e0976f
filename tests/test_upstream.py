"""The upstream boundary against a real fake OpenAI: both transports, the wire, every error."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import Any

import openai
import orjson
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from proxy.config import ConfigError, RouteSettings
from proxy.errors import (
    AuthenticationFailed,
    ContextLengthExceeded,
    InvalidRequest,
    PermissionDenied,
    ProxyError,
    RateLimited,
    RouteNotFound,
    UpstreamError,
    UpstreamTimeout,
)
from proxy.upstream import Upstream, map_upstream_error, resolve
from tests.helpers import assistant, call, tool, user
from tests.support.openai_server import UpstreamServer

KEY = "sk-proj-SECRETSECRET0123456789"
TOOLS: list[dict[str, Any]] = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file", "strict": True,
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                   "required": ["path"], "additionalProperties": False}}}]
PASS_THROUGH: dict[str, Any] = {
    "tools": TOOLS, "tool_choice": "auto", "response_format": {"type": "text"}, "n": 1,
    "seed": 7, "stop": ["\nEND"], "user": "u-42", "logprobs": False, "temperature": 0.2,
    "x_vendor_field": {"nested": [1, 2, {"deep": None}]},
}
BOTH = pytest.mark.parametrize("transport", ["direct", "litellm"])


def route(url: str | None, transport: str = "auto", **up: Any) -> RouteSettings:
    upstream = {"model": "openai/gpt-4o-mini", "api_base": url, "api_key": KEY,
                "transport": transport, **up}
    return RouteSettings.model_validate({"name": "r", "upstream": upstream})


def body(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": "client-model", "messages": list(messages) or [user("hi there")], **fields}


@pytest.fixture
async def up() -> AsyncIterator[Upstream]:
    client = Upstream()
    yield client
    await client.close()


def parse_sse(raw: bytes) -> list[Any]:
    """A strict SSE reader: only `data: ` events, each ended by a blank line."""
    assert raw.endswith(b"\n\n"), raw[-80:]
    events: list[Any] = []
    for block in raw[:-2].split(b"\n\n"):
        assert block.startswith(b"data: ") and b"\n" not in block, block[:200]
        payload = block[len(b"data: "):]
        events.append("[DONE]" if payload == b"[DONE]" else orjson.loads(payload))
    return events


async def collect(stream: AsyncIterator[bytes]) -> bytes:
    pieces = [piece async for piece in stream]
    assert all(p.endswith(b"\n\n") for p in pieces)  # never a split event
    return b"".join(pieces)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


# --- the fake itself, through the official SDK -------------------------------------------
async def test_fake_upstream_speaks_openai_to_the_sdk(upstream: UpstreamServer) -> None:
    # Any: the SDK wants TypedDict messages; these plain dicts are what it sends anyway
    client: Any = openai.AsyncOpenAI(base_url=upstream.url, api_key="sk-test", max_retries=0)
    try:
        upstream.enqueue(tool_calls=[{"name": "read_file", "arguments": '{"path": "a.py"}'}])
        r = await client.chat.completions.create(model="gpt-4o-mini", messages=[user("hi")],
                                                 tools=TOOLS)
        assert r.choices[0].finish_reason == "tool_calls"
        assert r.choices[0].message.tool_calls[0].function.name == "read_file"
        upstream.enqueue("one two three")
        stream = await client.chat.completions.create(
            model="gpt-4o-mini", messages=[user("hi")], stream=True,
            stream_options={"include_usage": True})
        chunks = [c async for c in stream]
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) \
            == "one two three"
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3
        assert [m.id async for m in client.models.list()] == ["gpt-4o-mini", "mock-1"]
        with pytest.raises(openai.BadRequestError) as exc:
            await client.chat.completions.create(
                model="gpt-4o-mini", messages=[user("q"), assistant(None, call("c1")), user("x")])
        assert exc.value.body == {  # OpenAI's own wording for a broken tool-call pair
            "message": "An assistant message with 'tool_calls' must be followed by tool "
                       "messages responding to each 'tool_call_id'. The following "
                       "tool_call_ids did not have response messages: c1",
            "type": "invalid_request_error", "param": "messages.[1].role", "code": None}
        with pytest.raises(openai.BadRequestError) as exc:
            await client.chat.completions.create(model="gpt-4o-mini",
                                                 messages=[user("q"), tool("c9", "orphan")])
        assert "must be a response to a preceeding message" in exc.value.message
        upstream.context_window = 20
        with pytest.raises(openai.BadRequestError) as exc:
            await client.chat.completions.create(model="gpt-4o-mini",
                                                 messages=[user("word " * 50)])
        assert exc.value.code == "context_length_exceeded"
        assert upstream.rejected == 3
    finally:
        await client.close()


# --- happy paths -------------------------------------------------------------------------
@BOTH
async def test_complete_passes_fields_through(up: Upstream, upstream: UpstreamServer,
                                              transport: str) -> None:
    upstream.enqueue("hello back")
    sent = body(**PASS_THROUGH)
    before = orjson.dumps(sent)
    reply = await up.complete(route(upstream.url, transport,
                                    extra_headers={"X-Org": "acme"}), sent)
    assert reply.status == 200
    done = ChatCompletion.model_validate_json(reply.body)
    assert done.choices[0].message.content == "hello back"
    assert reply.usage is not None and reply.usage["total_tokens"] > 0
    got = upstream.history[-1]
    assert got.body["model"] == "gpt-4o-mini"
    for k, v in PASS_THROUGH.items():
        assert got.body[k] == v, k
    assert got.headers["Authorization"] == f"Bearer {KEY}"
    assert got.headers["X-Org"] == "acme"
    assert orjson.dumps(sent) == before  # the caller's dicts are not edited


async def test_direct_sends_the_body_byte_for_byte(up: Upstream,
                                                   upstream: UpstreamServer) -> None:
    sent = body(user("é ✓ \u2028"), **PASS_THROUGH)
    await up.complete(route(upstream.url), sent)
    assert upstream.history[-1].body == {**sent, "model": "gpt-4o-mini"}
    assert up.target(route(upstream.url)).transport == "direct"


@BOTH
async def test_stream_is_openai_sse(up: Upstream, upstream: UpstreamServer,
                                    transport: str) -> None:
    upstream.enqueue("alpha beta gamma delta", chunk_delay=0.001)
    stream = await up.open_stream(route(upstream.url, transport),
                                  body(stream=True, stream_options={"include_usage": True}))
    events = parse_sse(await collect(stream))
    assert events[-1] == "[DONE]"
    chunks = [ChatCompletionChunk.model_validate(e) for e in events[:-1]]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) \
        == "alpha beta gamma delta"
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens > 0
    assert upstream.history[-1].body["stream_options"] == {"include_usage": True}


@BOTH
async def test_stream_reframes_split_events_and_adds_a_missing_done(
        up: Upstream, upstream: UpstreamServer, transport: str) -> None:
    upstream.enqueue("pieces of a stream that arrive in tiny writes", write_size=7, done=False)
    stream = await up.open_stream(route(upstream.url, transport), body(stream=True))
    pieces = [p async for p in stream]
    assert all(p.endswith(b"\n\n") for p in pieces)
    if transport == "direct":
        assert len(pieces) > 2  # relayed as events arrive, not buffered to the end
    events = parse_sse(b"".join(pieces))
    assert events[-1] == "[DONE]"
    assert "".join(ChatCompletionChunk.model_validate(e).choices[0].delta.content or ""
                   for e in events[:-1]) == "pieces of a stream that arrive in tiny writes"


@BOTH
async def test_stream_tool_calls(up: Upstream, upstream: UpstreamServer, transport: str) -> None:
    upstream.enqueue(tool_calls=[{"id": "call_1", "name": "read_file",
                                  "arguments": '{"path": "a.py"}'}])
    stream = await up.open_stream(route(upstream.url, transport),
                                  body(stream=True, tools=TOOLS))
    events = parse_sse(await collect(stream))
    chunks = [ChatCompletionChunk.model_validate(e) for e in events[:-1]]
    deltas = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert deltas[0].id == "call_1" and deltas[0].function is not None
    assert "".join((d.function.arguments or "") for d in deltas if d.function) \
        == '{"path": "a.py"}'
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert upstream.history[-1].body["tools"][0]["function"]["name"] == "read_file"


@pytest.mark.parametrize("stream", [False, True])
async def test_mock_response_route_works_offline(up: Upstream, stream: bool) -> None:
    demo = route(None, model="openai/demo", mock_response="evicted 3 chunks, here you go")
    assert up.target(demo).transport == "litellm"
    if not stream:
        reply = await up.complete(demo, body())
        assert ChatCompletion.model_validate_json(reply.body).choices[0].message.content \
            == "evicted 3 chunks, here you go"
        return
    events = parse_sse(await collect(await up.open_stream(demo, body(stream=True))))
    assert events[-1] == "[DONE]"
    text = "".join(ChatCompletionChunk.model_validate(e).choices[0].delta.content or ""
                   for e in events[:-1])
    assert text == "evicted 3 chunks, here you go"


async def test_hosted_vllm_gets_litellms_tool_mapping(up: Upstream,
                                                      upstream: UpstreamServer) -> None:
    vllm = route(upstream.url, model="hosted_vllm/llama-3")
    await up.complete(vllm, body(tools=TOOLS, seed=1, x_vendor_field=2))
    got = upstream.history[-1].body
    assert got["model"] == "llama-3" and got["seed"] == 1 and got["x_vendor_field"] == 2
    fn = got["tools"][0]["function"]
    assert "strict" not in fn and "additionalProperties" not in fn["parameters"]
    assert TOOLS[0]["function"]["strict"] is True  # the caller's copy is untouched


def test_transport_choice_per_provider() -> None:
    base = "http://127.0.0.1:9/v1"
    for model in ("openai/gpt-4o", "gpt-4o-mini", "custom_openai/x", "hosted_vllm/x",
                  "lm_studio/x", "openai_like/x"):
        assert resolve(route(base, model=model)).transport == "direct", model
    for model in ("anthropic/claude-3-5-sonnet-latest", "ollama/llama3", "groq/llama3-8b"):
        assert resolve(route(base, model=model)).transport == "litellm", model
    assert resolve(route(base, "litellm")).transport == "litellm"
    target = resolve(route(base))
    assert target.url == base + "/chat/completions" and KEY not in repr(target)
    with pytest.raises(ConfigError, match="transport 'litellm'"):
        resolve(route(base, "direct", model="anthropic/claude-3-5-sonnet-latest"))
    with pytest.raises(ConfigError, match="NOT_SET_ANYWHERE"):
        resolve(route(base, api_key=None, api_key_env="NOT_SET_ANYWHERE"))


def test_env_proxy_is_honoured_like_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy",
                 "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert resolve(route("http://10.1.2.3:8000/v1")).proxy is None
    monkeypatch.setenv("HTTP_PROXY", "http://corp-proxy:3128")
    assert resolve(route("http://10.1.2.3:8000/v1")).proxy == "http://corp-proxy:3128"
    monkeypatch.setenv("NO_PROXY", "10.1.2.3,localhost")
    assert resolve(route("http://10.1.2.3:8000/v1")).proxy is None


# --- errors ------------------------------------------------------------------------------
ERROR_CASES: list[tuple[int, type[ProxyError], int, dict[str, Any]]] = [
    (401, AuthenticationFailed, 401, {"type": "authentication_error", "code": "invalid_api_key"}),
    (403, PermissionDenied, 403, {"type": "permission_error",
                                  "code": "unsupported_country_region_territory"}),
    (404, RouteNotFound, 404, {"type": "invalid_request_error", "code": "model_not_found"}),
    (429, RateLimited, 429, {"type": "rate_limit_error", "code": "rate_limit_exceeded"}),
    (500, UpstreamError, 502, {"type": "upstream_error", "code": "bad_gateway"}),
    (503, UpstreamError, 502, {"type": "upstream_error", "code": "bad_gateway"}),
]


@BOTH
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("status", "cls", "out", "shape"), ERROR_CASES)
async def test_upstream_status_keeps_its_meaning(
        up: Upstream, upstream: UpstreamServer, transport: str, stream: bool, status: int,
        cls: type[ProxyError], out: int, shape: dict[str, Any]) -> None:
    upstream.enqueue_error(status, headers={"Retry-After": "7"} if status == 429 else {})
    r = route(upstream.url, transport)
    with pytest.raises(ProxyError) as exc:
        if stream:
            await up.open_stream(r, body(stream=True))
        else:
            await up.complete(r, body())
    err = exc.value
    assert type(err) is cls and err.status == out
    assert set(err.body()["error"]) == {"message", "type", "code"}
    assert {k: err.body()["error"][k] for k in ("type", "code")} == shape
    message = err.message
    if status == 429:
        assert message.startswith("Rate limit reached for gpt-4o-mini")
        assert err.headers == {"Retry-After": "7"}
    if status == 500:
        assert message == ("The upstream answered HTTP 500: The server had an error while "
                           "processing your request. Sorry about that!")
    if status == 404:
        assert message == "The model `gpt-4o-mini` does not exist or you do not have access to it."


@BOTH
async def test_context_length_and_bad_pairs_stay_400(up: Upstream, upstream: UpstreamServer,
                                                     transport: str) -> None:
    r = route(upstream.url, transport)
    with pytest.raises(InvalidRequest) as exc:
        await up.complete(r, body(user("q"), tool("c9", "orphan")))
    assert exc.value.status == 400 and type(exc.value) is InvalidRequest
    assert exc.value.body() == {"error": {
        "message": "Invalid parameter: messages with role 'tool' must be a response to a "
                   "preceeding message with 'tool_calls'.",
        "type": "invalid_request_error", "code": "invalid_request", "param": "messages.[1].role"}}
    upstream.context_window = 30
    with pytest.raises(ContextLengthExceeded) as ctx:
        await up.complete(r, body(user("word " * 100)))
    assert ctx.value.status == 400 and ctx.value.code == "context_length_exceeded"
    assert ctx.value.message.startswith("This model's maximum context length is 30 tokens.")


@BOTH
async def test_connection_refused_is_502_without_key(up: Upstream, transport: str) -> None:
    base = f"http://127.0.0.1:{closed_port()}/v1"
    for call_ in (lambda r: up.complete(r, body()),
                  lambda r: up.open_stream(r, body(stream=True))):
        with pytest.raises(UpstreamError) as exc:
            await call_(route(base, transport))
        assert exc.value.status == 502
        assert exc.value.message.startswith(f"Could not connect to the upstream at {base}")
        assert "SECRET" not in orjson.dumps(exc.value.body()).decode()


@BOTH
async def test_timeout_is_504(up: Upstream, upstream: UpstreamServer, transport: str) -> None:
    r = route(upstream.url, transport, timeout=0.2)
    upstream.enqueue("late", delay=2.0)
    with pytest.raises(UpstreamTimeout) as exc:
        await up.complete(r, body())
    assert exc.value.status == 504 and exc.value.body()["error"]["type"] == "timeout_error"
    upstream.enqueue("late", delay=2.0)
    with pytest.raises(UpstreamTimeout):
        await up.open_stream(r, body(stream=True))


@BOTH
async def test_broken_stream_ends_with_an_error_event(up: Upstream, upstream: UpstreamServer,
                                                      transport: str) -> None:
    upstream.enqueue("a b c d e f g h", break_after=3, chunk_delay=0.005)
    stream = await up.open_stream(route(upstream.url, transport), body(stream=True))
    events = parse_sse(await collect(stream))
    assert "[DONE]" not in events
    assert [e for e in events if "error" in e] == [events[-1]]
    assert events[-1]["error"]["type"] == "upstream_error"
    assert "broke off the stream" in events[-1]["error"]["message"]
    assert any("choices" in e for e in events[:-1])


@BOTH
async def test_aclose_mid_stream_disconnects_the_upstream(
        up: Upstream, upstream: UpstreamServer, transport: str) -> None:
    upstream.enqueue(" ".join(["tok"] * 300), chunk_delay=0.01)
    stream = await up.open_stream(route(upstream.url, transport), body(stream=True))
    await stream.__anext__()
    await stream.aclose()  # type: ignore[attr-defined]
    assert await upstream.wait_disconnects(1, timeout=3.0)
    assert upstream.served == 1


@BOTH
async def test_the_key_never_appears_in_an_error(transport: str) -> None:
    server = await UpstreamServer(api_key="sk-the-right-one-000000").start()
    client = Upstream()
    try:
        with pytest.raises(AuthenticationFailed) as exc:
            await client.complete(route(server.url, transport), body())
        text = orjson.dumps(exc.value.body()).decode() + str(exc.value)
        assert KEY not in text and "SECRET" not in text and "6789" not in text
        assert exc.value.message.startswith("Incorrect API key provided: ***.")
    finally:
        await client.close()
        await server.close()


def test_mapping_scrubs_keys_and_reads_foreign_shapes() -> None:
    err = map_upstream_error(status=400, body=b'{"detail": "bad sk-abc123456 key"}',
                             secrets=["sk-abc123456"])
    assert type(err) is InvalidRequest and "sk-abc" not in err.message
    err = map_upstream_error(status=400, body=b'{"error": "prompt is too long: 210000 tokens"}')
    assert type(err) is ContextLengthExceeded
    err = map_upstream_error(status=429, body=b"slow down", headers={"retry-after": "3"})
    assert type(err) is RateLimited and err.headers == {"Retry-After": "3"}
    err = map_upstream_error(ConnectionRefusedError(111, "Connect call failed"),
                             api_base="http://user:pw@host:1/v1?key=x")
    assert err.status == 502 and "pw" not in err.message and "key=x" not in err.message
