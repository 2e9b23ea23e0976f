"""The proxy end to end: official openai SDK → real aiohttp app → real upstream server."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import openai
import orjson
import pytest
from aiohttp.test_utils import TestClient
from structlog.testing import capture_logs

from proxy.app import init_app
from store.base import MemoryStore
from tests.support.app import ClientFactory, settings_for
from tests.support.messages import assistant, filler, long_session, user
from tests.support.openai_server import UpstreamServer


@pytest.fixture
async def make_client(aiohttp_client: ClientFactory,
                      upstream: UpstreamServer) -> Callable[..., Awaitable[TestClient[Any, Any]]]:
    async def make(**route: Any) -> TestClient[Any, Any]:
        app = init_app(settings_for(upstream, **route), store=MemoryStore())
        return await aiohttp_client(app, server_kwargs={"handler_cancellation": True})
    return make


# Any: the SDK wants TypedDict messages; the plain dicts here are what it sends anyway.
SDK = Callable[[TestClient[Any, Any]], Any]


@pytest.fixture
async def sdk() -> Any:
    """The official client pointed at the proxy; every client made is closed afterwards."""
    made: list[openai.AsyncOpenAI] = []

    def make(client: TestClient[Any, Any]) -> openai.AsyncOpenAI:
        api = openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key="sk-client",
                                 max_retries=0)
        made.append(api)
        return api
    yield make
    for api in made:
        await api.close()


TOOLS = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]


async def test_non_stream_with_tools_passes_every_field_through(
        make_client: Any, upstream: UpstreamServer, sdk: SDK) -> None:
    client = await make_client()
    upstream.enqueue(tool_calls=[{"name": "read_file", "arguments": '{"path": "a.py"}'}])
    raw = await sdk(client).chat.completions.with_raw_response.create(
        model="test-1", messages=[{"role": "user", "content": "read a.py"}], tools=TOOLS,
        tool_choice="auto", seed=7, user="u1", stop=["\n\n"], n=1, temperature=0.2,
        response_format={"type": "text"}, extra_body={"vendor_flag": {"x": 1}})
    resp = raw.parse()
    assert resp.choices[0].message.tool_calls[0].function.name == "read_file"
    got = upstream.history[-1].body
    assert got["tools"] == TOOLS and got["tool_choice"] == "auto" and got["seed"] == 7
    assert got["user"] == "u1" and got["stop"] == ["\n\n"] and got["vendor_flag"] == {"x": 1}
    assert got["response_format"] == {"type": "text"} and got["model"] == "gpt-4o"
    assert got["messages"] == [{"role": "user", "content": "read a.py"}]
    h = raw.headers
    assert h["x-ctxwarden-session"].startswith("s-")
    assert int(h["x-ctxwarden-tokens-in"]) == int(h["x-ctxwarden-tokens-out"]) > 0
    assert h["x-ctxwarden-evicted"] == "0" and h["x-ctxwarden-recalled"] == "0"


async def test_stream_arrives_in_openai_wire_format(make_client: Any, upstream: UpstreamServer,
                                                    sdk: SDK) -> None:
    client = await make_client()
    upstream.enqueue("streamed words arrive in order")
    stream = await sdk(client).chat.completions.create(
        model="test-1", messages=[{"role": "user", "content": "hi"}], stream=True,
        stream_options={"include_usage": True})
    text, usage = "", None
    async for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        usage = chunk.usage or usage
    assert text == "streamed words arrive in order" and usage is not None
    assert upstream.history[-1].body["stream_options"] == {"include_usage": True}
    resp = await client.post("/v1/chat/completions", json={
        "model": "test-1", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    body = await resp.text()
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    assert body.startswith("data: {") and body.endswith("data: [DONE]\n\n")


async def test_long_session_is_fitted_valid_and_sticky(make_client: Any,
                                                       upstream: UpstreamServer,
                                                       sdk: SDK) -> None:
    upstream.context_window = 4000 - 200  # the provider's room for the prompt
    client = await make_client()
    api = sdk(client)
    msgs = long_session(14)
    first = await api.chat.completions.with_raw_response.create(
        model="test-1", messages=msgs, extra_headers={"X-Session-ID": "sess-1"})
    assert int(first.headers["x-ctxwarden-evicted"]) > 0
    headers = first.headers
    assert int(headers["x-ctxwarden-tokens-out"]) < int(headers["x-ctxwarden-tokens-in"])
    sent1 = upstream.history[-1].body["messages"]
    assert sent1[0] == msgs[0] and sent1[1] == msgs[1] and sent1[-1] == msgs[-1]
    msgs2 = msgs + [assistant("Done with that."), user("and now?")]
    await api.chat.completions.create(model="test-1", messages=msgs2,
                                      extra_headers={"X-Session-ID": "sess-1"})
    sent2 = upstream.history[-1].body["messages"]
    assert sent2[: len(sent1)] == sent1  # sticky: the prefix the provider cached is intact
    assert upstream.rejected == 0


async def test_permanent_over_window_is_context_length_exceeded(make_client: Any) -> None:
    client = await make_client(context_window=500)
    resp = await client.post("/v1/chat/completions", json={
        "model": "test-1", "messages": [{"role": "system", "content": filler(600)},
                                        {"role": "user", "content": "hi"}]})
    assert resp.status == 400
    err = (await resp.json())["error"]
    assert err["type"] == "invalid_request_error" and err["code"] == "context_length_exceeded"
    assert err["param"] == "messages" and "cannot fit the context window of route 'test'" in \
        err["message"]


@pytest.mark.parametrize("limit", ["max_tokens", "max_completion_tokens"])
async def test_an_output_limit_that_leaves_no_room_says_so(make_client: Any,
                                                           limit: str) -> None:
    """It read "only -2030 fit" (found by a black-box session)."""
    client = await make_client(context_window=3000)
    resp = await client.post("/v1/chat/completions", json={
        "model": "test-1", limit: 5000, "messages": [{"role": "user", "content": "hi"}]})
    assert resp.status == 400
    assert await resp.json() == {"error": {
        "message": f"{limit} 5000 leaves no room for the prompt in the context window of "
                   "route 'test': the window is 3000 tokens, of which the tools take 0 and "
                   "the safety margin 30. Ask for fewer than 2970 output tokens, or use a "
                   "route with a larger window.",
        "type": "invalid_request_error", "code": "context_length_exceeded", "param": limit}}


@pytest.mark.parametrize(
    ("payload", "status", "error"),
    [
        (b"{not json", 400, {
            "message": "We could not parse the JSON body of your request. (HINT: This likely "
                       "means you aren't using your HTTP library correctly. The OpenAI API "
                       "expects a JSON payload, but what was sent was not valid JSON.)",
            "type": "invalid_request_error", "code": "invalid_json"}),
        (b'{"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}', 404, {
            "message": "The model 'gpt-9' does not exist or no route matches it "
                       "(routes: test-*).",
            "type": "invalid_request_error", "code": "model_not_found", "param": "model"}),
        (b'{"model": "test-1", "messages": [{"role": "tool", "tool_call_id": "x", '
         b'"content": "1"}]}', 400, {
            "message": "Invalid parameter: messages with role 'tool' must be a response to a "
                       "preceeding message with 'tool_calls'.",
            "type": "invalid_request_error", "code": "invalid_value",
            "param": "messages[0].role"}),
        (b"\xff\xfe{}", 400, None),
    ],
)
async def test_bad_input_gets_openai_errors(make_client: Any, upstream: UpstreamServer,
                                            payload: bytes, status: int,
                                            error: dict[str, Any] | None) -> None:
    client = await make_client()
    resp = await client.post("/v1/chat/completions", data=payload,
                             headers={"Content-Type": "application/json"})
    assert resp.status == status
    body = await resp.json()
    if error is not None:
        assert body == {"error": error}
    else:
        assert body["error"]["code"] == "invalid_json"
    assert upstream.history == []


async def test_upstream_rate_limit_keeps_its_meaning(make_client: Any,
                                                     upstream: UpstreamServer) -> None:
    client = await make_client()
    upstream.enqueue_error(429, headers={"Retry-After": "7"})
    resp = await client.post("/v1/chat/completions", json={
        "model": "test-1", "messages": [{"role": "user", "content": "x"}]})
    assert resp.status == 429 and resp.headers["Retry-After"] == "7"
    assert (await resp.json())["error"]["code"] == "rate_limit_exceeded"


async def test_models_health_and_unknown_path(make_client: Any, sdk: SDK) -> None:
    client = await make_client()
    models = await sdk(client).models.list()
    assert [m.id for m in models.data] == ["test"]
    # retrieve: by the route's name or any model its glob takes; else OpenAI's 404
    got = await sdk(client).models.retrieve("test-1")
    assert (got.id, got.object, got.owned_by) == ("test-1", "model", "ctxwarden")
    assert (await sdk(client).models.retrieve("test")).id == "test"
    gone = await client.get("/v1/models/openai/gpt-4o")
    assert gone.status == 404 and await gone.json() == {"error": {
        "message": "The model 'openai/gpt-4o' does not exist or no route matches it "
                   "(routes: test-*).",
        "type": "invalid_request_error", "code": "model_not_found", "param": "model"}}
    health = await client.get("/healthz")
    assert (await health.json()) == {"status": "ok", "routes": 1, "store": "MemoryStore"}
    missing = await client.get("/v2/nothing")
    assert missing.status == 404
    assert (await missing.json())["error"]["code"] == "unknown_url"


async def test_client_disconnect_cancels_upstream(make_client: Any,
                                                  upstream: UpstreamServer) -> None:
    client = await make_client()
    upstream.enqueue(" ".join(["tok"] * 200), chunk_delay=0.02)
    resp = await client.post("/v1/chat/completions", json={
        "model": "test-1", "stream": True, "messages": [{"role": "user", "content": "x"}]})
    with capture_logs() as logs:
        await resp.content.readline()
        resp.close()  # the client walks away mid-stream
        assert await upstream.wait_disconnects(1, timeout=3.0)
        for _ in range(150):  # the handler's log line comes as it unwinds
            if any(e["event"] == "request" for e in logs):
                break
            await asyncio.sleep(0.02)
    lines = [e for e in logs if e["event"] == "request"]
    assert [e["outcome"] for e in lines] == ["client_disconnected"]  # not "complete"


@pytest.mark.parametrize("stream", [False, True])
async def test_client_leaving_before_the_upstream_answers_is_logged(
        make_client: Any, upstream: UpstreamServer, stream: bool) -> None:
    """A client that hangs up while the upstream has not answered yet (a slow first token)
    still gets its request's one log line: its fitting and writes happened."""
    client = await make_client()
    upstream.enqueue("slow", delay=2.0)
    with capture_logs() as logs:
        task = asyncio.ensure_future(client.post("/v1/chat/completions", json={
            "model": "test-1", "stream": stream, "messages": [{"role": "user", "content": "x"}]}))
        for _ in range(200):  # until the upstream has the request
            if upstream.history:
                break
            await asyncio.sleep(0.01)
        task.cancel()  # the client walks away
        assert await upstream.wait_disconnects(1, timeout=3.0)
        for _ in range(150):
            if any(e["event"] == "request" for e in logs):
                break
            await asyncio.sleep(0.02)
    lines = [e for e in logs if e["event"] == "request"]
    assert [e["outcome"] for e in lines] == ["client_disconnected"]
    assert lines[0]["stream"] is stream and "tokens_in" in lines[0]


async def test_one_log_line_per_request_without_message_text(make_client: Any) -> None:
    client = await make_client()
    with capture_logs() as logs:
        resp = await client.post("/v1/chat/completions", json={
            "model": "test-1", "messages": [{"role": "user", "content": "secret words here"}]})
        assert resp.status == 200
    lines = [e for e in logs if e["event"] == "request"]
    assert len(lines) == 1
    line = lines[0]
    for key in ("session", "tokens_in", "tokens_out", "evicted", "recalled", "policy",
                "latency_ms", "status"):
        assert key in line
    assert "secret" not in repr(logs) and "sk-up" not in repr(logs)




@pytest.mark.parametrize("text", [
    "", "short", "a  b\n\nc", "word " * 500, " " * 2000 + "late words at the end",
    "\n".join(f"line {i}:\tvalue" for i in range(300)), "x" * 150,
])
def test_an_events_preview_reads_a_bounded_head_but_says_what_the_whole_text_would(
        text: str) -> None:
    from proxy.records import preview

    flat = " ".join(text.split())
    assert preview(text) == (flat if len(flat) <= 100 else flat[:99] + "…")


async def test_healthz_is_503_while_the_store_cannot_open(
        aiohttp_client: ClientFactory, upstream: UpstreamServer, tmp_path: Any) -> None:
    """A replica whose store cannot open answers every chat 503: its /healthz says so (it
    said "ok"; found by a new user on an S3 bucket that did not exist), and turns healthy
    once the store opens, retried in the background."""
    from proxy.keys import HEALTH
    from store.errors import StoreUnavailable
    from store.lance import LanceStore
    from tests.support.fakes import FakeEmbedder

    path = tmp_path / "store"
    path.write_text("not a directory")
    store = LanceStore(path, FakeEmbedder())
    client = await aiohttp_client(init_app(settings_for(upstream), store=store))
    health = client.app[HEALTH]
    health.retry_s = 3600.0
    with pytest.raises(StoreUnavailable):
        await health.open()  # as `ctxwarden serve` does before it listens
    resp = await client.get("/healthz")
    assert resp.status == 503
    assert await resp.json() == {
        "status": "store_unavailable", "routes": 1, "store": "LanceStore",
        "error": "The context store cannot open right now (FileExistsError); nothing was "
                 "dropped from the conversation."}
    path.unlink()  # the store can open now; the next check retries it in the background
    health.retry_s = 0.0
    for _ in range(100):
        resp = await client.get("/healthz")
        if resp.status == 200:
            break
        await asyncio.sleep(0.05)
    assert await resp.json() == {"status": "ok", "routes": 1, "store": "LanceStore"}


async def test_turn_header_names_the_decision_logs_turn(make_client: Any,
                                                        upstream: UpstreamServer,
                                                        sdk: SDK) -> None:
    """A request's `X-Ctxwarden-Turn` is the `turn` its evictions carry in /admin/evictions
    and its row in /admin/turns: how a client finds the decisions of the request it made."""
    upstream.context_window = 4000 - 200
    client = await make_client()
    msgs = long_session(14)
    raw = await sdk(client).chat.completions.with_raw_response.create(
        model="test-1", messages=msgs, extra_headers={"X-Session-ID": "sess-turn"})
    turn = int(raw.headers["x-ctxwarden-turn"])
    assert turn == sum(1 for m in msgs if m["role"] == "assistant")
    events = (await (await client.get("/admin/evictions?session=sess-turn")).json())["events"]
    assert events and {e["turn"] for e in events} == {turn}
    turns = (await (await client.get("/admin/turns?session=sess-turn")).json())["turns"]
    assert [t["turn"] for t in turns] == [turn]


async def test_admin_sent_gives_back_the_body_forwarded_byte_for_byte(
        make_client: Any, upstream: UpstreamServer, sdk: SDK) -> None:
    """What a turn sent, stubs and all, as the upstream received it (but `model`, which the
    transport sets to the route's upstream model); the turns kept are named, and a turn or
    session not kept is a 404 that says what is."""
    upstream.context_window = 4000 - 200
    client = await make_client()
    api = sdk(client)
    msgs = long_session(14)
    turns = []
    for history in (msgs, [*msgs, assistant("Read them all."), user("Now fix m3.")]):
        raw = await api.chat.completions.with_raw_response.create(
            model="test-1", messages=history, extra_headers={"X-Session-ID": "sess-sent"})
        turns.append(int(raw.headers["x-ctxwarden-turn"]))
    first, second = (r.body for r in upstream.history[-2:])
    assert "offloaded as chunk" in orjson.dumps(second).decode()  # stubs were sent
    latest = await client.get("/admin/sent?session=sess-sent")
    assert latest.status == 200 and latest.content_type == "application/json"
    assert latest.headers["X-Ctxwarden-Turn"] == str(turns[1])
    assert latest.headers["X-Ctxwarden-Kept-Turns"] == f"{turns[0]},{turns[1]}"
    assert {**orjson.loads(await latest.read()), "model": "gpt-4o"} == second
    earlier = await client.get(f"/admin/sent?session=sess-sent&turn={turns[0]}")
    assert {**orjson.loads(await earlier.read()), "model": "gpt-4o"} == first
    missing = await client.get("/admin/sent?session=sess-sent&turn=3")
    assert missing.status == 404 and await missing.json() == {"error": {
        "message": f"No forwarded body for turn 3 of session 'sess-sent' (kept: turns "
                   f"{turns[0]}, {turns[1]}). This process keeps the last 8 turns' bodies "
                   "of each session it served (server.keep_sent), in memory only.",
        "type": "invalid_request_error", "code": "sent_not_found", "param": "turn"}}
    unknown = await client.get("/admin/sent?session=nobody")
    assert unknown.status == 404 and (await unknown.json())["error"] == {
        "message": "No forwarded body for session 'nobody' (none kept for it). This process "
                   "keeps the last 8 turns' bodies of each session it served "
                   "(server.keep_sent), in memory only.",
        "type": "invalid_request_error", "code": "sent_not_found", "param": "session"}
