"""The admin API on a real aiohttp app over a real LanceStore."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from proxy.admin import setup_admin
from proxy.app import init_app
from proxy.config import Settings
from proxy.keys import STORE
from store.base import Event
from store.embed import CachedEmbedder, get_embedder
from store.lance import LanceStore

ClientFactory = Callable[..., Awaitable[TestClient[Any, Any]]]
T0 = 1_767_000_000.0


@pytest.fixture(scope="session")
def embedder() -> CachedEmbedder:
    return get_embedder("sentence-transformers", "all-MiniLM-L6-v2")


def events(tenant: str = "default") -> list[Event]:
    return [
        Event(tenant, "s1", 3, "c-aa", "TRANSIENT", 812, 0.125, "evict", "lowest EFV", "rwoe",
              preview="[{\"flight\": \"HAT136\"…", time=T0),
        Event(tenant, "s1", 7, "c-aa", "TRANSIENT", 64, 0.41, "recall",
              "similar to the current step", "rwoe", preview="HAT136 departs 09:40", time=T0 + 9),
        Event(tenant, "s2", 2, "c-bb", "EPHEMERAL", 40, 0.0, "evict", "failed tool call",
              "rwoe", time=T0 + 20),
    ]


@pytest.fixture
async def client(aiohttp_client: ClientFactory, tmp_path: Path,
                 embedder: CachedEmbedder) -> TestClient[Any, Any]:
    store = LanceStore(tmp_path / "db", embedder)
    await store.log(events() + events("other"))
    app = web.Application()
    app[STORE] = store
    setup_admin(app)

    async def close(app: web.Application) -> None:
        await app[STORE].close()

    app.on_cleanup.append(close)
    return await aiohttp_client(app)


async def test_evictions_exact_shape(client: TestClient[Any, Any]) -> None:
    resp = await client.get("/admin/evictions", params={"session": "s1"})
    assert resp.status == 200 and resp.content_type == "application/json"
    assert await resp.json() == {"events": [
        {"turn": 3, "chunk_id": "c-aa", "class": "TRANSIENT", "tokens": 812, "score": 0.125,
         "action": "evict", "reason": "lowest EFV", "policy": "rwoe", "time": T0,
         "preview": "[{\"flight\": \"HAT136\"…"},
        {"turn": 7, "chunk_id": "c-aa", "class": "TRANSIENT", "tokens": 64, "score": 0.41,
         "action": "recall", "reason": "similar to the current step", "policy": "rwoe",
         "time": T0 + 9, "preview": "HAT136 departs 09:40"},
    ]}


async def test_missing_session_is_an_openai_shaped_400(client: TestClient[Any, Any]) -> None:
    for url in ("/admin/evictions", "/admin/evictions?session=", "/admin/evictions?session=%20"):
        resp = await client.get(url)
        assert resp.status == 400
        assert await resp.json() == {"error": {
            "message": "Query parameter 'session' is required, e.g. /admin/evictions?session=ID"
                       " (see GET /admin/sessions).",
            "type": "invalid_request_error", "code": "missing_session", "param": "session"}}


async def test_unknown_session_is_empty(client: TestClient[Any, Any]) -> None:
    resp = await client.get("/admin/evictions", params={"session": "nope' OR '1'='1"})
    assert resp.status == 200 and await resp.json() == {"events": []}


async def test_sessions_listing_and_tenant_header(client: TestClient[Any, Any]) -> None:
    body = await (await client.get("/admin/sessions")).json()
    assert body == {"sessions": [
        {"session": "s2", "events": 1, "evicted": 1, "recalled": 0, "evicted_tokens": 40,
         "last_turn": 2, "last_time": T0 + 20},
        {"session": "s1", "events": 2, "evicted": 1, "recalled": 1, "evicted_tokens": 812,
         "last_turn": 7, "last_time": T0 + 9},
    ]}
    other = await (await client.get("/admin/sessions", headers={"X-Tenant-ID": "other"})).json()
    assert [s["session"] for s in other["sessions"]] == ["s2", "s1"]
    nobody = await client.get("/admin/evictions", params={"session": "s1"},
                              headers={"X-Tenant-ID": "nobody"})
    assert await nobody.json() == {"events": []}


async def test_wired_into_the_real_app(aiohttp_client: ClientFactory, tmp_path: Path) -> None:
    settings = Settings(store={"path": str(tmp_path / "db")}, routes=[])
    app = init_app(settings)
    client = await aiohttp_client(app)
    await app[STORE].log(events())
    resp = await client.get("/admin/evictions", params={"session": "s2"})
    assert [e["chunk_id"] for e in (await resp.json())["events"]] == ["c-bb"]
    bad = await client.get("/admin/evictions")
    assert bad.status == 400 and (await bad.json())["error"]["code"] == "missing_session"
