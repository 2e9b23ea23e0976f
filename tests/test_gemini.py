"""The fake Gemini (tests/support/gemini_server.py) speaks generateContent to LiteLLM and
refuses what Gemini refuses; through it, Gemini's errors keep their meaning: the true status
of a 503 that LiteLLM raises as a 500, and the retry delay Google gives only in the body."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from proxy.config import RouteSettings
from proxy.errors import (
    AuthenticationFailed,
    ContextLengthExceeded,
    InvalidRequest,
    ProxyError,
    RateLimited,
    RouteNotFound,
    UpstreamError,
)
from proxy.upstream import Upstream, UpstreamUnavailable
from tests.support.gemini_server import GeminiServer
from tests.support.messages import assistant, call, filler, tool, user
from tests.support.upstream import KEY, TOOLS, body
from tests.support.wire import collect, parse_sse

GEMINI_KEY = "AIzaSyTest-0123456789"


@pytest.fixture
async def gemini() -> AsyncIterator[GeminiServer]:
    server = await GeminiServer(api_key=GEMINI_KEY, context_window=4000).start()
    try:
        yield server
    finally:
        await server.close()


def route(url: str, key: str = GEMINI_KEY) -> RouteSettings:
    return RouteSettings.model_validate({"name": "gem", "upstream": {
        "model": "gemini/gemini-2.5-flash", "api_base": url, "api_key": key}})


async def post(server: GeminiServer, payload: dict[str, Any], query: str = "",
               headers: dict[str, str] | None = None) -> tuple[int, Any]:
    url = f"{server.url}/models/gemini-2.5-flash:generateContent{query}"
    hdrs = {"x-goog-api-key": GEMINI_KEY} if headers is None else headers
    async with aiohttp.ClientSession() as s, s.post(url, json=payload, headers=hdrs) as resp:
        return resp.status, await resp.json()


def turn(role: str, *parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": role, "parts": list(parts)}


def ask(name: str) -> dict[str, Any]:
    return turn("model", {"functionCall": {"name": name, "args": {}}})


def answer(*names: str) -> dict[str, Any]:
    return turn("user", *({"functionResponse": {"name": n, "response": {"ok": 1}}} for n in names))


HI = turn("user", {"text": "hi"})
_AFTER_CALL = ("Please ensure that function response turn comes immediately after a function "
               "call turn.")
REFUSALS: list[tuple[list[dict[str, Any]], str]] = [
    ([], "* GenerateContentRequest.contents: contents is not specified\n"),
    ([HI, turn("assistant", {"text": "x"})], "Please use a valid role: user, model."),
    ([HI, turn("model")], "* GenerateContentRequest.contents[1].parts: contents.parts must not "
                          "be empty.\n"),
    ([turn("user", {"text": ""})], "* GenerateContentRequest.contents[0].parts[0].data: "
                                   "required oneof field 'data' must have one initialized field\n"),
    ([HI, ask("f"), HI], _AFTER_CALL),
    ([HI, ask("f")], _AFTER_CALL),
    ([HI, turn("model", {"text": "x"}), answer("f")], _AFTER_CALL),
    ([HI, ask("f"), answer("f", "f")], "Please ensure that the number of function response "
     "parts is equal to the number of function call parts of the function call turn."),
    ([HI, ask("f"), answer("g")], "Please ensure that the name of each function response part "
     "matches the name of the function call part in the same position of the function call "
     "turn."),
    ([HI, turn("model", {"text": "x"}), ask("f"), answer("f")], "Please ensure that function "
     "call turn comes immediately after a user turn or after a function response turn."),
    ([turn("user", {"text": "word " * 4100})], "The input token count (4105) exceeds the "
                                               "maximum number of tokens allowed (4000)."),
]


@pytest.mark.parametrize(("contents", "message"), REFUSALS)
async def test_the_fake_refuses_what_gemini_refuses(
        gemini: GeminiServer, contents: list[dict[str, Any]], message: str) -> None:
    status, err = await post(gemini, {"contents": contents})
    assert (status, err) == (400, {"error": {"code": 400, "message": message,
                                             "status": "INVALID_ARGUMENT"}})
    assert gemini.served == 0


async def test_the_key_is_checked_in_the_header_or_the_query(gemini: GeminiServer) -> None:
    ok = {"contents": [HI, ask("f"), answer("f"), turn("model", {"text": "done"}), HI]}
    assert (await post(gemini, ok))[0] == 200
    assert (await post(gemini, ok, query=f"?key={GEMINI_KEY}", headers={}))[0] == 200
    status, err = await post(gemini, ok, headers={"x-goog-api-key": "AIza-wrong"})
    assert (status, err["error"]["message"], err["error"]["status"]) == (
        400, "API key not valid. Please pass a valid API key.", "INVALID_ARGUMENT")
    assert err["error"]["details"][0]["reason"] == "API_KEY_INVALID"
    status, err = await post(gemini, ok, headers={})
    assert (status, err["error"]["status"]) == (403, "PERMISSION_DENIED")


async def test_litellm_and_the_fake_agree_on_tools_and_streams(
        up: Upstream, gemini: GeminiServer) -> None:
    gemini.enqueue(tool_calls=[{"name": "read_file", "arguments": '{"path": "a.py"}'}])
    reply = orjson.loads((await up.complete(route(gemini.url),
                                            body(user("read a.py"), tools=TOOLS))).body)
    called = reply["choices"][0]["message"]["tool_calls"][0]
    assert reply["choices"][0]["finish_reason"] == "tool_calls"
    assert (called["function"]["name"], orjson.loads(called["function"]["arguments"])) == (
        "read_file", {"path": "a.py"})
    sent = gemini.history[-1]
    assert sent.path == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert sent.headers["x-goog-api-key"] == GEMINI_KEY
    history = [{"role": "system", "content": "Be brief."}, user("read a.py"),
               assistant(None, call(called["id"], "read_file", '{"path": "a.py"}')),
               tool(called["id"], filler(30))]
    gemini.enqueue("it defines three handlers")
    stream = await up.open_stream(route(gemini.url), body(*history, stream=True))
    events = parse_sse(await collect(stream))
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-1]
                   if e["choices"])
    assert text == "it defines three handlers" and events[-1] == "[DONE]"
    got = gemini.history[-1]
    assert got.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert got.body["system_instruction"] == {"parts": [{"text": "Be brief."}]}
    assert [t["role"] for t in got.body["contents"]] == ["user", "model", "user"]
    assert got.body["contents"][2]["parts"][0]["function_response"]["name"] == "read_file"


_RATE = ("You exceeded your current quota, please check your plan and billing details. For "
         "more information on this error, head to: "
         "https://ai.google.dev/gemini-api/docs/rate-limits.")
ERRORS: list[tuple[int, dict[str, str], type[ProxyError], int, dict[str, Any], str | None]] = [
    (429, {"retry-after": "7"}, RateLimited, 429, {
        "message": _RATE, "type": "rate_limit_error", "code": "rate_limit_exceeded"}, "7"),
    (503, {}, UpstreamUnavailable, 503, {
        "message": "The upstream answered HTTP 503: The model is overloaded. Please try again "
                   "later.", "type": "service_unavailable_error",
        "code": "upstream_unavailable"}, None),
    (500, {}, UpstreamError, 502, {
        "message": "The upstream answered HTTP 500: An internal error has occurred. Please "
                   "retry or report in "
                   "https://developers.generativeai.google/guide/troubleshooting",
        "type": "upstream_error", "code": "bad_gateway"}, None),
    (404, {}, RouteNotFound, 404, {
        "message": "models/gemini-2.5-flash is not found for API version v1beta, or is not "
                   "supported for generateContent. Call ListModels to see the list of "
                   "available models and their supported methods.",
        "type": "invalid_request_error", "code": "model_not_found"}, None),
    (400, {}, InvalidRequest, 400, {
        "message": "Request contains an invalid argument.", "type": "invalid_request_error",
        "code": "invalid_request"}, None),
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("status", "headers", "cls", "out", "error", "retry"), ERRORS)
async def test_gemini_errors_keep_their_meaning(
        up: Upstream, gemini: GeminiServer, stream: bool, status: int, headers: dict[str, str],
        cls: type[ProxyError], out: int, error: dict[str, Any], retry: str | None) -> None:
    """Google's 429 has no Retry-After header: the delay comes from the body's RetryInfo."""
    gemini.enqueue_error(status, headers=headers)
    with pytest.raises(ProxyError) as exc:
        if stream:
            await up.open_stream(route(gemini.url), body(stream=True))
        else:
            await up.complete(route(gemini.url), body())
    assert type(exc.value) is cls and exc.value.status == out
    assert exc.value.body() == {"error": error}
    assert exc.value.headers == ({"Retry-After": retry} if retry else {})


@pytest.mark.parametrize("stream", [False, True])
async def test_a_wrong_key_and_over_the_window(up: Upstream, gemini: GeminiServer,
                                               stream: bool) -> None:
    async def call_(r: RouteSettings, b: dict[str, Any]) -> None:
        if stream:
            await up.open_stream(r, {**b, "stream": True})
        else:
            await up.complete(r, b)

    with pytest.raises(AuthenticationFailed) as auth:
        await call_(route(gemini.url, key=KEY), body())
    assert auth.value.message == "API key not valid. Please pass a valid API key."
    assert KEY not in str(auth.value.body())
    with pytest.raises(ContextLengthExceeded) as ctx:
        await call_(route(gemini.url), body(user(filler(4000))))
    assert ctx.value.body()["error"]["code"] == "context_length_exceeded"
    assert ctx.value.message.startswith("The input token count (")


@pytest.mark.parametrize("kind", [None, "UNAVAILABLE"])
async def test_a_stream_cut_midway_ends_with_an_error_event(
        up: Upstream, gemini: GeminiServer, kind: str | None) -> None:
    """Dropped, or ended by Google's own error object in the stream."""
    gemini.enqueue("one two three four five", break_after=2, type=kind)
    events = parse_sse(await collect(await up.open_stream(route(gemini.url), body(stream=True))))
    assert "[DONE]" not in events and events[0]["choices"][0]["delta"]["content"] == "one"
    err = events[-1]["error"]
    assert (err["type"], err["code"]) == ("upstream_error", "upstream_stream_broken")
    head = f"The upstream at {gemini.url} broke off the stream: "
    if kind:
        assert err["message"] == (head + "UNAVAILABLE - The model is overloaded. Please try "
                                  "again later.")
    else:
        assert err["message"].startswith(head + "Response payload is not completed: ")
    assert "Original exception" not in err["message"]
