"""What a request costs besides its messages' text, and per model family, through the app.

Expected counts are worked out here from o200k and the documented rules (proxy/tokens.py):
a `response_format` schema and legacy `functions` cost their compact JSON + 12, a legacy
`function_call` 3 + its JSON, Claude text 1.3 × o200k plus Anthropic's 346-token tool
prompt, Llama 3 1.1 × and Mistral 1.35 ×.
"""

from __future__ import annotations

import math
from typing import Any

import orjson
import tiktoken

from tests.support.app import CHAT, ClientFactory, make, one_route, settings_for
from tests.support.messages import filler, long_session, user
from tests.support.openai_server import UpstreamServer

O200K = tiktoken.get_encoding("o200k_base")


def n(text: str) -> int:
    return len(O200K.encode_ordinary(text))


def js(value: Any) -> str:
    return orjson.dumps(value).decode()


SCHEMA = {"type": "json_schema", "json_schema": {"name": "report", "strict": True, "schema": {
    "type": "object", "additionalProperties": False,
    "required": [f"field_{i}" for i in range(15)],
    "properties": {f"field_{i}": {"type": "string", "description": filler(12, f"d{i}")}
                   for i in range(15)}}}}


async def test_a_response_format_schema_is_inside_the_budget(aiohttp_client: ClientFactory,
                                                             upstream: UpstreamServer) -> None:
    client = await make(aiohttp_client, settings_for(upstream))  # window 4000: room 3760
    msgs = long_session(3)
    plain = await client.post(CHAT, json={"model": "test-1", "messages": msgs},
                              headers={"X-Session-ID": "plain"})
    assert plain.status == 200 and plain.headers["X-Ctxwarden-Evicted"] == "0"
    base = int(plain.headers["X-Ctxwarden-Tokens-In"])
    assert 3000 < base < 3600
    resp = await client.post(CHAT, json={"model": "test-1", "messages": msgs,
                                         "response_format": SCHEMA},
                             headers={"X-Session-ID": "schema"})
    assert resp.status == 200, await resp.text()
    schema_tokens = n(js(SCHEMA)) + 12
    assert schema_tokens > 500
    assert int(resp.headers["X-Ctxwarden-Tokens-In"]) == base + schema_tokens
    assert int(resp.headers["X-Ctxwarden-Evicted"]) > 0  # it no longer fitted: evicted
    assert int(resp.headers["X-Ctxwarden-Tokens-Out"]) <= 3760
    assert upstream.history[-1].body["response_format"] == SCHEMA


FUNCTIONS = [{"name": "lookup", "description": "Look a booking up by its reference.",
              "parameters": {"type": "object", "properties": {"ref": {"type": "string"}}}}]


async def test_legacy_functions_and_function_call_count_their_json(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    client = await make(aiohttp_client, settings_for(upstream))
    call = {"name": "lookup", "arguments": js({"ref": "ABC123", "notes": filler(300, "n")})}
    msgs = [user("Find booking ABC123."),
            {"role": "assistant", "content": None, "function_call": call},
            {"role": "function", "name": "lookup", "content": "booked, seat 14C"},
            user("Which seat?")]
    resp = await client.post(CHAT, json={"model": "test-1", "messages": msgs,
                                         "functions": FUNCTIONS, "function_call": "auto"})
    assert resp.status == 200, await resp.text()
    expected = (3 + 4 * 4 + n("Find booking ABC123.") + 3 + n(js(call))
                + n("lookup") + 1 + n("booked, seat 14C") + n("Which seat?")
                + n(js(FUNCTIONS)) + 12)
    assert int(resp.headers["X-Ctxwarden-Tokens-In"]) == expected
    assert n(js(call)) > 900  # it used to cost the message's 4 tokens of framing
    sent = upstream.history[-1].body
    assert sent["messages"] == msgs and sent["functions"] == FUNCTIONS


async def test_open_model_families_scale_o200k(aiohttp_client: ClientFactory,
                                               upstream: UpstreamServer) -> None:
    text = filler(200, "q") + " What now?"
    for model, factor in (("hosted_vllm/meta-llama/Llama-3.1-8B-Instruct", 1.10),
                          ("hosted_vllm/mistralai/Mistral-7B-Instruct-v0.2", 1.35),
                          ("hosted_vllm/my-finetune", 1.0)):
        settings = one_route(upstream.url, name="v", model="v-*",
                             upstream={"model": model, "api_base": upstream.url})
        client = await make(aiohttp_client, settings)
        resp = await client.post(CHAT, json={"model": "v-1", "messages": [user(text)]})
        assert resp.status == 200, await resp.text()
        assert int(resp.headers["X-Ctxwarden-Tokens-In"]) == 3 + 4 + math.ceil(
            n(text) * factor), model


TOOLS = [{"type": "function", "function": {
    "name": "search_flights", "description": filler(40, "t"),
    "parameters": {"type": "object", "properties": {"origin": {"type": "string"}}}}}]


async def test_claude_tools_cost_anthropic_tool_prompt(aiohttp_client: ClientFactory,
                                                       upstream: UpstreamServer) -> None:
    settings = one_route(upstream.url, name="c", model="c-*", context_window=1000,
                         upstream={"model": "anthropic/claude-sonnet-4-20250514",
                                   "api_base": upstream.url, "api_key": "sk-x"})
    client = await make(aiohttp_client, settings)
    text = filler(400, "p")
    resp = await client.post(CHAT, json={"model": "c-1", "tools": TOOLS,
                                         "messages": [user(text)]})
    tools = math.ceil(n(js(TOOLS)) * 1.3) + 12 + 346
    must_stay = 3 + 4 + math.ceil(n(text) * 1.3)
    budget = 1000 - 200 - tools - 50
    assert resp.status == 400
    assert await resp.json() == {"error": {
        "message": "This request cannot fit the context window of route 'c': what must stay "
                   "(system and developer messages, the first user message, the latest turn) "
                   f"is {must_stay} tokens, and {must_stay} after evicting everything "
                   f"evictable, but only {budget} fit (window 1000 - reserved output 200 - "
                   f"tools {tools} - safety margin and recall budget). Shorten the latest "
                   "message or the system prompt, lower max_tokens, or use a route with a "
                   "larger window.",
        "type": "invalid_request_error", "code": "context_length_exceeded",
        "param": "messages"}}
    assert upstream.history == []


async def test_the_safety_margin_is_1_percent_where_the_tokenizer_is_the_models_own(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """Unset, the margin is 1 % of the window where tiktoken has the model's encoding (the
    counts already err high) and 5 % where the count is o200k standing in; a route's own
    `safety_margin` wins. Read from the budget a request too big for any of them is told."""
    text = filler(1200, "m")
    for model, margin, expected in (("openai/gpt-4o", None, 10), ("openai/my-local", None, 50),
                                    ("openai/gpt-4o", 0.05, 50)):
        extra: dict[str, Any] = {} if margin is None else {"safety_margin": margin}
        settings = one_route(upstream.url, name="g", model="g-*", context_window=1000,
                             upstream={"model": model, "api_base": upstream.url}, **extra)
        client = await make(aiohttp_client, settings)
        resp = await client.post(CHAT, json={"model": "g-1", "messages": [user(text)]})
        assert resp.status == 400
        message = (await resp.json())["error"]["message"]
        assert f"but only {1000 - 200 - expected} fit (window 1000 - reserved output 200" in (
            message), (model, margin, message)
    assert upstream.history == []


async def test_an_sdk_echoed_reply_costs_no_more_than_its_content(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """Agents append `message.model_dump()`: nulls and an empty `annotations` are not sent
    text; a refusal is."""
    client = await make(aiohttp_client, settings_for(upstream))
    plain = {"role": "assistant", "content": "Done."}
    echoed: dict[str, Any] = {**plain, "refusal": None, "annotations": [], "audio": None,
              "function_call": None, "tool_calls": None}
    refused = {"role": "assistant", "content": None, "refusal": "I can't help with that."}
    counts = []
    for reply in (plain, echoed, refused):
        resp = await client.post(CHAT, json={"model": "test-1", "messages": [
            user("Go."), reply, user("Next?")]})
        assert resp.status == 200, await resp.text()
        counts.append(int(resp.headers["X-Ctxwarden-Tokens-In"]))
    assert counts[0] == counts[1]
    assert counts[2] == counts[0] - n("Done.") + 3 + n("I can't help with that.")


def test_the_count_and_analysis_caches_keep_to_their_characters() -> None:
    from proxy.analysis import MessageAnalyzer
    from proxy.tokens import TokenCounter, encoding_for

    counter = TokenCounter(encoding_for("gpt-4o"), cache_chars=10_000)
    analyzer = MessageAnalyzer(counter, cache_chars=10_000)
    outputs = [f"output {i}: " + "lorem ipsum " * 400 for i in range(6)]  # ~4,800 each
    infos = [analyzer.info({"role": "tool", "tool_call_id": f"c{i}", "content": text})
             for i, text in enumerate(outputs)]
    kept = [t for t in counter._cache if t.startswith("output")]  # ids are cached too
    assert kept == outputs[-2:] and counter._chars <= 10_000  # the most recent stay
    assert len(analyzer._cache) == 2 and analyzer._chars <= 10_000
    # a dropped entry is counted again, to the same figure
    assert counter.text(outputs[0]) == infos[0].content_tokens
    huge = "x " * 20_000  # alone over the bound: counted, not kept
    assert counter.text(huge) == len(counter.encoding.encode_ordinary(huge))
    assert huge not in counter._cache
    assert counter._chars == sum(len(t) for t in counter._cache) <= 10_000
