"""`/v1/responses` fitted like chat (proxy/responses.py, proxy/items.py): the official
openai SDK's `client.responses.create` → real app → the real OpenAI stand-in, which
refuses an input whose calls and outputs do not pair up, as OpenAI does."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import openai
import orjson
import pytest
from aiohttp.test_utils import TestClient
from structlog.testing import capture_logs

from proxy.app import init_app
from proxy.config import Settings
from proxy.keys import PIPELINE
from store.base import MemoryStore
from tests.support import providers
from tests.support.app import ClientFactory, settings_for
from tests.support.items import fc, out, said
from tests.support.messages import filler
from tests.support.openai_server import UpstreamServer

FACT = "The staging database host is pg-stage-7.internal:5433."


def loop_items(rounds: int, question: str | None = None) -> list[dict[str, Any]]:
    """An agent's Responses input: a task, `rounds` calls each with a 600-word output (the
    first holding FACT), reasoning before each call, and a question last."""
    items: list[dict[str, Any]] = [said("user", "Audit the service configuration files.")]
    for i in range(rounds):
        items.append({"type": "reasoning", "id": f"rs_{i}", "summary": [
            {"type": "summary_text", "text": f"Next, file {i}."}]})
        items.append(fc(f"call_{i}", args=f'{{"path": "conf/{i}.env"}}'))
        body = filler(600, f"f{i}")
        items.append(out(f"call_{i}", f"{FACT}\n{body}" if i == 0 else body))
    items.append(said("user", question or "Summarise what you found."))
    return items


@pytest.fixture
async def client(aiohttp_client: ClientFactory,
                 upstream: UpstreamServer) -> AsyncIterator[TestClient[Any, Any]]:
    settings = settings_for(upstream, recall={"enabled": True})
    yield await aiohttp_client(init_app(settings, store=MemoryStore()))


@pytest.fixture
async def api(client: TestClient[Any, Any]) -> AsyncIterator[Any]:
    """The official client (typed Any: the plain dict items here are what it sends)."""
    made = openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key="sk-client",
                              max_retries=0)
    yield made
    await made.close()


def calls_pair(items: list[dict[str, Any]]) -> bool:
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    outs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    return sorted(calls) == sorted(outs)


async def test_a_long_history_is_fitted_paired_and_answered(
        api: Any, upstream: UpstreamServer) -> None:
    upstream.enqueue("All files read.")
    items = loop_items(8)
    raw = await api.responses.with_raw_response.create(
        model="test-1", input=items, instructions="You are a careful auditor.",
        extra_headers={"X-Session-ID": "resp-1"})
    answer = raw.parse()
    assert answer.output_text == "All files read."  # the provider's answer, as it sent it
    assert int(raw.headers["x-ctxwarden-evicted"]) > 0
    assert int(raw.headers["x-ctxwarden-tokens-out"]) < int(raw.headers["x-ctxwarden-tokens-in"])
    sent = upstream.history[-1]
    assert sent.path == "/v1/responses"
    assert sent.body["model"] == "gpt-4o"  # the route's upstream model, as for chat
    assert sent.body["instructions"] == "You are a careful auditor."
    forwarded = sent.body["input"]
    assert calls_pair(forwarded)  # the stand-in would have refused it otherwise
    stubs = [i for i in forwarded if i.get("type") == "function_call_output"
             and "offloaded as chunk" in i["output"]]
    assert stubs, "the older outputs leave as stubs naming their chunk"
    assert forwarded[0] == items[0] and forwarded[-1] == items[-1]  # task and ask, whole
    # every reasoning item still sits right before its call, and went only with it
    reasoning = [i for i in forwarded if i.get("type") == "reasoning"]
    assert len(reasoning) == sum(i.get("type") == "function_call" for i in forwarded) > 0
    for k, item in enumerate(forwarded):
        if item.get("type") == "reasoning":
            assert forwarded[k + 1] == fc(f"call_{item['id'][3:]}",
                                          args=f'{{"path": "conf/{item["id"][3:]}.env"}}')


async def test_the_next_turn_recalls_an_evicted_output_without_a_pause(
        api: Any, upstream: UpstreamServer) -> None:
    items = loop_items(8)
    await api.responses.create(model="test-1", input=items,
                               extra_headers={"X-Session-ID": "resp-2"})
    first = upstream.history[-1].body["input"]
    assert FACT not in orjson.dumps(first).decode()  # the first output was evicted
    asked = [*items, said("assistant", "Read them all."),
             said("user", "Which host and port does the staging database use?")]
    raw = await api.responses.with_raw_response.create(
        model="test-1", input=asked, extra_headers={"X-Session-ID": "resp-2"})
    assert int(raw.headers["x-ctxwarden-recalled"]) >= 1
    last = upstream.history[-1].body["input"][-1]
    assert last["role"] == "user" and last["content"][0] == asked[-1]["content"][0]
    block = last["content"][-1]
    assert block["type"] == "input_text" and "pg-stage-7.internal:5433" in block["text"]


async def test_a_stream_comes_back_as_the_provider_sent_it_with_our_headers(
        client: TestClient[Any, Any], upstream: UpstreamServer) -> None:
    upstream.enqueue("three little words")
    resp = await client.post("/v1/responses", json={
        "model": "test-1", "input": loop_items(8), "stream": True})
    assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
    assert int(resp.headers["X-Ctxwarden-Evicted"]) > 0
    events = [e for e in (await resp.read()).split(b"\n\n") if e]
    deltas = [orjson.loads(e.split(b"data: ", 1)[1])["delta"] for e in events]
    assert "".join(deltas) == "three little words"
    assert upstream.history[-1].body["stream"] is True and calls_pair(
        upstream.history[-1].body["input"])


@pytest.mark.parametrize(("extra", "reason"), [
    ({"previous_response_id": "resp_abc"}, "the provider holds the history "
                                           "(previous_response_id)"),
    ({"input": [said("user", "click it"), {"type": "computer_call", "call_id": "cc_1",
                "action": {"type": "click", "x": 1, "y": 2}},
                {"type": "computer_call_output", "call_id": "cc_1", "output": {
                    "type": "computer_screenshot", "image_url": "data:image/png;base64,AA"}}]},
     "input[1] is a 'computer_call' item"),
    ({"input": "hi"}, "input is not a list of items"),
    ({"model": "gpt-unrouted-1"}, "no route takes the model"),
])
async def test_what_cannot_be_fitted_passes_through_unchanged(
        client: TestClient[Any, Any], upstream: UpstreamServer, extra: dict[str, Any],
        reason: str) -> None:
    body = {"model": "test-1", "input": [said("user", "hi")], **extra}
    raw = orjson.dumps(body)
    with capture_logs() as logs:
        resp = await client.post("/v1/responses", data=raw,
                                 headers={"Content-Type": "application/json"})
    assert resp.status == 200
    assert "X-Ctxwarden-Session" not in resp.headers  # nothing of ours happened
    assert upstream.history[-1].body == body  # the client's body, model and all
    assert [e["reason"] for e in logs if e["event"] == "responses_passed"] == [reason]


async def test_a_request_that_cannot_fit_gets_openais_error(
        client: TestClient[Any, Any], upstream: UpstreamServer) -> None:
    resp = await client.post("/v1/responses", json={
        "model": "test-1", "instructions": filler(5000), "input": [said("user", "hi")]})
    assert resp.status == 400
    err = (await resp.json())["error"]
    assert (err["type"], err["code"]) == ("invalid_request_error", "context_length_exceeded")
    assert upstream.history == []  # nothing went upstream


async def test_admin_sent_holds_the_responses_body_as_sent(
        api: Any, client: TestClient[Any, Any],
        upstream: UpstreamServer) -> None:
    await api.responses.create(model="test-1", input=loop_items(8),
                               extra_headers={"X-Session-ID": "resp-sent"})
    kept = await client.get("/admin/sent?session=resp-sent")
    assert kept.status == 200
    assert orjson.loads(await kept.read()) == upstream.history[-1].body


async def test_a_key_the_provider_refuses_writes_nothing(aiohttp_client: ClientFactory) -> None:
    """Auth mode `passthrough`: as for chat, a turn's writes wait for the provider to take
    the caller's key; a refused key leaves no chunk, session or sent body behind."""
    good, bad = "sk-caller-good-0001", "sk-caller-bad-0002"
    upstream = await UpstreamServer(api_key=good).start()
    store = MemoryStore()
    try:
        route = {"name": "test", "model": "test-*", "context_window": 4000,
                 "max_output_tokens": 200,
                 "upstream": {"model": "openai/gpt-4o", "api_base": upstream.url}}
        settings = Settings(store={"path": ":memory:"}, auth={"mode": "passthrough"},
                            routes=[route])
        client = await aiohttp_client(init_app(settings, store=store))
        body = {"model": "test-1", "input": loop_items(8)}
        refused = await client.post("/v1/responses", json=body,
                                    headers={"Authorization": f"Bearer {bad}"})
        assert refused.status == 401
        assert (await refused.json())["error"]["code"] == "invalid_api_key"
        assert store.chunks == {} and client.app[PIPELINE].sent.bytes == 0
        taken = await client.post("/v1/responses", json=body,
                                  headers={"Authorization": f"Bearer {good}"})
        assert taken.status == 200 and int(taken.headers["X-Ctxwarden-Evicted"]) > 0
        assert store.chunks  # written once the provider said yes
        assert upstream.history[-1].headers["Authorization"] == f"Bearer {good}"
    finally:
        await upstream.close()


async def test_an_sdk_agent_loop_feeding_its_outputs_back_stays_valid(
        api: Any, upstream: UpstreamServer) -> None:
    """The loop the Agents SDK runs: each response's output items (the SDK's own models,
    ids and statuses included) go back into the next input with the call's result; the
    history outgrows the window and every turn is still accepted upstream."""
    history: list[Any] = [said("user", "Audit every config file, one at a time.")]
    evicted = []
    for turn in range(10):
        upstream.enqueue(tool_calls=[{"name": "read_file", "id": f"call_{turn}",
                                      "arguments": f'{{"path": "conf/{turn}.env"}}'}])
        raw = await api.responses.with_raw_response.create(
            model="test-1", input=history, extra_headers={"X-Session-ID": "sdk-loop"})
        answer = raw.parse()
        evicted.append(int(raw.headers["x-ctxwarden-evicted"]))
        call = answer.output[0]
        assert (call.type, call.call_id) == ("function_call", f"call_{turn}")
        body = f"{FACT}\n{filler(500, 't0')}" if turn == 0 else filler(500, f"t{turn}")
        history += [item.model_dump(exclude_none=True) for item in answer.output]
        history.append(out(call.call_id, body))
        sent = upstream.history[-1].body["input"]
        assert calls_pair(sent)
        assert sent[-1] == history[-3] if turn else sent == history[:1]
    assert evicted[0] == 0 and evicted[-1] > 0  # it fitted once it had to
    upstream.enqueue("The staging database is pg-stage-7.internal:5433.")
    history.append(said("user", "Where does the staging database live again?"))
    raw = await api.responses.with_raw_response.create(
        model="test-1", input=history, extra_headers={"X-Session-ID": "sdk-loop"})
    assert raw.parse().output_text.startswith("The staging database")
    assert "pg-stage-7.internal:5433" in orjson.dumps(upstream.history[-1].body).decode()


async def test_tools_and_an_output_schema_count_against_the_window(
        client: TestClient[Any, Any], upstream: UpstreamServer) -> None:
    """A tool list and a structured-output schema (`text.format`) count in the request's
    tokens, as chat's `tools` and `response_format` do: the fit leaves room for them."""
    items = loop_items(4)
    plain = await client.post("/v1/responses", json={"model": "test-1", "input": items},
                              headers={"X-Session-ID": "light"})
    tools = [{"type": "function", "name": f"tool_{i}", "description": filler(40, f"d{i}"),
              "parameters": {"type": "object", "properties": {}}} for i in range(8)]
    schema = {"type": "json_schema", "name": "report", "schema": {
        "type": "object", "description": filler(150, "s"), "properties": {}}}
    sent_in = []
    for name, extra in (("tools", {"tools": tools}), ("schema", {"text": {"format": schema}})):
        heavy = await client.post("/v1/responses", headers={"X-Session-ID": name},
                                  json={"model": "test-1", "input": items, **extra})
        assert plain.status == heavy.status == 200
        sent_in.append(int(heavy.headers["X-Ctxwarden-Tokens-In"])
                       - int(plain.headers["X-Ctxwarden-Tokens-In"]))
        body = upstream.history[-1].body
        assert {k: body[k] for k in extra} == extra  # forwarded as sent
    assert sent_in[0] > 8 * 40 and sent_in[1] > 150  # each counted in, words and all


async def test_a_codex_style_history_is_fitted_too(client: TestClient[Any, Any],
                                                   upstream: UpstreamServer) -> None:
    """Shell calls, a web search and encrypted reasoning, as Codex sends them (store off,
    the whole history each turn): fitted, and still paired upstream."""
    items: list[Any] = [said("user", "Find why the build fails.")]
    for i in range(8):
        items += [{"type": "reasoning", "id": f"rs_{i}", "summary": [],
                   "encrypted_content": f"gAAAA{i}" * 20},
                  {"type": "local_shell_call", "id": f"lsh_{i}", "call_id": f"sh_{i}",
                   "status": "completed",
                   "action": {"type": "exec", "command": ["make", f"step{i}"]}},
                  {"type": "local_shell_call_output", "call_id": f"sh_{i}",
                   "output": filler(500, f"b{i}")}]
        if i == 3:
            items.append({"type": "web_search_call", "id": "ws_1", "status": "completed",
                          "action": {"type": "search", "query": "make step3 error"}})
    items.append(said("user", "So what is wrong?"))
    resp = await client.post("/v1/responses", json={"model": "test-1", "input": items,
                                                    "store": False})
    assert resp.status == 200 and int(resp.headers["X-Ctxwarden-Evicted"]) > 0
    sent = upstream.history[-1].body["input"]
    calls = [i["call_id"] for i in sent if i["type"] == "local_shell_call"]
    outs = [i["call_id"] for i in sent if i["type"] == "local_shell_call_output"]
    assert calls == outs and len(calls) > 0
    assert any("offloaded as chunk" in i["output"] for i in sent
               if i["type"] == "local_shell_call_output")
    assert sent[-1] == items[-1] and upstream.history[-1].body["store"] is False


@pytest.mark.parametrize("family", ["anthropic", "gemini"])
@pytest.mark.parametrize("stream", [False, True])
async def test_a_provider_reached_through_litellm_gets_the_fitted_history(
        aiohttp_client: ClientFactory, family: str, stream: bool) -> None:
    """A route to Anthropic or Gemini: the fitted items go through LiteLLM's Responses API
    to the provider's stand-in, which refuses what the provider refuses (over its window,
    unpaired calls); the answer comes back in OpenAI's Responses shape, streamed or not."""
    provider = await providers.start(family, window=4000)
    try:
        route = {"name": "p", "model": "p-*", "context_window": 4000,
                 "max_output_tokens": 200, "upstream": provider.upstream}
        app = init_app(Settings(store={"path": ":memory:"}, routes=[route]),
                       store=MemoryStore())
        client = await aiohttp_client(app)
        api: Any = openai.AsyncOpenAI(base_url=str(client.make_url("/v1")),
                                      api_key="sk-client", max_retries=0)
        provider.enqueue("All eight files read.")
        answer: Any
        try:
            if stream:
                async with api.responses.stream(model="p-1", input=loop_items(8)) as events:
                    async for _ in events:
                        pass
                    answer = await events.get_final_response()
            else:
                answer = await api.responses.create(model="p-1", input=loop_items(8))
        finally:
            await api.close()
        assert answer.output_text == "All eight files read."
        assert provider.rejected == 0 and len(provider.history) == 1
        sent = provider.history[-1]
        assert provider.streamed(sent) is stream
        calls, results = provider.tool_pairs(sent.body)
        assert len(calls) == len(results) > 0  # every call answered, every answer called
        assert any("offloaded as chunk" in r for r in results.values())
    finally:
        await provider.server.close()


@pytest.mark.parametrize("stream", [False, True])
async def test_the_demo_routes_mock_answers_the_responses_api(
        aiohttp_client: ClientFactory, stream: bool) -> None:
    """LiteLLM's mock answers whole even when asked to stream: the stream is then the
    events OpenAI would send for that answer, which the SDK reads to the same text."""
    route = {"name": "demo", "model": "demo*", "context_window": 1200,
             "max_output_tokens": 128, "upstream": {"model": "openai/demo",
                                                    "mock_response": "Hello from the demo."}}
    app = init_app(Settings(store={"path": ":memory:"}, routes=[route]), store=MemoryStore())
    client = await aiohttp_client(app)
    api: Any = openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key="unused",
                                  max_retries=0)
    try:
        if stream:
            async with api.responses.stream(model="demo", input=loop_items(3)) as events:
                deltas = [e.delta async for e in events if e.type == "response.output_text.delta"]
                answer = await events.get_final_response()
            assert "".join(deltas) == "Hello from the demo."
        else:
            answer = await api.responses.create(model="demo", input=loop_items(3))
    finally:
        await api.close()
    assert answer.output_text == "Hello from the demo."


async def test_custom_tools_go_through_litellms_responses_bridge(
        aiohttp_client: ClientFactory) -> None:
    """Unlike its chat transform (a 400 `unsupported_tool_type` for chat), LiteLLM's
    Responses bridge sends a custom tool as a function of one string: Codex's
    `apply_patch` history reaches Anthropic fitted and paired."""
    provider = await providers.start("anthropic", window=4000)
    try:
        route = {"name": "p", "model": "p-*", "context_window": 4000,
                 "max_output_tokens": 200, "upstream": provider.upstream}
        client = await aiohttp_client(init_app(
            Settings(store={"path": ":memory:"}, routes=[route]), store=MemoryStore()))
        items: list[Any] = [said("user", "Fix the failing tests.")]
        for i in range(8):
            items += [{"type": "custom_tool_call", "call_id": f"p{i}", "name": "apply_patch",
                       "input": f"*** Begin Patch\n*** Update File: src/m{i}.py\n"},
                      {"type": "custom_tool_call_output", "call_id": f"p{i}",
                       "output": filler(500, f"p{i}")}]
        items.append(said("user", "Done?"))
        provider.enqueue("Yes.")
        resp = await client.post("/v1/responses", json={
            "model": "p-1", "input": items,
            "tools": [{"type": "custom", "name": "apply_patch"}]})
        assert resp.status == 200 and int(resp.headers["X-Ctxwarden-Evicted"]) > 0
        assert provider.rejected == 0
        calls, results = provider.tool_pairs(provider.history[-1].body)
        assert len(calls) == len(results) > 0
        assert any("offloaded as chunk" in r for r in results.values())
    finally:
        await provider.server.close()
