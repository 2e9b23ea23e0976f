"""OpenAI custom tool calls (free-form `input`, no JSON arguments) through the real app:
accepted, counted, and kept paired with their results when the history is fitted."""

from __future__ import annotations

from typing import Any

import orjson
import tiktoken

from tests.support.app import CHAT, STUB, ClientFactory, make, settings_for
from tests.support.messages import filler, tool, user
from tests.support.openai_server import UpstreamServer

O200K = tiktoken.get_encoding("o200k_base")
TOOLS = [{"type": "custom", "custom": {"name": "apply_patch",
                                       "description": "Apply a unified diff to the repo."}},
         {"type": "function", "function": {"name": "run_tests", "parameters": {
             "type": "object", "properties": {}}}}]


def custom(cid: str, patch: str) -> dict[str, Any]:
    return {"id": cid, "type": "custom", "custom": {"name": "apply_patch", "input": patch}}


def calls(*c: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": list(c)}


def session(rounds: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You edit code."},
                                  user("Fix the failing tests.")]
    for i in range(rounds):
        patch = f"--- a/m{i}.py\n+++ b/m{i}.py\n@@ -1 +1 @@\n-x = {i}\n+x = {i + 1}\n"
        msgs += [calls(custom(f"ct_{i}", patch), {
                     "id": f"fc_{i}", "type": "function",
                     "function": {"name": "run_tests", "arguments": "{}"}}),
                 tool(f"ct_{i}", f"patched m{i}.py " + filler(120, f"p{i}")),
                 tool(f"fc_{i}", f"round {i}: " + filler(150, f"t{i}")),
                 user(f"go on {i}")]
    return msgs


async def test_custom_tool_calls_are_fitted_in_pairs(aiohttp_client: ClientFactory,
                                                     upstream: UpstreamServer) -> None:
    client = await make(aiohttp_client, settings_for(upstream, context_window=2000))
    msgs = session(8)
    resp = await client.post(CHAT, json={"model": "test-1", "messages": msgs, "tools": TOOLS},
                             headers={"X-Session-ID": "custom"})
    assert resp.status == 200, await resp.text()
    assert int(resp.headers["X-Ctxwarden-Evicted"]) > 0
    assert upstream.rejected == 0  # the stand-in checks every call is answered, in order
    sent = upstream.history[-1].body
    assert sent["tools"] == TOOLS and sent["messages"][-1] == msgs[-1]
    stubs = [m["content"] for m in sent["messages"] if STUB.search(str(m.get("content")))]
    assert any("characters of apply_patch output offloaded" in s for s in stubs)
    kept_calls = [c for m in sent["messages"] for c in m.get("tool_calls") or ()]
    assert custom("ct_7", msgs[-4]["tool_calls"][0]["custom"]["input"]) in kept_calls
    answered = {m["tool_call_id"] for m in sent["messages"] if m["role"] == "tool"}
    assert answered == {c["id"] for c in kept_calls}
    tokens, _ = upstream.count_tokens(sent["messages"], sent["tools"])
    assert tokens + 200 <= 2000


async def test_a_custom_call_costs_its_json(aiohttp_client: ClientFactory,
                                            upstream: UpstreamServer) -> None:
    client = await make(aiohttp_client, settings_for(upstream))
    call = custom("ct_1", "*** Begin Patch\n" + filler(200, "diff") + "\n*** End Patch")
    msgs = [user("Patch it."), calls(call), tool("ct_1", "ok")]
    resp = await client.post(CHAT, json={"model": "test-1", "messages": msgs})
    assert resp.status == 200, await resp.text()

    def n(s: str) -> int:
        return len(O200K.encode_ordinary(s))

    expected = 3 + 4 * 3 + n("Patch it.") + 3 + n(orjson.dumps(call).decode()) + n(
        "ct_1") + 1 + n("ok")
    assert int(resp.headers["X-Ctxwarden-Tokens-In"]) == expected


async def test_a_custom_call_without_a_name_is_refused(aiohttp_client: ClientFactory,
                                                       upstream: UpstreamServer) -> None:
    client = await make(aiohttp_client, settings_for(upstream))
    bad = {"id": "ct_1", "type": "custom", "custom": {"input": "x"}}
    resp = await client.post(CHAT, json={"model": "test-1", "messages": [
        user("Patch it."), calls(bad), tool("ct_1", "ok")]})
    assert resp.status == 400
    assert await resp.json() == {"error": {
        "message": "Missing required parameter: 'messages[1].tool_calls[0].custom.name'.",
        "type": "invalid_request_error", "code": "missing_required_parameter",
        "param": "messages[1].tool_calls[0].custom"}}
    assert upstream.history == []


def legacy_session(rounds: int) -> list[dict[str, Any]]:
    """The legacy functions API: `function_call` on the assistant, a `function` reply."""
    msgs: list[dict[str, Any]] = [user("Check every module.")]
    for i in range(rounds):
        msgs += [{"role": "assistant", "content": None,
                  "function_call": {"name": "read", "arguments": f'{{"m": {i}}}'}},
                 {"role": "function", "name": "read", "content": filler(200, f"f{i}")},
                 {"role": "assistant", "content": f"Module {i} read."}, user(f"next {i}")]
    return msgs


async def test_legacy_function_calls_are_fitted_in_pairs(aiohttp_client: ClientFactory,
                                                         upstream: UpstreamServer) -> None:
    """A `function` result is stubbed, or dropped only with its `function_call`: never one
    without the other (LiteLLM turns them into tool_use/tool_result pairs for Anthropic)."""
    client = await make(aiohttp_client, settings_for(upstream, context_window=2000))
    functions = [{"name": "read", "parameters": {"type": "object", "properties": {}}}]
    resp = await client.post(CHAT, json={"model": "test-1", "messages": legacy_session(10),
                                         "functions": functions})
    assert resp.status == 200, await resp.text()
    assert int(resp.headers["X-Ctxwarden-Evicted"]) > 0
    sent = upstream.history[-1].body["messages"]
    stubbed = 0
    for i, m in enumerate(sent):
        if m["role"] == "function":
            assert sent[i - 1].get("function_call", {}).get("name") == m["name"]
            stubbed += bool(STUB.search(m["content"]))
        if sent[i].get("function_call"):
            assert sent[i + 1]["role"] == "function"
    assert stubbed > 0
