"""One of two `ctxwarden serve` replicas on one moto S3 store is SIGKILLed while agents
hop between them every turn (issue 12, faults).

The promise: the other replica goes on serving the same sessions (a turn the dead one
did not answer is resent to it), and nothing is lost: every chunk a forwarded request
replaced by a stub, and every chunk it recalled, has its event and its text in the
shared store, whichever replica forwarded it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from store.lance import LanceStore
from tests.support.crash import dependencies, kill, serve, wait_up
from tests.support.fakes import FakeEmbedder
from tests.support.messages import assistant, call, filler, tool, user
from tests.support.openai_server import UpstreamServer
from tests.support.s3 import ENV_KEYS, MotoServer, moto  # noqa: F401  (the fixture)
from tests.support.wire import closed_port

AGENTS, TURNS, KILL_AFTER, WINDOW = 6, 16, 30, 3000


class Replica:
    def __init__(self, tmp: Path, uri: str, options: dict[str, str],
                 upstream: UpstreamServer) -> None:
        self.port = closed_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cfg = tmp / f"config-{self.port}.yaml"
        self.cfg.write_text(orjson.dumps({
            "server": {"port": self.port}, "store": {"path": uri, "storage_options": options},
            "routes": [{"name": "t", "model": "t-*", "context_window": WINDOW,
                        "max_output_tokens": 200, "upstream": {
                            "model": "openai/gpt-4o", "api_base": upstream.url,
                            "api_key": "sk-up"}}]}).decode())
        self.log = tmp / f"replica-{self.port}.log"
        self.proc = serve(self.cfg, self.log, ENV_KEYS)

    async def ready(self, http: aiohttp.ClientSession) -> None:
        await wait_up(http, self.url, self.proc, tries=600)

    def kill(self) -> None:
        kill(self.proc)


@pytest.fixture
def replicas(moto: MotoServer, upstream: UpstreamServer,  # noqa: F811
             tmp_path: Path) -> Iterator[tuple[str, list[Replica]]]:
    uri = moto.bucket()
    both = [Replica(tmp_path, uri, moto.storage_options(keys=False), upstream)
            for _ in range(2)]
    try:
        yield uri, both
    finally:
        for r in both:
            r.kill()


async def agent(http: aiohttp.ClientSession, both: list[Replica], i: int,
                counts: dict[str, int], answered: asyncio.Event) -> None:
    """An agent loop on another replica every turn; a turn the replica did not answer
    (it died) is resent to the other one."""
    name = f"a{i}"
    msgs: list[dict[str, Any]] = [{"role": "system", "content": f"You are agent {name}."},
                                  user(f"Refactor the {name} service.")]
    for t in range(TURNS):
        cid = f"call_{t}"
        msgs += [assistant(None, call(cid, "read_file", f'{{"path": "{name}/f{t}.py"}}')),
                 tool(cid, filler(60, f"{name}f{t}")), assistant(f"Read f{t}."),
                 user(f"What does {name}f{max(0, t - 6)}word7 do?")]
        for hop in range(2):
            target = both[(i + t + hop) % 2]
            try:
                async with http.post(f"{target.url}/v1/chat/completions",
                                     headers={"X-Session-ID": name},
                                     json={"model": "t-1", "messages": msgs}) as r:
                    assert r.status == 200, await r.text()
                    await r.read()
                break
            except (aiohttp.ClientError, OSError):
                counts["resent"] += 1  # the replica died under us: the other one
        else:
            raise AssertionError(f"{name} turn {t}: no replica answered")
        counts["answered"] += 1
        if counts["answered"] >= KILL_AFTER:
            answered.set()


async def test_a_replica_sigkilled_under_load_the_other_goes_on_and_nothing_is_lost(
        replicas: tuple[str, list[Replica]], upstream: UpstreamServer, moto: MotoServer,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    uri, both = replicas
    upstream.context_window = WINDOW - 200  # every forwarded request must be valid too
    counts = {"answered": 0, "resent": 0}
    answered = asyncio.Event()
    async with aiohttp.ClientSession() as http:
        for r in both:
            await r.ready(http)
        agents = [asyncio.create_task(agent(http, both, i, counts, answered))
                  for i in range(AGENTS)]
        await answered.wait()  # mid-run: requests in flight on both replicas
        both[0].kill()
        await asyncio.gather(*agents)
    assert counts["answered"] == AGENTS * TURNS  # every turn of every session answered
    assert counts["resent"] >= 1  # the kill caught requests in flight
    deps = dependencies(upstream.history)
    assert upstream.rejected == 0 and len(deps) == AGENTS
    assert all(stubs for stubs, _ in deps.values())  # every session evicted
    assert sum(len(r) for _, r in deps.values()) >= 1  # and recalls went out
    for k, v in ENV_KEYS.items():
        monkeypatch.setenv(k, v)
    reader = LanceStore(uri, FakeEmbedder(), storage_options=moto.storage_options(keys=False),
                        background=False)
    try:
        for name, (stubs, recalled) in deps.items():
            events = await reader.events("default", name)
            assert stubs <= {e.chunk_id for e in events if e.action == "evict"}, name
            assert recalled <= {e.chunk_id for e in events if e.action == "recall"}, name
            chunks = await reader.fetch("default", name, sorted(stubs | recalled))
            assert {c.chunk_id for c in chunks} == stubs | recalled, name
            assert all(c.text for c in chunks)
    finally:
        await reader.close()
