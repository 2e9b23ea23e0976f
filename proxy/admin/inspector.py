"""What the inspector needs beyond `/admin/evictions` and `/admin/sessions`, and `/ui` itself.

    GET /admin/turns?session=ID   → {"turns": [{turn, window, budget, recall_budget, tools,
                                     tokens_in, tokens_out, kept, evicted, recalled, other,
                                     recall_block, query, time, policy}]}
        kept/evicted/recalled are {class: tokens}; one row per turn the proxy saw.
    GET /admin/chunk?session=ID&chunk_id=C[&turn=N]
                                  → {"chunk": {chunk_id, turn, role, class, tokens, text},
                                     "recall": {"turn", "query"} | null}
        the exact offloaded text (the store keeps it whole); with `turn`, the query that
        recalled the chunk at that turn, when it was recalled then.
    GET /admin/sent?session=ID[&turn=N]
                                  → the body forwarded for that turn (the latest if no
                                     turn), byte for byte; X-Ctxwarden-Turn names its turn,
                                     X-Ctxwarden-Kept-Turns the turns kept (proxy/sent.py)
    GET /admin/store              → {"store", "backlog", "rows"}: what is still being embedded
        rows: the store's counts and lags (LanceStore.stats), and `vectors_pending`: new
        passages waiting for the vectors that refine relevance (the embedder's last job)
    GET /ui                       → the inspector (static files in proxy/admin/ui, no build step)

Why a module beside `proxy.admin.api`: these are the inspector's reads; they take the
tenant from `api.tenant_of`, so the admin key and tenant rules apply to them unchanged.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from proxy.admin.api import tenant_of
from proxy.admin.chunks import offloaded
from proxy.errors import InvalidRequest, RouteNotFound
from proxy.keys import PIPELINE, STORE
from proxy.turnlog import view

UI_DIR = Path(__file__).resolve().parent / "ui"
# The UI's own files only: no inline script, no third-party origin, nothing framed.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")


def _json(body: dict[str, Any]) -> web.Response:
    return web.Response(body=orjson.dumps(body), content_type="application/json")


def _session(request: web.Request) -> str:
    session = request.query.get("session", "").strip()
    if not session:
        raise InvalidRequest(f"Query parameter 'session' is required, e.g. {request.path}"
                             "?session=ID (see GET /admin/sessions).",
                             code="missing_session", param="session")
    return session


async def _flush_turns(app: web.Application) -> None:
    pipeline = app.get(PIPELINE)
    if pipeline is not None:
        await pipeline.turns.flush()


async def turns(request: web.Request) -> web.Response:
    session = _session(request)
    await _flush_turns(request.app)  # read your own writes: summaries are queued
    rows = await request.app[STORE].turns(tenant_of(request), session)
    return _json({"turns": [view(t) for t in sorted(rows, key=lambda t: t.turn)]})


async def chunk(request: web.Request) -> web.Response:
    session = _session(request)
    chunk_id = request.query.get("chunk_id", "").strip()
    if not chunk_id:
        raise InvalidRequest("Query parameter 'chunk_id' is required (see /admin/evictions).",
                             code="missing_chunk_id", param="chunk_id")
    turn = _turn(request)  # said, not ignored: the answer would lack its recall
    c = await offloaded(request, session, chunk_id)
    body: dict[str, Any] = {"chunk": {"chunk_id": c.chunk_id, "turn": c.turn, "role": c.role,
                                      "class": c.klass, "tokens": c.tokens, "text": c.text},
                            "recall": None}
    if turn is not None:
        await _flush_turns(request.app)
        tenant, store = tenant_of(request), request.app[STORE]
        events = [e for e in await store.events(tenant, session) if e.turn == turn]
        if any(e.action == "recall" and e.chunk_id == chunk_id for e in events):
            rows = [t for t in await store.turns(tenant, session) if t.turn == turn]
            query = rows[0].data.get("query", "") if rows else ""
            body["recall"] = {"turn": turn, "query": query}
    return _json(body)


def _turn(request: web.Request) -> int | None:
    turn = request.query.get("turn", "")
    if turn and not turn.isdigit():  # said, not ignored: another turn would answer
        raise InvalidRequest(f"Query parameter 'turn' must be a turn number (0 or more), "
                             f"not {turn[:40]!r} (see /admin/turns).",
                             code="invalid_value", param="turn")
    return int(turn) if turn else None


async def sent(request: web.Request) -> web.Response:
    session, turn = _session(request), _turn(request)
    bodies, tenant = request.app[PIPELINE].sent, tenant_of(request)
    got = bodies.get(tenant, session, turn)
    kept = bodies.turns(tenant, session)
    if got is None:
        which = f"turn {turn} of session {session!r}" if turn is not None else \
            f"session {session!r}"
        where = (f"kept: turns {', '.join(map(str, kept))}" if kept else
                 "none kept for it")
        raise RouteNotFound(f"No forwarded body for {which} ({where}). This process keeps "
                            f"the last {bodies.per_session} turns' bodies of each session "
                            "it served (server.keep_sent), in memory only.",
                            code="sent_not_found", param="turn" if kept else "session")
    return web.Response(body=got.raw, content_type="application/json",
                        headers={"X-Ctxwarden-Turn": str(got.turn),
                                 "X-Ctxwarden-Kept-Turns": ",".join(map(str, kept))})


async def store_state(request: web.Request) -> web.Response:
    store = request.app[STORE]
    stats = getattr(store, "stats", None)
    rows: dict[str, int] = dict(await stats()) if stats is not None else {}
    backlog = rows.pop("backlog", 0)
    rows["vectors_pending"] = request.app[PIPELINE].relater.backlog
    return _json({"store": type(store).__name__, "backlog": backlog, "rows": rows})


async def ui_index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(UI_DIR / "index.html")


async def ui_redirect(request: web.Request) -> web.Response:
    query = f"?{request.query_string}" if request.query_string else ""
    return web.Response(status=302, headers={"Location": "/ui/" + query})


async def _csp(request: web.Request, response: web.StreamResponse) -> None:
    if request.path == "/ui" or request.path.startswith("/ui/"):
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Cache-Control"] = "no-cache"


def setup_inspector(app: web.Application) -> None:
    app.router.add_get("/admin/turns", turns)
    app.router.add_get("/admin/chunk", chunk)
    app.router.add_get("/admin/store", store_state)
    app.router.add_get("/admin/sent", sent)
    app.router.add_get("/ui", ui_redirect)
    app.router.add_get("/ui/", ui_index)
    app.router.add_static("/ui/", UI_DIR, append_version=False)
    app.on_response_prepare.append(_csp)

    async def drain(app: web.Application) -> AsyncIterator[None]:
        yield  # registered after the store's context, so this runs before the store closes
        if PIPELINE in app:
            await app[PIPELINE].turns.close()

    app.cleanup_ctx.append(drain)
