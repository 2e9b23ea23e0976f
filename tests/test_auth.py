"""Keys and tenants through the real app: proxy keys, pass-through, the admin surface, and a
tenant that never sees another's recalls or events whatever session id it sends."""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import openai
import pytest
from aiohttp.test_utils import TestClient
from structlog.testing import capture_logs

from proxy.app import init_app
from proxy.auth import tenant_for_key
from proxy.config import ConfigError, Settings, load_settings
from proxy.keys import PIPELINE, STORE
from store.base import MemoryStore
from tests.support.messages import long_session, user
from tests.support.openai_server import UpstreamServer
from tests.support.trips import ASK, NEEDLE_ID, file_listing, session

ClientFactory = Callable[..., Awaitable[TestClient[Any, Any]]]
CHAT = "/v1/chat/completions"
KEY_A, KEY_B, ADMIN = "ck-alpha-0001-secret", "ck-bravo-0002-secret", "ak-admin-0003-secret"
UP_KEY = "sk-up-route-key-0004"
SECRET_TEXT = "my passport number is X99"
ADMIN_PATHS = ["/admin/sessions", "/admin/evictions?session=s", "/admin/turns?session=s",
               "/admin/chunk?session=s&chunk_id=c", "/admin/store", "/ui", "/ui/",
               "/ui/app.js", "/v1/../admin/sessions"]


def settings(up: UpstreamServer, auth: dict[str, Any], *, store: str = ":memory:",
             **route: Any) -> Settings:
    base: dict[str, Any] = {
        "name": "test", "model": "test-*", "context_window": 4000, "max_output_tokens": 200,
        "upstream": {"model": "openai/gpt-4o", "api_base": up.url, "api_key": UP_KEY},
        "recall": {"enabled": False}}
    base.update(route)
    return Settings(store={"path": store}, auth=auth, routes=[base])


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def chat(text: str = "hi", **fields: Any) -> dict[str, Any]:
    return {"model": "test-1", "messages": [user(text)], **fields}


@pytest.fixture
async def keyed(aiohttp_client: ClientFactory, upstream: UpstreamServer) -> TestClient[Any, Any]:
    app = init_app(settings(upstream, {"mode": "proxy_keys", "keys": [KEY_A, KEY_B],
                                       "admin_keys": [ADMIN]}), store=MemoryStore())
    return await aiohttp_client(app)


async def test_proxy_keys_401_in_openai_shape_and_route_key_upstream(
        keyed: TestClient[Any, Any], upstream: UpstreamServer) -> None:
    missing = await keyed.post(CHAT, json=chat())
    assert missing.status == 401 and missing.headers["WWW-Authenticate"].startswith("Bearer")
    assert await missing.json() == {"error": {
        "message": "You didn't provide an API key. You need to provide your API key in an "
                   "Authorization header using Bearer auth (i.e. Authorization: Bearer "
                   "YOUR_KEY).", "type": "authentication_error", "code": "missing_api_key"}}
    for wrong in ({"Authorization": "Bearer nope"}, {"Authorization": "Token " + KEY_A},
                  bearer(ADMIN)):  # an admin key is not a client key
        resp = await keyed.post(CHAT, json=chat(), headers=wrong)
        assert resp.status == 401, wrong
        body = await resp.json()
        assert body["error"]["type"] == "authentication_error"
        assert body["error"]["code"] in ("invalid_api_key", "missing_api_key")
    assert (await keyed.get("/v1/models")).status == 401
    assert upstream.history == []  # nothing unauthenticated went anywhere
    api: Any = openai.AsyncOpenAI(base_url=str(keyed.make_url("/v1")), api_key=KEY_A,
                                  max_retries=0)
    try:
        reply = await api.chat.completions.create(model="test-1", messages=[user("hello")])
        assert reply.choices[0].message.content == "echo: hello"
        assert [m.id async for m in api.models.list()] == ["test"]
    finally:
        await api.close()
    assert upstream.history[-1].headers["Authorization"] == f"Bearer {UP_KEY}"
    for path in ("/healthz", "/metrics"):  # no tenant data: open to probes and scrapers
        assert (await keyed.get(path)).status == 200


async def test_admin_and_ui_need_the_admin_key(keyed: TestClient[Any, Any]) -> None:
    basic = "Basic " + base64.b64encode(f"admin:{ADMIN}".encode()).decode()
    for path in ADMIN_PATHS:
        none = await keyed.get(path, allow_redirects=False)
        assert none.status == 401, path
        err = (await none.json())["error"]
        assert (err["type"], err["code"]) == ("authentication_error", "missing_api_key")
        scheme = "Basic" if path.startswith("/ui") else "Bearer"
        assert none.headers["WWW-Authenticate"].startswith(scheme)  # a browser can ask
        client_key = await keyed.get(path, headers=bearer(KEY_A), allow_redirects=False)
        assert client_key.status == 403, path
        assert await client_key.json() == {"error": {
            "message": "This key may call the API but not /admin or /ui; those need an admin "
                       "key.", "type": "permission_error", "code": "admin_key_required"}}
        wrong = await keyed.get(path, headers=bearer("guess"), allow_redirects=False)
        assert wrong.status == 401 and (await wrong.json())["error"]["code"] == "invalid_api_key"
        for auth in (f"Bearer {ADMIN}", basic):
            ok = await keyed.get(path, headers={"Authorization": auth}, allow_redirects=False)
            assert ok.status in (200, 302, 404), (path, ok.status)  # 404: chunk c not stored
    page = await keyed.get("/ui/", headers={"Authorization": basic})
    assert page.status == 200 and "<html" in (await page.text()).lower()


async def test_keyed_modes_without_admin_keys_close_the_admin_api(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    app = init_app(settings(upstream, {"mode": "passthrough"}), store=MemoryStore())
    client = await aiohttp_client(app)
    resp = await client.get("/admin/sessions", headers=bearer(KEY_A))
    assert resp.status == 403 and (await resp.json())["error"]["code"] == "admin_disabled"
    # mode none (the shipped demo) stays open, and admin_keys alone guard only /admin and /ui
    app = init_app(settings(upstream, {"admin_keys": [ADMIN]}), store=MemoryStore())
    client = await aiohttp_client(app)
    assert (await client.post(CHAT, json=chat())).status == 200
    assert (await client.get("/admin/sessions")).status == 401
    assert (await client.get("/admin/sessions", headers=bearer(ADMIN))).status == 200


@pytest.mark.parametrize("transport", ["direct", "litellm"])
async def test_passthrough_sends_the_client_key_upstream(
        aiohttp_client: ClientFactory, transport: str) -> None:
    upstream = await UpstreamServer(api_key=KEY_A).start()  # the provider checks the key
    store = MemoryStore()
    try:
        route: dict[str, Any] = {"upstream": {"model": "openai/gpt-4o", "api_base": upstream.url,
                                              "transport": transport}}
        app = init_app(settings(upstream, {"mode": "passthrough"}, **route), store=store)
        client = await aiohttp_client(app)
        assert (await client.post(CHAT, json=chat())).status == 401  # no key, no call
        assert upstream.history == []
        with capture_logs() as logs:
            ok = await client.post(CHAT, json=chat(SECRET_TEXT), headers=bearer(KEY_A))
            assert ok.status == 200, await ok.text()
            assert upstream.history[-1].headers["Authorization"] == f"Bearer {KEY_A}"
            streamed = await client.post(CHAT, json=chat(stream=True), headers=bearer(KEY_A))
            assert (await streamed.text()).endswith("data: [DONE]\n\n")
            refused = await client.post(CHAT, json=chat(SECRET_TEXT), headers=bearer(KEY_B))
            assert refused.status == 401  # the provider said no: its 401, passed on
            err = (await refused.json())["error"]
            assert err["type"] == "authentication_error" and KEY_B not in err["message"]
        text = repr(logs)
        assert KEY_A not in text and KEY_B not in text and SECRET_TEXT not in text
        assert "0001" not in text and "0002" not in text  # not even the key's tail
        line = next(e for e in logs if e["event"] == "request")
        assert line["tenant"] == tenant_for_key(KEY_A)
    finally:
        await upstream.close()


async def test_no_key_or_message_text_in_any_log_line(
        keyed: TestClient[Any, Any], upstream: UpstreamServer) -> None:
    upstream.enqueue_error(500)
    with capture_logs() as logs:
        for headers in ({}, bearer("wrong-" + KEY_A), bearer(KEY_A), bearer(KEY_A)):
            await keyed.post(CHAT, json=chat(SECRET_TEXT), headers=headers)
        await keyed.post(CHAT, headers=bearer(KEY_B), json={
            "model": "test-1", "messages": long_session(14)})
        await keyed.post(CHAT, data=b'{"model": "' + SECRET_TEXT.encode(), headers=bearer(KEY_B))
        for path in ADMIN_PATHS:
            await keyed.get(path, headers=bearer(KEY_A))
            await keyed.get(path, headers=bearer(ADMIN))
    assert {e["event"] for e in logs} >= {"request", "error"}
    text = repr(logs)
    for secret in (KEY_A, KEY_B, ADMIN, UP_KEY, SECRET_TEXT, "passport", "src/m3.py"):
        assert secret not in text, secret


async def test_tenant_is_a_hash_of_the_key_in_the_store(
        keyed: TestClient[Any, Any]) -> None:
    sid = {"X-Session-ID": "same-id"}
    for key in (KEY_A, KEY_B):
        resp = await keyed.post(CHAT, json={"model": "test-1", "messages": long_session(14)},
                                headers={**bearer(key), **sid})
        assert resp.status == 200 and int(resp.headers["X-Ctxwarden-Evicted"]) > 0
    store = keyed.app[STORE]
    assert isinstance(store, MemoryStore)
    tenants = {e.tenant for e in await store.events(tenant_for_key(KEY_A), "same-id")}
    assert tenants == {tenant_for_key(KEY_A)} and tenant_for_key(KEY_A) != tenant_for_key(KEY_B)
    everything = repr(store.chunks) + repr(await store.sessions())
    assert KEY_A not in everything and KEY_B not in everything
    for key in (KEY_A, KEY_B):  # each tenant's copy of the same session, seen by the admin
        view = await keyed.get("/admin/evictions?session=same-id",
                               headers={**bearer(ADMIN), "X-Tenant-ID": tenant_for_key(key)})
        assert len((await view.json())["events"]) > 0
    default = await keyed.get("/admin/evictions?session=same-id", headers=bearer(ADMIN))
    assert (await default.json()) == {"events": []}


async def test_no_recall_or_event_crosses_tenants_whatever_the_session_id(
        aiohttp_client: ClientFactory, upstream: UpstreamServer, tmp_path: Path) -> None:
    """A holds a fact (evicted, embedded); B sends the same session id and asks for it."""
    app = init_app(settings(upstream, {"mode": "proxy_keys", "keys": [KEY_A, KEY_B],
                                       "admin_keys": [ADMIN]}, store=str(tmp_path / "db"),
                            context_window=4000, max_output_tokens=256, recall={
                                "enabled": True, "budget_fraction": 0.15,
                                "min_similarity": 0.25}))
    client = await aiohttp_client(app)
    sid = {"X-Session-ID": "shared"}

    async def send(key: str, msgs: list[dict[str, Any]]) -> dict[str, Any]:
        resp = await client.post(CHAT, json={"model": "test-1", "messages": msgs},
                                 headers={**bearer(key), **sid})
        assert resp.status == 200, await resp.text()
        return upstream.history[-1].body

    mine = session(16)
    theirs = [{**m, "content": file_listing(99) if m.get("role") == "tool" else "Noted."}
              if "Denver" in str(m.get("content")) else m for m in session(16)]
    await send(KEY_A, mine)
    await send(KEY_B, theirs)
    await app[STORE].flush()  # every evicted chunk embedded and searchable
    question = [user(ASK)]
    got_a = await send(KEY_A, mine + question)
    assert NEEDLE_ID in str(got_a["messages"][-1]["content"])  # recall works for its owner
    got_b = await send(KEY_B, theirs + question)
    assert NEEDLE_ID not in str(got_b["messages"])  # never in another tenant's request
    assert "Denver (DEN)" not in str(got_b["messages"]) and "K8P2QL" not in str(got_b)

    async def admin(path: str, key: str) -> Any:
        resp = await client.get(path, headers={**bearer(ADMIN),
                                               "X-Tenant-ID": tenant_for_key(key)})
        return resp.status, await resp.json()

    _, ev_a = await admin("/admin/evictions?session=shared", KEY_A)
    _, ev_b = await admin("/admin/evictions?session=shared", KEY_B)
    a_chunks = {e["chunk_id"] for e in ev_a["events"]}
    assert any(e["action"] == "recall" for e in ev_a["events"])
    assert all(NEEDLE_ID not in e["preview"] for e in ev_b["events"])
    needle_chunk = next(e["chunk_id"] for e in ev_a["events"]
                        if e["action"] == "recall" and NEEDLE_ID in e["preview"])
    assert needle_chunk in a_chunks
    status, _ = await admin(f"/admin/chunk?session=shared&chunk_id={needle_chunk}", KEY_B)
    assert status == 404  # B cannot read A's chunk by naming it either


def test_keys_from_env_and_config_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXWARDEN_AUTH__MODE", "proxy_keys")
    monkeypatch.setenv("CTXWARDEN_AUTH__KEYS", f"{KEY_A}, {KEY_B}")
    monkeypatch.setenv("CTXWARDEN_AUTH__ADMIN_KEYS_ENV", "MY_ADMIN_KEYS")
    monkeypatch.setenv("CTXWARDEN_STORE__PATH", ":memory:")
    monkeypatch.setenv("MY_ADMIN_KEYS", ADMIN)
    s = load_settings()
    assert s.auth.mode == "proxy_keys"
    assert [k.get_secret_value() for k in s.auth.keys] == [KEY_A, KEY_B]
    assert KEY_A not in repr(s) and KEY_A not in str(s.model_dump())
    init_app(s)  # the admin key variable is set: starts
    monkeypatch.delenv("MY_ADMIN_KEYS")
    with pytest.raises(ConfigError, match="auth.admin_keys_env: the environment variable "
                                          "MY_ADMIN_KEYS is not set"):
        init_app(load_settings())
    monkeypatch.delenv("CTXWARDEN_AUTH__ADMIN_KEYS_ENV")
    monkeypatch.setenv("CTXWARDEN_AUTH__KEYS", "")
    with pytest.raises(ConfigError, match="mode proxy_keys needs at least one key"):
        init_app(load_settings())
    monkeypatch.setenv("CTXWARDEN_AUTH__MODE", "open-sesame")
    with pytest.raises(ConfigError, match="CTXWARDEN_AUTH__MODE: Input should be 'none', "
                                          "'proxy_keys'"):
        load_settings()


KEYS_FROM_ENV = Settings(store={"path": ":memory:"},
                         auth={"mode": "proxy_keys", "keys_env": "CTXW_TEST_CLIENTS",
                               "admin_keys_env": "CTXW_TEST_ADMINS"},
                         routes=[{"name": "r", "upstream": {
                             "model": "openai/x", "api_key_env": "CTXW_TEST_UPSTREAM"}}])


def test_every_unset_key_variable_is_reported_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both `*_env` of auth and a route's `api_key_env` unset: one error lists all three,
    rather than one per start-up."""
    for name in ("CTXW_TEST_CLIENTS", "CTXW_TEST_ADMINS", "CTXW_TEST_UPSTREAM"):
        monkeypatch.delenv(name, raising=False)
    s = KEYS_FROM_ENV
    with pytest.raises(ConfigError) as info:
        init_app(s, store=MemoryStore())
    assert str(info.value) == (
        "auth.keys_env: the environment variable CTXW_TEST_CLIENTS is not set\n"
        "auth.admin_keys_env: the environment variable CTXW_TEST_ADMINS is not set\n"
        "routes[0] ('r'): upstream.api_key_env: the environment variable CTXW_TEST_UPSTREAM "
        "is not set")
    monkeypatch.setenv("CTXW_TEST_CLIENTS", " , ")  # set, but holds no key
    with pytest.raises(ConfigError) as info:
        init_app(s, store=MemoryStore())
    assert str(info.value).splitlines()[:2] == [
        "auth.admin_keys_env: the environment variable CTXW_TEST_ADMINS is not set",
        "auth.keys: mode proxy_keys needs at least one key (auth.keys or auth.keys_env)"]


def test_a_key_variable_set_but_empty_is_called_empty_not_unset(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`CTXWARDEN_KEYS=` (exported, empty) is not "not set": the message says which."""
    monkeypatch.setenv("CTXW_TEST_CLIENTS", "")
    monkeypatch.setenv("CTXW_TEST_UPSTREAM", "")
    monkeypatch.delenv("CTXW_TEST_ADMINS", raising=False)
    with pytest.raises(ConfigError) as info:
        init_app(KEYS_FROM_ENV, store=MemoryStore())
    assert str(info.value) == (
        "auth.keys_env: the environment variable CTXW_TEST_CLIENTS is empty (it holds no key)\n"
        "auth.admin_keys_env: the environment variable CTXW_TEST_ADMINS is not set\n"
        "routes[0] ('r'): upstream.api_key_env: the environment variable CTXW_TEST_UPSTREAM "
        "is empty")


@pytest.mark.parametrize("stream", [False, True])
async def test_passthrough_writes_nothing_for_a_key_the_provider_refuses(
        aiohttp_client: ClientFactory, stream: bool) -> None:
    upstream = await UpstreamServer(api_key=KEY_A).start()  # the provider checks the key
    store = MemoryStore()
    try:
        route: dict[str, Any] = {"upstream": {"model": "openai/gpt-4o", "api_base": upstream.url}}
        client = await aiohttp_client(init_app(settings(upstream, {"mode": "passthrough"},
                                                        **route), store=store))
        evicting = {"model": "test-1", "messages": long_session(12), "stream": stream}
        refused = await client.post(CHAT, json=evicting, headers=bearer(KEY_B))
        assert refused.status == 401
        assert await store.sessions() == [] and store.chunks == {}  # a bogus key: nothing
        pipeline = client.app[PIPELINE]
        assert pipeline.sent.bytes == 0  # nor a body kept for /admin/sent, nor the session's
        assert [s.last_prompt for s in pipeline.sessions._states.values()] == [[]]  # prompt
        assert len(upstream.history) == 1  # it did reach the provider, which said no
        accepted = await client.post(CHAT, json=evicting, headers=bearer(KEY_A))
        assert accepted.status == 200
        await accepted.read()
        assert int(accepted.headers["X-Ctxwarden-Evicted"]) > 0
        mine = await store.sessions(tenant_for_key(KEY_A))
        assert len(mine) == 1 and store.chunks  # written once the provider said yes
        assert client.app[PIPELINE].sent.turns(tenant_for_key(KEY_A), mine[0]["session"])
        assert await store.sessions(tenant_for_key(KEY_B)) == []
        # later turns of a proven key are written before they are forwarded, as always
        upstream.enqueue_error(500)
        longer = {**evicting, "messages": long_session(14)}
        failed = await client.post(CHAT, json=longer, headers=bearer(KEY_A))
        assert failed.status == 502
        events = await store.events(tenant_for_key(KEY_A), mine[0]["session"])
        assert {e.turn for e in events if e.action == "evict"} == {24, 28}
    finally:
        await upstream.close()

