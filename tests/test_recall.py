"""Never forget, end to end: real app → real LanceDB in tmp_path → real MiniLM → upstream.

A fact that a turn-3 tool result held, evicted long ago, is back in the request forwarded
at turn 40 when the user asks about it; and a restart mid-session keeps every decision.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient

from proxy.app import init_app
from proxy.config import Settings
from proxy.keys import STORE
from store.lance import LanceStore
from tests.support.messages import assistant, call, tool, user
from tests.support.openai_server import UpstreamServer
from tests.support.trips import ASK, NEEDLE_ID, file_listing, session

ClientFactory = Callable[..., Awaitable[TestClient[Any, Any]]]
def settings(upstream: UpstreamServer, db: Path) -> Settings:
    return Settings(store={"path": str(db)}, routes=[{
        "name": "agent", "model": "agent-*",
        "upstream": {"model": "openai/gpt-4o", "api_base": upstream.url, "api_key": "sk-up"},
        "context_window": 4000, "max_output_tokens": 256,
        "recall": {"enabled": True, "budget_fraction": 0.15, "min_similarity": 0.25}}])


def without_recall(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The prompt minus the recall block (what the store found may grow between calls)."""
    last = msgs[-1]
    text = last["content"].split("\n\n<ctxwarden-recall", 1)[0]
    return [*msgs[:-1], {**last, "content": text}]


async def send(client: TestClient[Any, Any], msgs: list[dict[str, Any]]) -> Any:
    resp = await client.post("/v1/chat/completions", headers={"X-Session-ID": "trip-1"},
                             json={"model": "agent-1", "messages": msgs})
    assert resp.status == 200, await resp.text()
    return resp


async def test_fact_evicted_at_turn_3_is_recalled_at_turn_40(
        aiohttp_client: ClientFactory, upstream: UpstreamServer, tmp_path: Path) -> None:
    app = init_app(settings(upstream, tmp_path / "db"))
    client = await aiohttp_client(app)
    history = session(39)
    for end in range(8, len(history) + 1, 4):  # the agent's turns, one request each
        await send(client, history[:end])
    store = app[STORE]
    assert isinstance(store, LanceStore)
    await store.flush()  # between turns a real session has seconds; the worker needs ~1
    before = upstream.history[-1].body["messages"]
    assert NEEDLE_ID not in json.dumps(before)  # evicted long ago: not in context any more

    resp = await send(client, [*history, user(ASK)])
    sent = upstream.history[-1].body["messages"]
    assert int(resp.headers["X-Ctxwarden-Recalled"]) >= 1
    assert NEEDLE_ID in sent[-1]["content"] and "<ctxwarden-recall" in sent[-1]["content"]
    assert sent[-1]["content"].startswith(ASK)  # the user's words first, untouched
    assert sent[0] == history[0] and sent[1] == history[1]
    events = await (await client.get("/admin/evictions", params={"session": "trip-1"})).json()
    recalls = [e for e in events["events"] if e["action"] == "recall"]
    assert any(NEEDLE_ID in e["preview"] for e in recalls)
    evicts = [e for e in events["events"] if e["action"] == "evict"]
    assert len(evicts) >= 10 and all(e["reason"] for e in evicts)


async def test_restart_mid_session_keeps_decisions_and_store(
        aiohttp_client: ClientFactory, upstream: UpstreamServer, tmp_path: Path) -> None:
    history = session(24)
    first = await aiohttp_client(init_app(settings(upstream, tmp_path / "db")))
    await send(first, history)
    sent_before = without_recall(upstream.history[-1].body["messages"])
    events_before = (await (await first.get("/admin/evictions",
                                            params={"session": "trip-1"})).json())["events"]
    assert events_before
    await first.close()  # the proxy stops: cleanup closes the store

    second = await aiohttp_client(init_app(settings(upstream, tmp_path / "db")))
    await send(second, history)  # the same request after the restart
    # Sticky: the same evictions and stubs, byte for byte (recall may find more by now).
    assert without_recall(upstream.history[-1].body["messages"]) == sent_before
    nxt = [*history, assistant(None, call("call_x", "list_files", '{"dir": "src"}')),
           tool("call_x", file_listing(99))]
    await send(second, nxt)
    sent_after = upstream.history[-1].body["messages"]
    assert sent_after[: len(sent_before) - 1] == sent_before[:-1]  # the prefix is stable
    events_after = (await (await second.get("/admin/evictions",
                                            params={"session": "trip-1"})).json())["events"]
    assert events_after[: len(events_before)] == events_before
