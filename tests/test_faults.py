"""Faults through the real app: upstreams that refuse, stall, fail or break, clients that
leave, and a LanceDB store that is read-only, full or raising. Each keeps its meaning for
the client, nothing evicted is lost, and the proxy stays up. (The transports alone are
tested in test_upstream.py; 429 and a streamed disconnect through the app in test_proxy.py.)
Last, `ctxwarden serve` is killed with SIGKILL under load and restarted.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import re
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestClient

from proxy.app import init_app
from proxy.config import Settings
from store import schema as S
from store.base import EvictedChunk, MemoryStore, Store
from store.embed import get_embedder
from store.lance import LanceStore
from tests.helpers import assistant, call, filler, tool, user
from tests.support.openai_server import UpstreamServer
from tests.test_proxy import long_session
from tests.test_store import read_only
from tests.test_upstream import closed_port, parse_sse

ClientFactory = Callable[..., Awaitable[TestClient[Any, Any]]]
ROOT = Path(__file__).resolve().parents[1]
CHAT = "/v1/chat/completions"
STUB = re.compile(r"offloaded as chunk ([0-9a-f~]+);")


def config(api_base: str, store: str = ":memory:", **route: Any) -> Settings:
    base: dict[str, Any] = {
        "name": "t", "model": "t-*", "context_window": 4000, "max_output_tokens": 200,
        "upstream": {"model": "openai/gpt-4o", "api_base": api_base, "api_key": "sk-up"},
        "recall": {"enabled": False}}
    base.update(route)
    return Settings(store={"path": store}, routes=[base])


async def make(aiohttp_client: ClientFactory, settings: Settings,
               store: Store | None = None) -> TestClient[Any, Any]:
    return await aiohttp_client(init_app(settings, store=store or MemoryStore()),
                                server_kwargs={"handler_cancellation": True})


def chat(stream: bool = False, text: str = "hi") -> dict[str, Any]:
    return {"model": "t-1", "stream": stream, "messages": [{"role": "user", "content": text}]}


# --- upstream faults ---------------------------------------------------------------------
@pytest.mark.parametrize("stream", [False, True])
async def test_refused_and_stalled_upstreams_are_502_and_504(
        aiohttp_client: ClientFactory, upstream: UpstreamServer, stream: bool) -> None:
    base = f"http://127.0.0.1:{closed_port()}/v1"
    client = await make(aiohttp_client, config(base))
    resp = await client.post(CHAT, json=chat(stream))
    assert resp.status == 502
    err = (await resp.json())["error"]
    assert (err["type"], err["code"]) == ("upstream_error", "upstream_unreachable")
    assert err["message"].startswith(f"Could not connect to the upstream at {base}: ")
    assert "sk-up" not in err["message"]
    client = await make(aiohttp_client, config(upstream.url, upstream={
        "model": "openai/gpt-4o", "api_base": upstream.url, "api_key": "sk-up",
        "timeout": 0.2}))
    upstream.enqueue("too late", delay=1.5)
    resp = await client.post(CHAT, json=chat(stream))
    assert resp.status == 504
    assert await resp.json() == {"error": {
        "message": f"The upstream at {upstream.url} did not answer within 0.2s.",
        "type": "timeout_error", "code": "upstream_timeout"}}
    assert (await client.get("/healthz")).status == 200


@pytest.mark.parametrize(("status", "provider"), [
    (500, "The server had an error while processing your request. Sorry about that!"),
    (503, "The engine is currently overloaded, please try again later")])
@pytest.mark.parametrize("stream", [False, True])
async def test_upstream_5xx_is_502_with_the_providers_message(
        aiohttp_client: ClientFactory, upstream: UpstreamServer, status: int, provider: str,
        stream: bool) -> None:
    client = await make(aiohttp_client, config(upstream.url))
    upstream.enqueue_error(status)
    resp = await client.post(CHAT, json=chat(stream))
    assert resp.status == 502
    assert await resp.json() == {"error": {
        "message": f"The upstream answered HTTP {status}: {provider}",
        "type": "upstream_error", "code": "bad_gateway"}}


async def test_streamed_429_keeps_retry_after(aiohttp_client: ClientFactory,
                                              upstream: UpstreamServer) -> None:
    client = await make(aiohttp_client, config(upstream.url))
    upstream.enqueue_error(429, headers={"Retry-After": "12"})
    resp = await client.post(CHAT, json=chat(stream=True))
    assert resp.status == 429 and resp.headers["Retry-After"] == "12"
    assert resp.content_type == "application/json"  # refused before any event was sent
    assert (await resp.json())["error"]["code"] == "rate_limit_exceeded"


@pytest.mark.parametrize("transport", ["direct", "litellm"])
async def test_a_stream_broken_midway_ends_with_an_error_event(
        aiohttp_client: ClientFactory, upstream: UpstreamServer, transport: str) -> None:
    client = await make(aiohttp_client, config(upstream.url, upstream={
        "model": "openai/gpt-4o", "api_base": upstream.url, "api_key": "sk-up",
        "transport": transport}))
    upstream.enqueue("one two three four five six", break_after=3, chunk_delay=0.005)
    resp = await client.post(CHAT, json=chat(stream=True))
    assert resp.status == 200  # the status line had left before the upstream broke
    events = parse_sse(await resp.read())
    assert "[DONE]" not in events
    assert any(e.get("choices") for e in events[:-1])
    last = events[-1]["error"]
    assert (last["type"], last["code"]) == ("upstream_error", "upstream_stream_broken")
    assert (await client.post(CHAT, json=chat())).status == 200  # and the proxy goes on


async def test_a_client_leaving_a_pending_request_cancels_the_upstream_call(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    client = await make(aiohttp_client, config(upstream.url))
    upstream.enqueue("never read", delay=3.0)
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(client.post(CHAT, json=chat()), 0.3)  # hangs up
    assert await upstream.wait_disconnects(1, timeout=2.0)  # the upstream saw it close
    assert upstream.served == 0


# --- store faults ------------------------------------------------------------------------
@contextlib.contextmanager
def failing(store: LanceStore, table: str, exc: BaseException) -> Iterator[None]:
    """LanceDB itself fails on this table's writes (disk full, an I/O error)."""
    tbl = store._tables[table]

    def refuse(*_args: Any, **_kw: Any) -> Any:
        raise exc

    tbl.merge_insert = refuse
    try:
        yield
    finally:
        del tbl.merge_insert


def fault(kind: str, store: LanceStore, db: Path) -> contextlib.AbstractContextManager[None]:
    if kind == "read_only":
        return read_only(db)
    if kind == "full":
        return failing(store, S.CHUNKS, OSError(errno.ENOSPC, "No space left on device"))
    return failing(store, S.EVENTS, RuntimeError("lance error: simulated I/O failure"))


@pytest.mark.parametrize("kind", ["read_only", "full", "raising"])
async def test_store_faults_lose_nothing_and_what_was_held_back_lands(
        aiohttp_client: ClientFactory, upstream: UpstreamServer, tmp_path: Path,
        kind: str) -> None:
    db = tmp_path / "db"
    # No embedding worker: what is at stake is the raw chunks and the events (MiniLM would
    # only add seconds of model loading; the worker's own faults are in test_store.py).
    store = LanceStore(db, get_embedder("sentence-transformers", "all-MiniLM-L6-v2"),
                       background=False)
    client = await make(aiohttp_client, config(upstream.url, str(db)), store)
    assert (await client.post(CHAT, json=chat())).status == 200  # the store is open
    sid = {"X-Session-ID": "s-fault"}
    msgs = {"model": "t-1", "messages": long_session(14)}
    forwarded = len(upstream.history)
    with fault(kind, store, db):
        refused = await client.post(CHAT, json=msgs, headers=sid)
        assert refused.status == 503
        err = (await refused.json())["error"]
        assert (err["type"], err["code"]) == ("store_error", "store_unavailable")
        assert err["message"].endswith("nothing was dropped from the conversation.")
        assert len(upstream.history) == forwarded  # nothing went out without its chunks
        assert (await client.get("/healthz")).status == 200  # the proxy stays up
        small = await client.post(CHAT, json=chat(text="no eviction needed"))
        assert small.status == 200  # what needs no offload still goes through
    assert await store.events("default", "s-fault") == [] or kind == "raising"
    retried = await client.post(CHAT, json=msgs, headers=sid)  # after recovery
    assert retried.status == 200 and int(retried.headers["X-Ctxwarden-Evicted"]) > 0
    sent = orjson.dumps(upstream.history[-1].body).decode()
    stubs = STUB.findall(sent)
    evicted = [e.chunk_id for e in await store.events("default", "s-fault")
               if e.action == "evict"]
    assert len(evicted) == len(set(evicted)) == int(retried.headers["X-Ctxwarden-Evicted"])
    assert stubs and set(stubs) <= set(evicted)  # each logged once, every stub among them
    stored = await store.fetch("default", "s-fault", evicted)
    assert [c.chunk_id for c in stored] == evicted and all(c.text for c in stored)


# --- crash safety: SIGKILL under load, then restart ---------------------------------------
RECALLED = re.compile(r"\[chunk ([0-9a-f~]+), turn \d+, \w+\]")
AGENTS, WINDOW = 6, 3000


def serve(cfg: Path) -> subprocess.Popen[bytes]:
    exe = Path(sys.executable).with_name("ctxwarden")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "proxy.cli"]
    return subprocess.Popen([*cmd, "serve", "--config", str(cfg)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait()


async def wait_up(http: aiohttp.ClientSession, url: str, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(300):
        assert proc.poll() is None, "ctxwarden serve exited"
        with contextlib.suppress(aiohttp.ClientError):
            async with http.get(f"{url}/healthz") as r:
                if r.status == 200:
                    return
        await asyncio.sleep(0.1)
    raise TimeoutError(url)


async def agent(http: aiohttp.ClientSession, url: str, name: str, go: asyncio.Event,
                counts: dict[str, int]) -> None:
    """An agent loop: each turn reads a file and resends the whole history."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": f"You are agent {name}."},
                                  user(f"Refactor the {name} service.")]
    for t in range(1000):
        cid = f"call_{t}"
        msgs += [assistant(None, call(cid, "read_file", f'{{"path": "{name}/f{t}.py"}}')),
                 tool(cid, filler(60, f"{name}f{t}")), assistant(f"Read f{t}."),
                 user(f"What does {name}f{t}word7 do?")]
        await go.wait()
        counts["sent"] += 1
        try:
            async with http.post(f"{url}/v1/chat/completions", headers={"X-Session-ID": name},
                                 json={"model": "t-1", "messages": msgs}) as r:
                await r.read()
            counts["answered"] += 1
        except (aiohttp.ClientError, OSError):
            return  # the proxy died under us


def dependencies(history: list[Any]) -> dict[str, tuple[set[str], set[str]]]:
    """Per session: chunks a forwarded request replaced by stubs, and chunks it recalled."""
    out: dict[str, tuple[set[str], set[str]]] = {}
    for rec in history:
        msgs = rec.body["messages"]
        name = msgs[0]["content"].removeprefix("You are agent ").rstrip(".")
        stubs, recalled = out.setdefault(name, (set(), set()))
        stubs.update(STUB.findall(orjson.dumps(msgs).decode()))
        recalled.update(RECALLED.findall(str(msgs[-1]["content"])))
    return out


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def load_then_kill(http: aiohttp.ClientSession, url: str, upstream: UpstreamServer,
                         proc: subprocess.Popen[bytes]) -> dict[str, int]:
    """Agents evict; once MiniLM has embedded what they evicted (recall needs it), they go
    on, and the proxy is SIGKILLed with requests in flight as soon as recalls flow."""
    go = asyncio.Event()
    go.set()
    counts = {"sent": 0, "answered": 0}
    agents = [asyncio.create_task(agent(http, url, f"w{i}", go, counts))
              for i in range(AGENTS)]

    async def evicting() -> bool:
        deps = dependencies(upstream.history)
        return len(deps) == AGENTS and all(s for s, _ in deps.values())

    async def embedded() -> bool:
        async with http.get(f"{url}/admin/store") as r:
            state = await r.json()
        return bool(state["backlog"] == 0 and state["rows"].get("passages"))

    async def recalling() -> bool:
        return sum(len(r) for _, r in dependencies(upstream.history).values()) >= 2

    await until(evicting)
    go.clear()
    await until(embedded)
    go.set()
    await until(recalling)
    kill(proc)
    await asyncio.gather(*agents)
    return counts


async def test_sigkill_under_load_loses_nothing_a_forwarded_request_depended_on(
        upstream: UpstreamServer, tmp_path: Path) -> None:
    port, db = closed_port(), tmp_path / "db"
    cfg = tmp_path / "config.yaml"
    cfg.write_text(orjson.dumps({
        "server": {"port": port}, "store": {"path": str(db)},
        "routes": [{"name": "t", "model": "t-*", "context_window": WINDOW,
                    "max_output_tokens": 200, "upstream": {
                        "model": "openai/gpt-4o", "api_base": upstream.url, "api_key": "sk-up"},
                    "recall": {"enabled": True, "min_similarity": 0.0}}]}).decode())
    upstream.context_window = WINDOW - 200  # every forwarded request must also be valid
    url = f"http://127.0.0.1:{port}"
    proc = serve(cfg)
    try:
        async with aiohttp.ClientSession() as http:
            await wait_up(http, url, proc)
            counts = await load_then_kill(http, url, upstream, proc)
    finally:
        kill(proc)
    deps = dependencies(upstream.history)
    assert counts["sent"] > counts["answered"]  # killed with requests in flight
    assert upstream.rejected == 0 and len(deps) == AGENTS
    assert sum(len(s) for s, _ in deps.values()) >= AGENTS  # evictions went out
    assert sum(len(r) for _, r in deps.values()) >= 1  # and so did recalls
    again = serve(cfg)
    try:
        async with aiohttp.ClientSession() as http:
            await wait_up(http, url, again)
            for name, (stubs, recalled) in deps.items():
                async with http.get(f"{url}/admin/evictions?session={name}") as r:
                    events = (await r.json())["events"]
                assert stubs <= {e["chunk_id"] for e in events if e["action"] == "evict"}
                assert recalled <= {e["chunk_id"] for e in events if e["action"] == "recall"}
    finally:
        kill(again)
    reader = LanceStore(db, get_embedder("sentence-transformers", "all-MiniLM-L6-v2"),
                        background=False)
    try:
        for name, (stubs, _) in deps.items():
            chunks = await reader.fetch("default", name, sorted(stubs))
            assert {c.chunk_id for c in chunks} == stubs and all(c.text for c in chunks)
        await reader._ready()
        passages = await reader._passages()
        keys = {S.chunk_key("default", n, c) for n, (_, rec) in deps.items() for c in rec}
        rows = await passages.query().where(
            "chunk_key IN (" + ", ".join(f"'{k}'" for k in keys) + ")").to_list()
        assert {r["chunk_key"] for r in rows} == keys  # every recalled passage is there
    finally:
        await reader.close()


async def test_concurrent_writes_share_commits(tmp_path: Path) -> None:
    """200 requests offloading at once: LanceDB alone refused with "Too many concurrent
    writers" under `make bench-load`; grouped, every write lands, in far fewer commits."""
    store = LanceStore(tmp_path / "db", get_embedder("sentence-transformers",
                                                     "all-MiniLM-L6-v2"), background=False)
    try:
        await store.offload([EvictedChunk("t", "s0", "c-0", 1, "tool", "TRANSIENT", 3, "x")])
        before = await store._tables[S.CHUNKS].version()
        await asyncio.gather(*(store.offload([EvictedChunk(
            "t", f"s{i}", f"c-{i}", 1, "tool", "TRANSIENT", 3, f"text {i}")])
            for i in range(1, 201)))
        commits = await store._tables[S.CHUNKS].version() - before
        assert (await store.stats())["chunks"] == 201
        assert 1 <= commits <= 20
    finally:
        await store.close()
