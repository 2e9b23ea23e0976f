"""The rest of OpenAI's API, passed through: `/v1/embeddings`, files, … (and the
`/v1/responses` requests proxy/responses.py does not fit).

A user points `OPENAI_BASE_URL` at ctxwarden and changes nothing else, so the same client
also calls the endpoints ctxwarden does not manage. Those go to an upstream unchanged:
method, path under `/v1`, query, body (the client's `model` included) and the client's
headers, less the hop-by-hop ones and its key; the reply comes back status, headers and
bytes as the provider sent them (an SSE stream relayed as it arrives). No context
management happens on them, and nothing is stored; each leaves one log line
`passthrough`.

Which upstream: the first route whose model pattern matches the body's `model` and whose
transport is `direct` (a provider that speaks OpenAI's wire format), else the first
`direct` route: an embedding model's name rarely matches a chat route's pattern. Its key
goes upstream (with `auth.mode: passthrough`, the caller's own). With no `direct` route
(every route goes through LiteLLM to another wire format) the request gets a 404 naming
the path. `/v1/chat/completions` and `/v1/models` are ctxwarden's own, on any method.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import aiohttp
import orjson
import structlog
from aiohttp import web

from proxy.auth import upstream_key_of
from proxy.config import RouteSettings, Settings
from proxy.errors import RouteNotFound
from proxy.keys import SETTINGS, UPSTREAM
from proxy.upstream.direct import timeout_of
from proxy.upstream.errors import map_upstream_error
from proxy.upstream.transport import Target

log = structlog.get_logger("ctxwarden")

OWN = {"chat/completions": ("POST",), "models": ("GET",)}  # served here, not passed on
# Not forwarded either way: hop-by-hop (RFC 9110 §7.6.1), or set again for the other side.
_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
        "trailer", "transfer-encoding", "upgrade", "host", "content-length",
        "accept-encoding", "content-encoding", "authorization", "x-session-id"}


def upstream_route(settings: Settings, model: str | None, direct: set[str]
                   ) -> RouteSettings | None:
    """The route whose upstream takes a passed-through request (`direct`: route names)."""
    routes = [r for r in settings.routes if r.name in direct]
    if model is not None:
        for r in routes:
            if r.matches(model):
                return r
    return routes[0] if routes else None


def _model_of(raw: bytes, content_type: str) -> str | None:
    if "json" not in content_type or not raw:
        return None
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None  # the provider says what is wrong with it
    model = body.get("model") if isinstance(body, dict) else None
    return model if isinstance(model, str) else None


def _headers(request: web.Request, target: Target) -> dict[str, str]:
    """The client's headers, less ours; the route's `upstream.extra_headers` win."""
    route = {k.lower() for k in target.extra_headers}
    out = {k: v for k, v in request.headers.items()
           if k.lower() not in _HOP and k.lower() not in route}
    auth = target.headers.get("Authorization")
    if auth:
        out["Authorization"] = auth
    for k, v in target.extra_headers.items():
        out[k] = v
    return out


async def passthrough(request: web.Request) -> web.StreamResponse:
    tail = request.match_info["tail"]
    if tail in OWN:  # ours, on another method
        raise web.HTTPMethodNotAllowed(request.method, OWN[tail])
    if tail.strip("/") in OWN:  # ours, misspelt ("chat/completions/"): not the provider's
        raise web.HTTPNotFound()
    return await send(request, tail, await request.read())


async def send(request: web.Request, tail: str, raw: bytes, *,
               route: RouteSettings | None = None, headers: dict[str, str] | None = None,
               before: Callable[[int], Awaitable[None]] | None = None,
               logged: bool = True) -> web.StreamResponse:
    """`raw` to the upstream's `/v1/<tail>` with the request's method, query and headers;
    its answer relayed. `route`: the upstream to use (else the body's model chooses, as
    above); `headers`: added to the answer's; `before(status)`: awaited once the
    upstream's status line is in, before anything reaches the client; `logged`: False
    when the caller writes the request's log line."""
    started = time.perf_counter()
    upstream = request.app[UPSTREAM]
    settings = request.app[SETTINGS]
    if route is None:
        direct = {r.name for r in settings.routes if upstream.target(r).transport == "direct"}
        route = upstream_route(settings, _model_of(raw, request.content_type), direct)
    if route is None:
        raise RouteNotFound(f"Unknown path: {request.method} {request.path} (ctxwarden passes "
                            "the rest of OpenAI's API to a route whose provider speaks OpenAI's "
                            "wire format, and no route does)", code="unknown_url")
    target = upstream.target(route, upstream_key_of(request))
    base = (target.api_base or "").removesuffix("/chat/completions")
    url = f"{base}/{tail}"
    try:
        resp = await upstream.http().request(
            request.method, url, params=request.query, data=raw or None,
            headers=_headers(request, target), proxy=target.proxy,
            timeout=timeout_of(target), allow_redirects=False)
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise map_upstream_error(exc, api_base=target.api_base, timeout=target.timeout,
                                 secrets=target.secrets) from None
    try:
        if before is not None:
            await before(resp.status)
        return await _relay(request, resp, headers or {})
    finally:
        resp.release()
        if logged:
            log.info("passthrough", method=request.method, path=request.path, route=route.name,
                     status=resp.status,
                     latency_ms=round((time.perf_counter() - started) * 1000, 2))


async def _relay(request: web.Request, resp: aiohttp.ClientResponse,
                 extra: dict[str, str]) -> web.StreamResponse:
    out = web.StreamResponse(status=resp.status, reason=resp.reason, headers={
        **{k: v for k, v in resp.headers.items() if k.lower() not in _HOP}, **extra})
    await out.prepare(request)
    try:
        async for data in resp.content.iter_any():
            await out.write(data)
    except ConnectionResetError:  # the client left (aiohttp's is a ClientError too)
        log.info("passthrough_client_disconnected", path=request.path)
        return out  # releasing the upstream reply closes it
    except asyncio.CancelledError:  # the same, as `handler_cancellation` delivers it
        log.info("passthrough_client_disconnected", path=request.path)
        raise
    except (aiohttp.ClientError, TimeoutError) as exc:
        # The status line is out: the client sees a cut body, and the log says why.
        log.warning("passthrough_broken", path=request.path, error=type(exc).__name__)
        return out
    await out.write_eof()
    return out


def setup(app: web.Application) -> None:
    """Register last: every path under /v1 that no other route took."""
    app.router.add_route("*", "/v1/{tail:.+}", passthrough)
