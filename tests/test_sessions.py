"""Which session a request lands in (proxy/session.py), over HTTP through the real app.

Two conversations that open the same way never share a session once the model has replied
differently; a system prompt that changes on every call does not split one; a session the
client names wins; and sticky evictions never shrink a request that fits whole.
"""

from __future__ import annotations

import asyncio
from typing import Any

from proxy.config import Settings
from proxy.keys import PIPELINE
from proxy.pipeline import Pipeline
from proxy.session import STATE_BYTES_PER_CHAR, Sessions
from store.base import MemoryStore
from tests.support.app import CHAT, STUB, ClientFactory, make, settings_for
from tests.support.messages import assistant, call, filler, long_session, tool, user
from tests.support.openai_server import UpstreamServer


def body(msgs: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "test-1", "messages": msgs, **extra}


def stubs(upstream: UpstreamServer) -> list[str]:
    """Chunk ids stubbed in the last forwarded request."""
    sent = upstream.history[-1].body["messages"]
    return [m for msg in sent if isinstance(msg.get("content"), str)
            for m in STUB.findall(msg["content"])]


def results(upstream: UpstreamServer) -> tuple[set[str], set[str]]:
    """Tool-call ids of the last forwarded request's tool results: (stubbed, whole)."""
    sent = upstream.history[-1].body["messages"]
    tools = [m for m in sent if m.get("role") == "tool"]
    stubbed = {m["tool_call_id"] for m in tools if STUB.search(str(m.get("content")))}
    return stubbed, {m["tool_call_id"] for m in tools} - stubbed


def renamed(msgs: list[dict[str, Any]], suffix: str) -> list[dict[str, Any]]:
    """The same conversation with other tool-call ids, as another run of the agent gets."""
    out = []
    for m in msgs:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [{**c, "id": c["id"] + suffix} for c in m["tool_calls"]]
        if m.get("tool_call_id"):
            m["tool_call_id"] += suffix
        out.append(m)
    return out


async def test_same_opening_other_reply_is_another_session_and_is_not_stubbed(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    client = await make(aiohttp_client, settings_for(upstream))
    first = await client.post(CHAT, json=body(long_session(12)))
    assert first.status == 200
    assert int(first.headers["X-Ctxwarden-Evicted"]) > 0
    assert stubs(upstream)  # the long conversation had tool results offloaded

    # Another run of the same task: same system prompt and first words, two rounds,
    # well under budget, tool results word for word those the first run offloaded.
    again = renamed(long_session(2), "-b")
    second = await client.post(CHAT, json=body(again))
    assert second.status == 200
    assert second.headers["X-Ctxwarden-Session"] != first.headers["X-Ctxwarden-Session"]
    assert second.headers["X-Ctxwarden-Session"].startswith(
        first.headers["X-Ctxwarden-Session"] + "-")
    assert second.headers["X-Ctxwarden-Evicted"] == "0"
    assert upstream.history[-1].body["messages"] == again  # forwarded whole, untouched
    # and the first conversation still finds its own session and evictions
    third = await client.post(CHAT, json=body(long_session(13)))
    assert third.headers["X-Ctxwarden-Session"] == first.headers["X-Ctxwarden-Session"]
    assert int(third.headers["X-Ctxwarden-Evicted"]) >= int(first.headers["X-Ctxwarden-Evicted"])


async def test_sticky_evictions_never_shrink_a_request_that_fits(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    store = MemoryStore()
    client = await make(aiohttp_client, settings_for(upstream), store)
    headers = {"X-Session-ID": "one-session"}
    first = await client.post(CHAT, json=body(long_session(12)), headers=headers)
    evicted = set(stubs(upstream))
    assert first.status == 200 and evicted
    # The client trimmed its own history: what is left fits whole, so it goes whole.
    short = long_session(2)
    second = await client.post(CHAT, json=body(short), headers=headers)
    assert second.status == 200
    assert second.headers["X-Ctxwarden-Evicted"] == "0"
    assert upstream.history[-1].body["messages"] == short
    events = await store.events("default", "one-session")
    restores = [e for e in events if e.action == "restore"]
    assert restores and {e.chunk_id for e in restores} <= {
        e.chunk_id for e in events if e.action == "evict"}
    assert {e.reason for e in restores} == {
        "the whole request fits the budget: earlier evictions do not apply"}


async def test_a_system_prompt_with_a_timestamp_stays_one_session(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    client = await make(aiohttp_client, settings_for(upstream))
    history = long_session(12)
    seen = set()
    kept_out: set[str] = set()
    for minute in range(3):
        history[0] = {"role": "system",
                      "content": f"You are an agent. Now: 2026-11-23T17:0{minute}:00Z"}
        cid = f"call_extra{minute}"
        history += [assistant(None, call(cid, "read_file")), tool(cid, filler(80, f"e{minute}"))]
        resp = await client.post(CHAT, json=body(history))
        assert resp.status == 200
        seen.add(resp.headers["X-Ctxwarden-Session"])
        now, whole = results(upstream)
        # sticky: what was offloaded stays offloaded (a stub, or dropped with its call)
        assert not kept_out & whole
        kept_out |= now
    assert len(seen) == 1 and kept_out


async def test_the_first_turn_and_the_rest_are_one_session(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    client = await make(aiohttp_client, settings_for(upstream))
    opening = [{"role": "system", "content": "You are an agent."}, user("Fix the build.")]
    one = await client.post(CHAT, json=body(opening))
    two = await client.post(CHAT, json=body(long_session(1)))
    assert one.headers["X-Ctxwarden-Session"] == two.headers["X-Ctxwarden-Session"]


async def test_the_user_field_keeps_end_users_apart(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    client = await make(aiohttp_client, settings_for(upstream))
    a = await client.post(CHAT, json=body(long_session(1), user="alice"))
    b = await client.post(CHAT, json=body(long_session(1), user="bob"))
    assert a.headers["X-Ctxwarden-Session"] != b.headers["X-Ctxwarden-Session"]


async def test_a_session_named_in_metadata_wins_and_is_forwarded(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    client = await make(aiohttp_client, settings_for(upstream))
    meta = {"conversation_id": "conv_42", "team": "infra"}
    resp = await client.post(CHAT, json=body(long_session(1), metadata=meta))
    assert resp.headers["X-Ctxwarden-Session"] == "conv_42"
    assert upstream.history[-1].body["metadata"] == meta
    # the header still wins over the body
    resp = await client.post(CHAT, json=body(long_session(1), metadata=meta),
                             headers={"X-Session-ID": "from-header"})
    assert resp.headers["X-Ctxwarden-Session"] == "from-header"


async def test_any_session_name_openai_takes_in_metadata_names_a_session(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """OpenAI takes any string as a metadata value: one outside the id characters names
    its session by a hash, the same one each time; only a value that is no string is
    refused, as OpenAI refuses it."""
    client = await make(aiohttp_client, settings_for(upstream))
    named = []
    for value in ("thread 42/main", "thread 42/main", "x" * 300, "ok-id"):
        resp = await client.post(CHAT, json=body(long_session(1),
                                                 metadata={"session_id": value}))
        assert resp.status == 200, await resp.text()
        named.append(resp.headers["X-Ctxwarden-Session"])
    assert named[0] == named[1] and named[0].startswith("m-") and len(named[0]) == 18
    assert named[2].startswith("m-") and named[2] != named[0] and named[3] == "ok-id"
    assert upstream.history[0].body["metadata"] == {"session_id": "thread 42/main"}
    resp = await client.post(CHAT, json=body(long_session(1), metadata={"session_id": 42}))
    assert resp.status == 400
    assert await resp.json() == {"error": {
        "message": "Invalid metadata.session_id: a string is expected",
        "type": "invalid_request_error", "param": "metadata.session_id",
        "code": "invalid_session_id"}}
    assert len(upstream.history) == 4


async def test_the_session_lru_keeps_to_its_memory_and_never_drops_a_busy_state() -> None:
    per_state = 1000 * STATE_BYTES_PER_CHAR
    sessions = Sessions(max_sessions=10, max_bytes=3 * per_state)
    states = {}
    for name in "abc":
        states[name] = sessions.get("t", name)
        states[name].index.add("c", "x" * 1000)
        sessions.account("t", name, states[name])
    assert len(sessions) == 3 and sessions.bytes == 3 * per_state and sessions.dropped == 0
    await states["b"].lock.acquire()  # a request of b's is in flight
    states["d"] = sessions.get("t", "d")
    states["d"].index.add("c", "x" * 1000)
    sessions.account("t", "d", states["d"])
    assert ("t", "a") not in sessions and sessions.dropped == 1  # the least recently used
    states["c"].index.add("more", "y" * 1000)  # c grew on its next request
    sessions.get("t", "c")
    sessions.account("t", "c", states["c"])
    # over again: a is gone, b is busy, so d (now the least recently used idle one) goes
    assert {n for n in "abcd" if ("t", n) in sessions} == {"b", "c"}
    assert sessions.dropped == 2
    assert sessions.bytes == states["b"].footprint() + states["c"].footprint() == 3 * per_state
    states["b"].lock.release()


async def test_evicted_restored_and_evicted_again_in_one_turn_is_evicted(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """One turn sent three times with another output limit (a retry that lowers
    max_tokens, parallel sub-calls of one session): its evictions, their restore, the same
    evictions again. The decision log must end as the last request was sent: the second
    evict of a chunk, at the turn of its restore, was dropped as a repeat of the first
    (LanceStore: tests/test_store.py)."""
    store = MemoryStore()
    client = await make(aiohttp_client, settings_for(upstream), store)
    headers = {"X-Session-ID": "flip"}
    history = long_session(7)
    sent = []
    for limit in (1600, 100, 1600):
        resp = await client.post(CHAT, json={**body(history), "max_tokens": limit},
                                 headers=headers)
        assert resp.status == 200
        sent.append(set(stubs(upstream)))
    events = await store.events("default", "flip")
    restored = {e.chunk_id for e in events if e.action == "restore"}
    assert restored == sent[0] - sent[1] and restored & sent[2]  # back, then out again
    assert await store.evicted_ids("default", "flip") == sent[2]  # as last sent


async def test_a_state_a_request_waits_for_is_never_dropped() -> None:
    """Two requests of one session (parallel sub-calls, a retry): the second waits for the
    first's lock. Between the first releasing it and the second running, the lock is
    free; a third session arriving then must not drop the state the second is about to
    use, or the session's next request would run on a second state beside it."""
    settings = Settings(server={"max_sessions": 1, "cold_workers": 0}, routes=[{
        "name": "t", "model": "t-*", "context_window": 4000,
        "upstream": {"model": "openai/gpt-4o", "api_base": "http://127.0.0.1:9/v1"}}])
    pipeline = Pipeline(settings, MemoryStore())
    route = settings.routes[0]
    state = pipeline.sessions.get("default", "a")
    await state.lock.acquire()  # the first request of a is being prepared
    second = asyncio.ensure_future(pipeline.prepare(
        {"model": "t-1", "messages": [user("hello")]}, route, "default", "a"))
    await asyncio.sleep(0)  # ... and the second waits for its lock
    state.lock.release()  # the first is done; the second is woken but has not run yet
    pipeline.sessions.get("default", "b")  # another session's request arrives meanwhile
    await second
    assert pipeline.sessions.get("default", "a") is state  # one state for a, still
    await pipeline.close()


async def test_a_session_dropped_for_memory_reloads_its_evictions_from_the_store(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    settings = settings_for(upstream)
    settings = settings.model_copy(update={
        "server": settings.server.model_copy(update={"session_memory_mb": 1})})
    client = await make(aiohttp_client, settings, MemoryStore())
    history = long_session(24)  # ~36,000 characters: over 1 MB of state on its own
    first = await client.post(CHAT, json=body(history), headers={"X-Session-ID": "a"})
    evicted = set(stubs(upstream))
    assert first.status == 200 and evicted
    sessions = client.app[PIPELINE].sessions
    assert ("default", "a") in sessions and sessions.dropped == 0  # alone: kept
    other = await client.post(CHAT, json=body(renamed(history, "-b")),
                              headers={"X-Session-ID": "b"})
    assert other.status == 200
    assert ("default", "a") not in sessions and sessions.dropped == 1
    metrics = await (await client.get("/metrics")).text()
    assert "ctxwarden_sessions_dropped_total 1.0" in metrics
    assert "ctxwarden_sessions 1.0" in metrics
    # a's next turn: its state is rebuilt, its evictions read back from the store, so the
    # chunks it had stubbed stay stubbed (the prompt's prefix stays as it was)
    more = [*history, assistant("Done with the files."), user("Summarise the build fix.")]
    again = await client.post(CHAT, json=body(more), headers={"X-Session-ID": "a"})
    assert again.status == 200
    assert evicted <= set(stubs(upstream))
    metrics = await (await client.get("/metrics")).text()
    loads = 'ctxwarden_store_seconds_count{op="evicted_ids"} 3.0'  # a, b, and a again
    assert loads in metrics


def trimmed(msgs: list[dict[str, Any]], keep: int) -> list[dict[str, Any]]:
    """System prompt and first user message, then the last `keep` messages, never opening
    on a tool result: what a client trimming its own history sends."""
    rest = msgs[2:][-keep:]
    while rest and rest[0].get("role") == "tool":
        rest = rest[1:]
    return msgs[:2] + rest


async def test_a_client_trimming_its_history_stays_in_its_session(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """A sliding window drops the model's first reply: the conversation's latest replies,
    seen with its opening before, keep it in its session; another conversation with the
    same opening, trimmed the same way, keeps its own."""
    client = await make(aiohttp_client, settings_for(upstream))
    a, b = long_session(12), renamed(long_session(12), "-b")
    seen: dict[str, set[str]] = {"a": set(), "b": set()}
    for n in range(6, len(a) + 1, 4):
        for name, msgs in (("a", a), ("b", b)):
            resp = await client.post(CHAT, json=body(trimmed(msgs[:n], 16)))
            assert resp.status == 200
            seen[name].add(resp.headers["X-Ctxwarden-Session"])
    assert len(seen["a"]) == 1 and len(seen["b"]) == 1
    assert seen["a"] != seen["b"]


async def test_a_client_trimming_its_history_is_logged_at_its_real_turns(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    """A request counts turns by the replies it holds; a sliding window holds fewer and
    fewer, and its turn rows and events stalled at one number. The latest reply seen
    before says how many turns were dropped: the log goes on counting."""
    store = MemoryStore()
    client = await make(aiohttp_client, settings_for(upstream), store)
    msgs = long_session(12)
    turns = []
    for n in range(6, len(msgs) + 1, 4):
        sent = trimmed(msgs[:n], 16)
        resp = await client.post(CHAT, json=body(sent), headers={"X-Session-ID": "w"})
        assert resp.status == 200, await resp.text()
        turns.append(sum(m["role"] == "assistant" for m in msgs[:n]))
    await client.app[PIPELINE].turns.flush()
    logged = [t.turn for t in await store.turns("default", "w")]
    assert logged == turns  # one row per call, at the call's turn in the whole session
    assert max(e.turn for e in await store.events("default", "w")) == turns[-1]
