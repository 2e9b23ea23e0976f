"""The admin API on a real aiohttp app over a real LanceStore: the decision log, sessions,
and an evicted message given back whole, with its image and PDF (proxy/admin/chunks.py)."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from proxy.admin import setup_admin, setup_chunks
from proxy.app import init_app
from proxy.config import Settings
from proxy.keys import STORE
from store.base import Event, EvictedChunk, MemoryStore
from store.embed import CachedEmbedder, get_embedder
from store.lance import LanceStore
from store.media import Media
from tests.support.app import CHAT, one_route
from tests.support.attachments import PDF, image_part, pdf_part, png, with_media
from tests.support.fakes import FakeEmbedder
from tests.support.messages import assistant, filler, user
from tests.support.openai_server import UpstreamServer

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
    setup_chunks(app)

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
    """The listing covers every tenant, each row naming its own (the inspector sends it
    back as `X-Tenant-ID` to open the session); the header narrows it to one tenant."""
    s2 = {"session": "s2", "events": 1, "evicted": 1, "recalled": 0, "evicted_tokens": 40,
          "last_turn": 2, "last_time": T0 + 20}
    s1 = {"session": "s1", "events": 2, "evicted": 1, "recalled": 1, "evicted_tokens": 812,
          "last_turn": 7, "last_time": T0 + 9}
    mine = await (await client.get("/admin/sessions",
                                   headers={"X-Tenant-ID": "default"})).json()
    assert mine == {"sessions": [{"tenant": "default", **s2}, {"tenant": "default", **s1}]}
    every = (await (await client.get("/admin/sessions")).json())["sessions"]
    assert sorted((r["tenant"], r["session"]) for r in every) == [
        ("default", "s1"), ("default", "s2"), ("other", "s1"), ("other", "s2")]
    assert {"tenant": "other", **s1} in every
    other = await (await client.get("/admin/sessions", headers={"X-Tenant-ID": "other"})).json()
    assert [(s["tenant"], s["session"]) for s in other["sessions"]] == [
        ("other", "s2"), ("other", "s1")]
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


# --- an evicted message with an image and a PDF, given back whole -----------------------------
PNG = png(8, 8)
ASKED = with_media("Is this invoice right?", image_part(PNG), pdf_part(),
                   {"type": "image_url", "image_url": {"url": "https://example.com/scan.png"}})
MEDIA = "2 images (image/png), 1 file (application/pdf)"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def evict_the_invoice(client: TestClient[Any, Any]) -> dict[str, Any]:
    """An agent session over a small window until the message with media is evicted
    (truncate: oldest first); its evict event, without the time."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You check invoices."},
                                  user("Check my invoices."), assistant("Send them."), ASKED,
                                  assistant("Looking.")]
    for t in range(12):
        msgs += [user(f"And page {t}? " + filler(300, f"p{t}")), assistant(f"Page {t} ok.")]
        resp = await client.post(CHAT, json={"model": "t-1", "messages": msgs},
                                 headers={"X-Session-ID": "inv"})
        assert resp.status == 200, await resp.text()
        events = (await (await client.get("/admin/evictions?session=inv")).json())["events"]
        with_parts = [e for e in events if e.get("media")]
        if with_parts:
            return {k: v for k, v in with_parts[0].items() if k != "time"}
    raise AssertionError("the message with media was never evicted")


async def test_an_evicted_image_and_pdf_come_back_byte_for_byte(
        aiohttp_client: ClientFactory, upstream: UpstreamServer, tmp_path: Path) -> None:
    settings = one_route(upstream.url, name="t", model="t-*", store=str(tmp_path / "db"),
                         context_window=8000, policy="truncate")
    client = await aiohttp_client(init_app(settings, LanceStore(tmp_path / "db",
                                                                FakeEmbedder())))
    event = await evict_the_invoice(client)
    cid = event["chunk_id"]
    assert event == {"turn": event["turn"], "chunk_id": cid, "class": "STRUCTURAL",
                     "tokens": event["tokens"], "score": 1.0, "action": "evict",
                     "reason": "oldest first", "policy": "truncate",
                     "preview": "Is this invoice right?", "media": MEDIA}
    base = f"/admin/sessions/inv/chunks/{cid}"
    expected = {
        "chunk": {"chunk_id": cid, "turn": 1, "role": "user", "class": "STRUCTURAL",
                  "tokens": event["tokens"], "text": "Is this invoice right?"},
        "message": ASKED,
        "attachments": [
            {"index": 1, "kind": "image", "mime": "image/png", "filename": "",
             "bytes": len(PNG), "url": None, "sha256": sha(PNG),
             "download": f"{base}/attachments/1"},
            {"index": 2, "kind": "file", "mime": "application/pdf", "filename": "invoice.pdf",
             "bytes": len(PDF), "url": None, "sha256": sha(PDF),
             "download": f"{base}/attachments/2"},
            {"index": 3, "kind": "image", "mime": "image/png", "filename": "", "bytes": 0,
             "url": "https://example.com/scan.png", "sha256": sha(b"https://example.com/scan.png"),
             "download": None}]}
    resp = await client.get(base)
    assert resp.status == 200 and await resp.json() == expected
    await client.close()  # the app closes its store; a new one reads LanceDB and the log
    again = await aiohttp_client(init_app(settings, LanceStore(tmp_path / "db", FakeEmbedder())))
    assert await (await again.get(base)).json() == expected
    image, pdf = await again.get(f"{base}/attachments/1"), await again.get(f"{base}/attachments/2")
    assert (image.status, await image.read(), image.headers["Content-Type"]) == (
        200, PNG, "image/png")
    assert (await pdf.read(), pdf.headers["Content-Type"], pdf.headers["Content-Disposition"]) == (
        PDF, "application/pdf", "attachment; filename*=UTF-8''invoice.pdf")
    assert pdf.headers["Content-Security-Policy"] == "default-src 'none'; sandbox"
    remote = await again.get(f"{base}/attachments/3")
    assert remote.status == 404 and await remote.json() == {"error": {
        "message": f"Attachment 3 of chunk {cid!r} is a reference (image), not stored bytes: "
                   "https://example.com/scan.png",
        "type": "invalid_request_error", "code": "attachment_not_stored", "param": "index"}}
    missing = await again.get(f"{base}/attachments/0")  # the text part: not an attachment
    assert missing.status == 404 and await missing.json() == {"error": {
        "message": f"Chunk {cid!r} has no attachment at index 0.",
        "type": "invalid_request_error", "code": "attachment_not_found", "param": "index"}}


async def test_unknown_chunk_and_text_only_chunk(client: TestClient[Any, Any]) -> None:
    store = client.app[STORE]
    await store.offload([EvictedChunk("default", "s1", "c-txt", 2, "tool", "TRANSIENT", 4,
                                      "plain text")])
    resp = await client.get("/admin/sessions/s1/chunks/c-txt")
    assert await resp.json() == {
        "chunk": {"chunk_id": "c-txt", "turn": 2, "role": "tool", "class": "TRANSIENT",
                  "tokens": 4, "text": "plain text"}, "message": None, "attachments": []}
    for url in ("/admin/sessions/s1/chunks/nope", "/admin/sessions/s1/chunks/nope/attachments/1",
                "/admin/sessions/s2/chunks/c-txt"):
        resp = await client.get(url)
        assert resp.status == 404
        chunk_id, session = url.split("/")[5], url.split("/")[3]
        assert await resp.json() == {"error": {
            "message": f"No offloaded chunk {chunk_id!r} in session {session!r}.",
            "type": "invalid_request_error", "code": "chunk_not_found", "param": "chunk_id"}}


async def test_chunk_routes_need_the_admin_key(aiohttp_client: ClientFactory,
                                               upstream: UpstreamServer) -> None:
    settings = Settings(store={"path": ":memory:"}, routes=[], auth={
        "mode": "proxy_keys", "keys": ["ck-client-0001"], "admin_keys": ["ak-admin-0002"]})
    client = await aiohttp_client(init_app(settings, store=MemoryStore()))
    msg = with_media("see", image_part(PNG))
    await client.app[STORE].record([EvictedChunk("default", "s", "c", 1, "user", "STRUCTURAL",
                                                 90, "see", Media.of(msg))], [])
    for path in ("/admin/sessions/s/chunks/c", "/admin/sessions/s/chunks/c/attachments/1"):
        assert (await client.get(path)).status == 401
        client_key = await client.get(path, headers={"Authorization": "Bearer ck-client-0001"})
        assert (client_key.status, (await client_key.json())["error"]["code"]) == (
            403, "admin_key_required")
        admin = await client.get(path, headers={"Authorization": "Bearer ak-admin-0002"})
        assert admin.status == 200
    assert await admin.read() == PNG


async def test_chunk_with_a_turn_that_is_no_number_is_a_400(aiohttp_client: ClientFactory,
                                                             tmp_path: Path) -> None:
    """`/admin/chunk?…&turn=abc` says so rather than answering without the recall's query."""
    app = init_app(Settings(store={"path": str(tmp_path / "db")}, routes=[]))
    client = await aiohttp_client(app)
    await app[STORE].offload([EvictedChunk("default", "s1", "c-txt", 2, "tool", "TRANSIENT", 4,
                                           "plain text")])
    ok = await client.get("/admin/chunk?session=s1&chunk_id=c-txt&turn=2")
    assert ok.status == 200 and (await ok.json())["chunk"]["text"] == "plain text"
    bad = await client.get("/admin/chunk?session=s1&chunk_id=c-txt&turn=abc")
    assert bad.status == 400
    assert await bad.json() == {"error": {
        "message": "Query parameter 'turn' must be a turn number (0 or more), not 'abc' "
                   "(see /admin/turns).",
        "type": "invalid_request_error", "code": "invalid_value", "param": "turn"}}
