"""Inspection API: what the proxy evicted, recalled and restored, per session.

    GET /admin/evictions?session=ID  → {"events": [{turn, chunk_id, class, tokens, score,
                                                    action, reason, policy, time, preview,
                                                    [media]}]}
        `media` only on an evict or cut of a message with non-text parts: what it held,
        e.g. "1 image (image/png), 1 file (application/pdf)" (see proxy/admin/chunks.py)
    GET /admin/sessions              → {"sessions": [{tenant, session, events, evicted,
                                                      recalled, evicted_tokens, last_turn,
                                                      last_time}]}
        every tenant's sessions (one that evicted nothing too: its turns), most recent
        first; `X-Tenant-ID` narrows them to that tenant's

Who may call: `proxy.auth` lets a request reach these routes only with an admin key
(`auth.admin_keys`; open in mode `none` when none is configured). A call about one session
reads the tenant named by `X-Tenant-ID` (a tenant id is the hash
`proxy.auth.tenant_for_key` gives; every request log line and every `/admin/sessions` row
carries it), else "default". Responses never carry a key.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from proxy import auth
from proxy.errors import InvalidRequest
from proxy.keys import STORE
from store.base import TURN

TENANT_HEADER = "X-Tenant-ID"


def tenant_of(request: web.Request) -> str:
    """The tenant whose data an admin call reads: the `X-Tenant-ID` header, else the
    caller's tenant as the edge sees it ("default"). Only admins get here (proxy.auth)."""
    return request.headers.get(TENANT_HEADER) or auth.tenant_of(request)


def _json(body: dict[str, Any]) -> web.Response:
    return web.Response(body=orjson.dumps(body), content_type="application/json")


def event_view(e: Any) -> dict[str, Any]:
    """One event as the admin API and `ctxwarden log --json` show it (no tenant/session)."""
    d: dict[str, Any] = e.public()
    out = {k: d[k] for k in ("turn", "chunk_id", "class", "tokens", "score", "action",
                             "reason", "policy", "time", "preview")}
    if d["media"]:  # only on the evict/cut of a message with images, audio or files
        out["media"] = d["media"]
    return out


async def evictions(request: web.Request) -> web.Response:
    session = request.query.get("session", "").strip()
    if not session:
        return InvalidRequest("Query parameter 'session' is required, e.g. "
                              "/admin/evictions?session=ID (see GET /admin/sessions).",
                              code="missing_session", param="session").response()
    events = await request.app[STORE].events(tenant_of(request), session)
    return _json({"events": [event_view(e) for e in events if e.action != TURN]})


async def sessions(request: web.Request) -> web.Response:
    """Every tenant's sessions, each naming its tenant (what the inspector sends back as
    `X-Tenant-ID` to open one); `X-Tenant-ID` narrows the list to that tenant's."""
    rows = await request.app[STORE].sessions(request.headers.get(TENANT_HEADER) or None)
    return _json({"sessions": rows})


def setup_admin(app: web.Application) -> None:
    app.router.add_get("/admin/evictions", evictions)
    app.router.add_get("/admin/sessions", sessions)
