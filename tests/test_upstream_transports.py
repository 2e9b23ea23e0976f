"""Both transports against the fake OpenAI: what goes out is the client's request, what
comes back is OpenAI's JSON or SSE, whole events only, the caller's dicts untouched."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from proxy.upstream import Upstream
from tests.support.messages import user
from tests.support.openai_server import UpstreamServer
from tests.support.upstream import BOTH, KEY, TOOLS, body, route
from tests.support.wire import collect, parse_sse

PASS_THROUGH: dict[str, Any] = {
    "tools": TOOLS, "tool_choice": "auto", "response_format": {"type": "text"}, "n": 1,
    "seed": 7, "stop": ["\nEND"], "user": "u-42", "logprobs": False, "temperature": 0.2,
    "x_vendor_field": {"nested": [1, 2, {"deep": None}]},
    "metadata": {"session_id": "s-1", "team": "search"},  # LiteLLM keeps its own otherwise
}


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
    assert events[-2]["choices"] == []  # OpenAI's usage chunk: no choice, not an empty delta
    assert all(e["choices"] for e in events[:-2])
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


WARM = """
import asyncio, sys
import proxy
from proxy.config import RouteSettings
from proxy.upstream import Upstream
from structlog.testing import capture_logs

def route(name, **up):
    return RouteSettings.model_validate({"name": name, "upstream": up})

routes = {"direct": [route("d", model="openai/gpt-4o", api_base="http://127.0.0.1:9/v1",
                           api_key="k")],
          "litellm": [route("m", model="openai/demo", mock_response="hi"),
                      route("c", model="anthropic/claude-sonnet-4-5", api_key="k",
                            api_base="http://127.0.0.1:9"),
                      route("b", model="bedrock/nope", transport="litellm")]}[sys.argv[1]]
with capture_logs() as logs:
    asyncio.run(Upstream(routes).warm())
print([m for m in ("litellm.responses.mcp.chat_completions_handler",
                   "litellm.litellm_core_utils.default_encoding") if m in sys.modules])
print(sorted({e["event"] for e in logs}))
"""


@pytest.mark.parametrize("routes, loaded, events", [
    ("direct", [], []),  # nothing of LiteLLM's is needed
    ("litellm", ["litellm.responses.mcp.chat_completions_handler",
                 "litellm.litellm_core_utils.default_encoding"],
     ["litellm_warm_up_skipped"]),  # bedrock/nope without credentials: logged, not fatal
])
def test_start_up_loads_what_litellms_first_call_would(routes: str, loaded: list[str],
                                                        events: list[str]) -> None:
    """`ctxwarden serve` warms LiteLLM's routes: a request with tools imported LiteLLM's
    MCP handler and tokenizer on the first call (1-3 s), in a fresh process each case.
    No network: a mock call, which sends nothing."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", WARM, routes], capture_output=True,
                         text=True, timeout=120, check=True).stdout.splitlines()
    assert out[-2:] == [repr(loaded), repr(events)]


class _Reads:
    """An upstream response as `direct._relay` reads it: these reads, then the end."""

    def __init__(self, reads: list[bytes]) -> None:
        self.reads = reads
        self.content = self

    async def iter_any(self) -> Any:
        for r in self.reads:
            yield r

    def close(self) -> None:
        pass


async def test_stream_with_cr_line_endings_is_relayed_event_by_event() -> None:
    """SSE ends lines with CRLF, LF or a lone CR. CR-only events were buffered to the end
    of the stream (nothing reached the client until it ended) and got a second [DONE]."""
    from proxy.upstream.direct import _relay
    from proxy.upstream.transport import Target

    target = Target(transport="direct", provider="openai", model="m", api_base="x",
                    timeout=1.0)
    ev = [b'data: {"n":%d}' % i for i in range(3)]
    reads = [ev[0] + b"\r\r", ev[1] + b"\r", b"\n\r", b"\n" + ev[2] + b"\r\r",
             b"data: [DONE]\r", b"\r"]
    pieces = [p async for p in _relay(target, _Reads(reads))]  # type: ignore[arg-type]
    assert pieces == [ev[0] + b"\n\n", ev[1] + b"\n\n", ev[2] + b"\n\n",
                      b"data: [DONE]\n\n"]
    # a last CR with nothing after it ends the last line
    last = [p async for p in _relay(target, _Reads([ev[0] + b"\r"]))]  # type: ignore[arg-type]
    assert last == [ev[0] + b"\n\n", b"data: [DONE]\n\n"]
