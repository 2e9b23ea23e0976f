"""The shared object store goes away and comes back (issue 12, faults), on a real moto S3
server behind a relay the test switches off and on (tests/support/s3.py: moto keeps its
buckets in memory, so stopping it would also lose the data).

The promise: while the store cannot be reached, a request is answered 503
`store_unavailable` within a bounded time (object_store's own retries would hold it for
180 s; store/shared.py `TIMEOUTS`) with nothing forwarded; once it is back, the same
process serves the next requests, and the turns it forwards are those one replica on a
local disk forwards for the same conversation (the failed turn resent by the client).
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from proxy.app import init_app
from proxy.config import Settings
from store.lance import LanceStore
from tests.support.app import CHAT, ClientFactory
from tests.support.fakes import FakeEmbedder
from tests.support.messages import user
from tests.support.openai_server import UpstreamServer
from tests.support.s3 import ENV_KEYS, MotoServer, Relay, moto, relay  # noqa: F401
from tests.support.trips import ASK, NEEDLE_ID, session

SID = {"X-Session-ID": "agent-9"}
DOWN = {"error": {
    "message": "The context store cannot read the session's state right now; nothing was "
               "dropped from the conversation.",
    "type": "store_error", "code": "store_unavailable"}}


def settings(upstream: UpstreamServer, path: str, options: dict[str, str]) -> Settings:
    return Settings(store={"path": path, "storage_options": options}, routes=[{
        "name": "test", "model": "test-*", "context_window": 4000, "max_output_tokens": 256,
        "upstream": {"model": "openai/gpt-4o", "api_base": upstream.url, "api_key": "sk-up"},
        "recall": {"enabled": True, "budget_fraction": 0.15, "min_similarity": 1.0,
                   "question_min_similarity": 1.0}}])


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in ENV_KEYS.items():
        monkeypatch.setenv(k, v)


async def post(client: TestClient[Any, Any], msgs: list[dict[str, Any]]) -> Any:
    return await client.post(CHAT, json={"model": "test-1", "messages": msgs}, headers=SID)


async def forwarded(client: TestClient[Any, Any], upstream: UpstreamServer,
                    msgs: list[dict[str, Any]]) -> dict[str, Any]:
    resp = await post(client, msgs)
    assert resp.status == 200, await resp.text()
    body: dict[str, Any] = upstream.history[-1].body
    return body


async def test_an_unreachable_store_is_a_503_with_nothing_forwarded_then_recovers(
        relay: Relay, aiohttp_client: ClientFactory, upstream: UpstreamServer,  # noqa: F811
        moto: MotoServer, aws_env: None, tmp_path: Path) -> None:  # noqa: F811
    # `relay` comes first so that it is torn down last, after the app has closed: the
    # app's last writes go through it.
    plan = [session(12), session(14), session(16), session(16) + [user(ASK)]]
    local = settings(upstream, str(tmp_path / "local"), {})
    ref = await aiohttp_client(init_app(local, store=LanceStore(tmp_path / "local",
                                                                FakeEmbedder())))
    want = [await forwarded(ref, upstream, msgs) for msgs in plan]
    await ref.close()

    uri = moto.bucket()
    opts = moto.storage_options(keys=False, endpoint=relay.endpoint)
    store = LanceStore(uri, FakeEmbedder(), storage_options=opts, wal=False,
                       read_consistency_interval=timedelta(0))
    client = await aiohttp_client(init_app(settings(upstream, uri, opts), store=store))
    got = [await forwarded(client, upstream, plan[0])]
    assert got[0]["messages"] != plan[0]  # it evicted (stubbed or dropped): chunks stored

    relay.down()
    sent = len(upstream.history)
    for _ in range(2):  # and again: a failed head is reopened, and fails the same way
        started = time.monotonic()
        resp = await post(client, plan[1])
        took = time.monotonic() - started
        assert resp.status == 503 and await resp.json() == DOWN
        assert took < 60, took  # bounded (object_store alone would retry for 180 s)
    assert len(upstream.history) == sent  # nothing forwarded

    relay.up()  # the store is back: the same process, no restart
    got += [await forwarded(client, upstream, msgs) for msgs in plan[1:]]
    for i, (mine, theirs) in enumerate(zip(got, want, strict=True)):
        assert mine == theirs, f"turn {i + 1} differs from one replica's on a local disk"
    assert NEEDLE_ID in str(got[-1]["messages"][-1]["content"])  # recall works again
    events = await (await client.get("/admin/evictions?session=agent-9")).json()
    assert {"evict", "recall"} <= {e["action"] for e in events["events"]}
