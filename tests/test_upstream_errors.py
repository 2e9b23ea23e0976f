"""Upstream failures keep their meaning (status, OpenAI's error shape, Retry-After), for
both transports, streamed or not, and never carry a key."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

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
from proxy.upstream import Upstream, UpstreamUnavailable, map_upstream_error
from tests.support.messages import tool, user
from tests.support.openai_server import UpstreamServer
from tests.support.upstream import BOTH, KEY, body, route
from tests.support.wire import closed_port, collect, parse_sse

ERROR_CASES: list[tuple[int, type[ProxyError], int, dict[str, Any]]] = [
    (401, AuthenticationFailed, 401, {"type": "authentication_error", "code": "invalid_api_key"}),
    (403, PermissionDenied, 403, {"type": "permission_error",
                                  "code": "unsupported_country_region_territory"}),
    (404, RouteNotFound, 404, {"type": "invalid_request_error", "code": "model_not_found"}),
    (429, RateLimited, 429, {"type": "rate_limit_error", "code": "rate_limit_exceeded"}),
    (500, UpstreamError, 502, {"type": "upstream_error", "code": "bad_gateway"}),
    (503, UpstreamUnavailable, 503, {"type": "service_unavailable_error",
                                     "code": "upstream_unavailable"}),
    (529, UpstreamUnavailable, 503, {"type": "service_unavailable_error",
                                     "code": "upstream_overloaded"}),
]
# what the fake sends beside each status, and what must reach the client
RETRY_AFTER = {429: "7", 503: "30"}


async def refused(up: Upstream, r: Any, stream: bool) -> ProxyError:
    """The error the upstream's reply maps to, streamed or not."""
    with pytest.raises(ProxyError) as exc:
        if stream:
            await up.open_stream(r, body(stream=True))
        else:
            await up.complete(r, body())
    return exc.value


@BOTH
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("status", "cls", "out", "shape"), ERROR_CASES)
async def test_upstream_status_keeps_its_meaning(
        up: Upstream, upstream: UpstreamServer, transport: str, stream: bool, status: int,
        cls: type[ProxyError], out: int, shape: dict[str, Any]) -> None:
    retry = RETRY_AFTER.get(status)
    overloaded = {"type": "overloaded_error", "message": "Overloaded"} if status == 529 else {}
    upstream.enqueue_error(status, headers={"Retry-After": retry} if retry else {}, **overloaded)
    err = await refused(up, route(upstream.url, transport), stream)
    assert type(err) is cls and err.status == out
    assert set(err.body()["error"]) == {"message", "type", "code"}
    assert {k: err.body()["error"][k] for k in ("type", "code")} == shape
    assert err.headers == ({"Retry-After": retry} if retry else {})  # never made up
    message = err.message
    if status == 429:
        assert message.startswith("Rate limit reached for gpt-4o-mini")
    if status == 500:
        assert message == ("The upstream answered HTTP 500: The server had an error while "
                           "processing your request. Sorry about that!")
    if status == 503:
        assert message == ("The upstream answered HTTP 503: The engine is currently overloaded, "
                           "please try again later")
    if status == 529:
        assert message == "The upstream is overloaded: Overloaded"
    if status == 404:
        assert message == "The model `gpt-4o-mini` does not exist or you do not have access to it."


@BOTH
@pytest.mark.parametrize("stream", [False, True])
async def test_a_404_that_is_not_about_the_model_is_a_502(
        up: Upstream, upstream: UpstreamServer, transport: str, stream: bool) -> None:
    """A wrong api_base path: the fake's web server answers its plain "404: Not Found"."""
    base = upstream.url + "/wrong"
    with pytest.raises(UpstreamError) as exc:
        if stream:
            await up.open_stream(route(base, transport), body(stream=True))
        else:
            await up.complete(route(base, transport), body())
    assert type(exc.value) is UpstreamError and exc.value.status == 502
    assert exc.value.body() == {"error": {
        "message": f"The upstream at {base} has no such API path (HTTP 404: 404: Not Found); "
                   "check the route's upstream.api_base",
        "type": "upstream_error", "code": "upstream_not_found"}}


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
    await stream.aclose()
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


def test_a_404_is_model_not_found_only_when_it_names_a_model() -> None:
    page = (b"<html>\r\n<head><title>404 Not Found</title></head>\r\n<body>\r\n<center><h1>404 "
            b"Not Found</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n")
    err = map_upstream_error(status=404, body=page, api_base="https://llm.example/api")
    assert (err.status, err.body()) == (502, {"error": {
        "message": "The upstream at https://llm.example/api has no such API path (HTTP 404: "
                   "404 Not Found); check the route's upstream.api_base",
        "type": "upstream_error", "code": "upstream_not_found"}})
    ollama = map_upstream_error(status=404, body=b'{"error": "model \\"llama3\\" not found, '
                                                 b'try pulling it first"}')
    assert type(ollama) is RouteNotFound and ollama.code == "model_not_found"
    assert ollama.message == 'model "llama3" not found, try pulling it first'
    fastapi = map_upstream_error(status=404, body=b'{"detail": "Not Found"}')
    assert (fastapi.status, fastapi.code) == (502, "upstream_not_found")


def _google(code: int, status: str, message: str, delay: str | None = None) -> bytes:
    details = [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}]
    return orjson.dumps({"error": {"code": code, "message": message, "status": status,
                                   **({"details": details} if delay else {})}})


def test_googles_body_gives_the_true_status_and_the_retry_delay() -> None:
    """LiteLLM raises Gemini's 503 as a 500 and Google sends its 429 delay only in the body."""
    err = map_upstream_error(status=500, body=_google(503, "UNAVAILABLE", "overloaded"))
    assert (type(err), err.message) == (UpstreamUnavailable,
                                        "The upstream answered HTTP 503: overloaded")
    err = map_upstream_error(status=429, body=_google(429, "RESOURCE_EXHAUSTED", "quota", "6.2s"))
    assert (err.body(), err.headers) == ({"error": {
        "message": "quota", "type": "rate_limit_error", "code": "rate_limit_exceeded"}},
        {"Retry-After": "7"})  # whole seconds, rounded up
    err = map_upstream_error(status=429, headers={"Retry-After": "3"},
                             body=_google(429, "RESOURCE_EXHAUSTED", "quota", "60s"))
    assert err.headers == {"Retry-After": "3"}  # a header, when sent, is the provider's word
    err = map_upstream_error(status=401, body=_google(400, "INVALID_ARGUMENT", "API key not "
                                                      "valid. Please pass a valid API key."))
    assert type(err) is AuthenticationFailed  # only LiteLLM's catch-all 500 is corrected
    err = map_upstream_error(status=500, body=b'{"error": {"code": 503, "message": "x"}}')
    assert (type(err), err.status) == (UpstreamError, 502)  # not Google's shape: as sent


@BOTH
@pytest.mark.parametrize("stream", [False, True])
async def test_a_rate_limit_keeps_the_headers_that_say_when_to_retry(
        up: Upstream, upstream: UpstreamServer, transport: str, stream: bool) -> None:
    """OpenAI answers a 429 with its rate-limit state and retry hints, not always a
    Retry-After: a client backing off reads them, as it does on a successful reply."""
    sent = {"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "6.5s",
            "retry-after-ms": "6500", "x-should-retry": "true"}
    upstream.enqueue_error(429, headers=sent)
    err = await refused(up, route(upstream.url, transport), stream)
    assert err.status == 429
    got = {k.lower(): v for k, v in err.headers.items()}
    assert {k: got.get(k) for k in sent} == sent
