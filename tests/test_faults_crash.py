"""Crash safety: `ctxwarden serve` is killed with SIGKILL while agents are sending, then
restarted on the same store: every chunk a forwarded request replaced by a stub, and every
passage it recalled, is still there."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp
import lancedb
import orjson

from store.embed import get_embedder
from store.lance import LanceStore
from tests.support.crash import dependencies, kill, serve, wait_up
from tests.support.messages import assistant, call, filler, tool, user
from tests.support.openai_server import UpstreamServer
from tests.support.waiting import until
from tests.support.wire import closed_port

AGENTS, WINDOW = 6, 3000


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

    await until(evicting, timeout=30.0)
    go.clear()
    await until(embedded, timeout=120.0)  # the model loads at nice 19: on a busy machine, slowly
    go.set()
    await until(recalling, timeout=30.0)
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
        for name, (stubs, recalled) in deps.items():
            chunks = await reader.fetch("default", name, sorted(stubs | recalled))
            # every stubbed and every recalled chunk is durable, whole, after the SIGKILL
            assert {c.chunk_id for c in chunks} == stubs | recalled and all(c.text for c in chunks)
    finally:
        await reader.close()


def route_config(cfg: Path, port: int, db: Path, upstream: UpstreamServer, **route: Any) -> None:
    cfg.write_text(orjson.dumps({
        "server": {"port": port}, "store": {"path": str(db)},
        "routes": [{"name": "t", "model": "t-*", "context_window": WINDOW,
                    "max_output_tokens": 200, "upstream": {
                        "model": "openai/gpt-4o", "api_base": upstream.url, "api_key": "sk-up"},
                    **route}]}).decode())


async def store_state(http: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with http.get(f"{url}/admin/store") as r:
        state: dict[str, Any] = await r.json()
    return state


async def test_sigterm_does_not_wait_for_the_embedding_backlog_and_loses_nothing(
        upstream: UpstreamServer, tmp_path: Path) -> None:
    """Issue 11 item 12: with MiniLM busy and passages queued behind it, SIGTERM exits in
    seconds (it waited 6-10 s for the backlog); the chunks it left unembedded are in the
    store, and the next start embeds them."""
    port, db, cfg, log = closed_port(), tmp_path / "db", tmp_path / "config.yaml", tmp_path / "log"
    route_config(cfg, port, db, upstream)
    upstream.context_window = WINDOW - 200
    url = f"http://127.0.0.1:{port}"
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."},
                                  user("Refactor the service.")]

    async def turn(http: aiohttp.ClientSession, t: int) -> None:
        msgs.extend([assistant(None, call(f"c{t}", "read_file", f'{{"path": "f{t}.py"}}')),
                     tool(f"c{t}", filler(300, f"f{t}")), assistant(f"Read f{t}."),
                     user(f"And f{t + 1}?")])
        async with http.post(f"{url}/v1/chat/completions", headers={"X-Session-ID": "s"},
                             json={"model": "t-1", "messages": msgs}) as r:
            assert r.status == 200, await r.text()

    proc = serve(cfg, log)
    try:
        async with aiohttp.ClientSession() as http:
            await wait_up(http, url, proc)
            for t in range(6):
                await turn(http, t)

            async def embedding() -> bool:  # the model is loaded and working
                return bool((await store_state(http, url))["rows"].get("passages"))

            await until(embedding, timeout=120.0)
            for t in range(6, 26):
                await turn(http, t)
            before = await store_state(http, url)
            async with http.get(f"{url}/admin/evictions?session=s") as r:
                evicted = {e["chunk_id"] for e in (await r.json())["events"]
                           if e["action"] == "evict"}
        assert before["backlog"] >= 10 and len(evicted) >= 15  # a real backlog at SIGTERM
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 30)
        took = time.monotonic() - started
    finally:
        kill(proc)
    assert code == 0 and took < 5.0, took
    closed = [orjson.loads(line) for line in log.read_bytes().splitlines()
              if b'"store_closed"' in line]
    assert len(closed) == 1 and closed[0]["unembedded"] > 0  # it left them, did not wait
    frozen = [orjson.loads(line) for line in log.read_bytes().splitlines()
              if b'"heap_frozen"' in line]  # start-up's objects out of the collector's way
    assert len(frozen) == 1 and frozen[0]["objects"] > 100_000
    assert b'"gc_at_rest"' in log.read_bytes()  # full collections wait for rest (gcrest.py)
    assert evicted <= stored(db)[0]  # every chunk evicted before the SIGTERM is stored
    again = serve(cfg, log)
    try:
        async with aiohttp.ClientSession() as http:
            await wait_up(http, url, again)

            async def backfilled() -> bool:  # the restart embeds what the SIGTERM left
                _, chunks, embedded = await asyncio.to_thread(stored, db)
                return chunks == embedded

            await until(backfilled, timeout=180.0)
    finally:
        kill(again)


def stored(db: Path) -> tuple[set[str], set[str], set[str]]:
    """The store's chunk ids, chunk keys, and the chunk keys that have passages."""
    tables = lancedb.connect(db)
    chunks = tables.open_table("chunks").to_arrow()
    embedded = tables.open_table("passages").to_arrow()["chunk_key"].to_pylist()
    return set(chunks["chunk_id"].to_pylist()), set(chunks["id"].to_pylist()), set(embedded)
