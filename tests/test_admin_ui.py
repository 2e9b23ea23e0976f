"""The inspector in a real headless Chromium (Debian's /usr/bin/chromium, driven by
Playwright without its own browser download), over the real app, the shipped demo route
and a real LanceDB store: the page must show what `/admin/evictions` reports.

Skipped only when no Chromium is installed (`make browser` installs it as root).
"""

from __future__ import annotations

import io
import json
import os
import shutil
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from proxy.app import init_app
from proxy.cli.demo import drive
from proxy.cli.demo_script import ADR, LATE_QUESTION
from proxy.config import load_settings

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("CTXWARDEN_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
DOCS_IMG = ROOT / "docs" / "img" / "inspector.png"
ClientFactory = Callable[..., Awaitable[TestClient[Any, Any]]]

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).is_file(),
    reason=f"no Chromium at {CHROMIUM}: `make browser` installs Debian's chromium and "
           "chromium-driver (needs root and apt); set CTXWARDEN_CHROMIUM to use another")


async def test_inspector_shows_what_the_api_reports(aiohttp_client: ClientFactory,
                                                    tmp_path: Path) -> None:
    from playwright.async_api import async_playwright

    settings = load_settings(ROOT / "config.yaml", store={"path": str(tmp_path / "db")})
    client = await aiohttp_client(init_app(settings))
    base = str(client.make_url("")).rstrip("/")
    await drive(client.session, base, "demo-ui", io.StringIO())
    api = await (await client.get("/admin/evictions?session=demo-ui")).json()
    turns = (await (await client.get("/admin/turns?session=demo-ui")).json())["turns"]
    evicts = [e for e in api["events"] if e["action"] == "evict"]
    recalls = [e for e in api["events"] if e["action"] == "recall"]
    assert evicts and recalls and len(turns) == 10  # the demo evicts, recalls, 10 turns

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page(viewport={"width": 1400, "height": 1000})
            errors: list[str] = []  # script errors, CSP violations, failed loads
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            await page.goto(f"{base}/ui/")
            await page.locator('#sessions tr[data-session="demo-ui"]').click()
            await page.locator("#events tbody tr").first.wait_for()  # drawn after the chart
            assert await page.evaluate("[inspector.session, !!inspector.chart]") == [
                "demo-ui", True]
            assert await page.locator("#session-id").text_content() == "demo-ui"

            # The table: one row per API event, same order and values.
            cells = await page.locator("#events tbody tr").evaluate_all(
                "rows => rows.map(r => [...r.cells].map(c => c.textContent))")
            assert [c[:5] for c in cells] == [
                [str(e["turn"]), e["action"], e["class"], f"{e['tokens']:,}", f"{e['score']:.4f}"]
                for e in api["events"]]

            # The chart: per turn, the evicted segments add up to every eviction the API
            # logged so far (decisions are sticky; a bar classes chunks as of its turn, so a
            # result superseded later moves to EPHEMERAL), the recalled segments are that
            # turn's recalls by class, and at the first eviction the classes match too.
            sets = await page.evaluate(
                "inspector.chart.data.datasets.map(d => ({kind: d.kind, klass: d.klass,"
                " data: d.data, drawn: inspector.chart.getDatasetMeta("
                "inspector.chart.data.datasets.indexOf(d)).data.length}))")
            assert all(s["drawn"] == len(turns) for s in sets)

            def drawn(kind: str, i: int) -> dict[str, int]:
                return {s["klass"]: s["data"][i] for s in sets
                        if s["kind"] == kind and s["data"][i]}

            def logged(rows: list[dict[str, Any]], turn: int, upto: bool) -> dict[str, int]:
                out: dict[str, int] = defaultdict(int)
                for e in rows:
                    if e["turn"] == turn or (upto and e["turn"] < turn):
                        out[e["class"]] += e["tokens"]
                return dict(out)

            for i, t in enumerate(turns):
                assert (sum(drawn("evicted", i).values())
                        == sum(logged(evicts, t["turn"], upto=True).values()))
                assert drawn("recalled", i) == logged(recalls, t["turn"], upto=False)
            first = min(e["turn"] for e in evicts)
            at = [t["turn"] for t in turns].index(first)
            assert drawn("evicted", at) == logged(evicts, first, upto=False)
            assert drawn("evicted", at - 1) == {}
            budget = next(s for s in sets if s["kind"] == "budget")["data"]
            assert budget == [t["budget"] for t in turns] and budget[0] == 1012

            # Click the ADR's eviction: the exact text the store kept.
            adr = next(i for i, e in enumerate(api["events"])
                       if e["action"] == "evict" and e["preview"].startswith("# ADR-012"))
            await page.locator("#events tbody tr").nth(adr).click()
            await page.locator("#detail").wait_for()
            assert await page.locator("#detail-text").text_content() == ADR
            assert await page.locator("#detail-query").is_hidden()

            # Click the late question's recall: the chunk, and the query that found it.
            # (Earlier turns may recall too, once the embedder has caught up.)
            rec = next(i for i, e in enumerate(api["events"]) if e["action"] == "recall"
                       and e["turn"] == turns[-1]["turn"] and "ADR-012" in e["preview"])
            await page.locator("#events tbody tr").nth(rec).click()
            await page.locator("#detail-query").wait_for()
            assert await page.locator("#detail-query-text").text_content() == LATE_QUESTION
            assert await page.locator("#detail-text").text_content() == ADR
            # ... and the request that turn forwarded, the recall block in it
            sent = await (await client.get(
                f"/admin/sent?session=demo-ui&turn={turns[-1]['turn']}")).json()
            await page.locator("#detail-sent summary").click()
            await page.wait_for_function(
                "document.getElementById('detail-sent-text').textContent.length > 0")
            shown = await page.locator("#detail-sent-text").text_content()
            assert shown is not None and json.loads(shown) == sent
            assert "ADR-012" in sent["messages"][-1]["content"]  # recalled into the last
            assert errors == []

            shot = tmp_path / "inspector.png"
            await page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 20_000
            print(f"screenshot: {shot}")
            if not DOCS_IMG.exists() or os.environ.get("CTXWARDEN_UPDATE_SCREENSHOT"):
                DOCS_IMG.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(shot, DOCS_IMG)
        finally:
            await browser.close()


async def test_inspector_asks_for_the_admin_key_on_401(aiohttp_client: ClientFactory,
                                                      tmp_path: Path) -> None:
    """Until proxy/auth.py guards /admin, a middleware here answers 401 without the key."""
    from aiohttp import web
    from playwright.async_api import async_playwright

    from proxy.config import Settings
    from proxy.errors import AuthenticationFailed
    from store.base import Event, MemoryStore

    store = MemoryStore()
    await store.log([Event("default", "s-key", 2, "c1", "TRANSIENT", 99, 0.25, "evict",
                           "lowest expected future value per token", "rwoe", preview="x")])
    app = init_app(Settings(store={"path": ":memory:"}, routes=[]), store=store)
    seen: list[str | None] = []

    @web.middleware
    async def admin_key(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path.startswith("/admin/"):
            seen.append(request.headers.get("Authorization"))
            if request.headers.get("Authorization") != "Bearer k1":
                return AuthenticationFailed("An admin key is required.").response()
        return await handler(request)  # type: ignore[no-any-return]

    app.middlewares.append(admin_key)
    client = await aiohttp_client(app)
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page()
            await page.goto(str(client.make_url("/ui")))  # redirects to /ui/
            await page.locator("#auth").wait_for()
            await page.locator("#auth-key").fill("wrong")
            await page.locator("#auth button").click()
            await page.locator("#auth-key").wait_for()  # asked again: the key was refused
            await page.locator("#auth-key").fill("k1")
            await page.locator("#auth button").click()
            await page.locator('#sessions tr[data-session="s-key"]').click()
            await page.locator("#events tbody tr").first.wait_for()
            assert await page.locator("#events tbody tr td").nth(1).text_content() == "evict"
            assert await page.evaluate("localStorage.getItem('ctxwarden.adminKey')") == "k1"
            assert await page.locator("#auth").is_hidden()
        finally:
            await browser.close()
    assert seen[0] is None and "Bearer wrong" in seen and seen[-1] == "Bearer k1"


async def test_the_inspector_opens_a_client_keys_session(aiohttp_client: ClientFactory,
                                                         tmp_path: Path) -> None:
    """With client keys, a session belongs to its key's tenant. The listing names it, the
    inspector sends it back as `X-Tenant-ID` when it opens the session, and `ctxwarden
    demo` finds it the same way (it printed "turn ?" and "0 turns" when it asked for the
    default tenant's)."""
    from playwright.async_api import async_playwright

    from proxy.auth import tenant_for_key

    client_key, admin_key = "sk-client-1", "sk-admin-1"
    settings = load_settings(ROOT / "config.yaml", store={"path": str(tmp_path / "db")},
                             auth={"mode": "proxy_keys", "keys": [client_key],
                                   "admin_keys": [admin_key]})
    client = await aiohttp_client(init_app(settings))
    base = str(client.make_url("")).rstrip("/")
    out = io.StringIO()
    result = await drive(client.session, base, "keyed-ui", out,
                         api_headers={"Authorization": f"Bearer {client_key}"},
                         admin_headers={"Authorization": f"Bearer {admin_key}"})
    tenant = tenant_for_key(client_key)
    assert result.tenant == tenant and len(result.turns) == 10 and "turn ?" not in out.getvalue()
    assert f"ctxwarden log --session keyed-ui --tenant {tenant}" in out.getvalue()
    assert f"/ui/#session=keyed-ui&tenant={tenant}" in out.getvalue()
    admin = {"Authorization": f"Bearer {admin_key}", "X-Tenant-ID": tenant}
    api = await (await client.get("/admin/evictions?session=keyed-ui", headers=admin)).json()
    assert api["events"]

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            context = await browser.new_context(
                http_credentials={"username": "admin", "password": admin_key})
            page = await context.new_page()
            await page.add_init_script(f"localStorage.setItem('ctxwarden.adminKey', "
                                       f"'{admin_key}')")
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            await page.goto(f"{base}/ui/")
            row = page.locator(f'#sessions tr[data-session="keyed-ui"][data-tenant="{tenant}"]')
            await row.click()
            await page.locator("#events tbody tr").first.wait_for()
            assert await page.evaluate("[inspector.session, inspector.tenant]") == [
                "keyed-ui", tenant]
            assert await page.locator("#events tbody tr").count() == len(api["events"])
            await page.locator("#events tbody tr").first.click()  # the chunk, its tenant's
            await page.locator("#detail").wait_for()
            assert await page.locator("#detail-text").text_content()
            assert errors == []
        finally:
            await browser.close()
