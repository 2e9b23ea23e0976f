"""HTTP handlers: `/v1/chat/completions`, `/v1/models`, `/healthz`."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Any

import orjson
import structlog
from aiohttp import web

from proxy import metrics
from proxy.auth import AUTH, tenant_of, upstream_key_of
from proxy.config import Settings
from proxy.errors import InvalidRequest, PayloadTooLarge, RouteNotFound
from proxy.keys import HEALTH, PIPELINE, SETTINGS, STORE, UPSTREAM
from proxy.prepared import Prepared
from proxy.session import SessionKey, session_key
from proxy.upstream.headers import from_client
from proxy.usage import StreamUsage, usage_fields
from proxy.validate import validate_body
from store.errors import StoreUnavailable
from store.quiet import FORWARD_HOLD_S, QUIET

log = structlog.get_logger("ctxwarden")

_BAD_JSON = ("We could not parse the JSON body of your request. (HINT: This likely means you "
             "aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, "
             "but what was sent was not valid JSON.)")


async def read_raw(request: web.Request) -> bytes:
    """The request's bytes; over `server.max_body_mb`, a 413 in OpenAI's shape."""
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        limit = request.app[SETTINGS].server.max_body_mb
        raise PayloadTooLarge(f"Request body is larger than the configured limit of {limit:g} MB "
                              "(server.max_body_mb).") from None


async def read_body(request: web.Request) -> dict[str, Any]:
    raw = await read_raw(request)
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise InvalidRequest(_BAD_JSON, code="invalid_json") from None
    validate_body(body)
    return body  # type: ignore[no-any-return]


def caller(request: web.Request, route: str, body: dict[str, Any]
           ) -> tuple[str, SessionKey, str | None, bool]:
    """Who asks: the tenant, the session (bound to the request's log lines), the caller's
    own upstream key (auth mode `passthrough`), and whether the provider has yet to accept
    that key: until it has once, the turn's writes wait for its answer, so a bogus key
    fills no store."""
    tenant = tenant_of(request)
    key = session_key(request.headers.get("X-Session-ID"), tenant, body)
    structlog.contextvars.bind_contextvars(session=key.id, route=route)
    api_key = upstream_key_of(request)
    guard = request.app.get(AUTH)
    unproven = api_key is not None and guard is not None and not guard.proven(tenant)
    return tenant, key, api_key, unproven


async def chat_completions(request: web.Request) -> web.StreamResponse:
    started = time.perf_counter()
    with QUIET.busy():  # background work waits from the body's read (store/quiet.py)
        body = await read_body(request)
        settings = request.app[SETTINGS]
        route = settings.route_for(body["model"])
        if route is None:
            raise _no_route(settings, body["model"])
        upstream = request.app[UPSTREAM]
        upstream.check(route, body)
        tenant, key, api_key, unproven = caller(request, route.name, body)
        # a turn that drops nothing logs its decisions while it is forwarded (answered
        # once they are written: `settled`)
        prepared = await request.app[PIPELINE].prepare(body, route, tenant, key,
                                                       defer=unproven, beside=True)
    fields: dict[str, Any] = {**prepared.log_fields(), "stream": bool(body.get("stream")),
                              "overhead_ms": round((time.perf_counter() - started) * 1000, 2)}
    metrics.observe(request, prepared, fields["overhead_ms"])
    # background work still waits while the request goes out and its answer comes back
    # (store/quiet.py: hold)
    forwarded = QUIET.hold(FORWARD_HOLD_S)
    try:
        return await _forward(request, prepared, body, api_key, started, fields, unproven)
    finally:
        forwarded()


async def _forward(request: web.Request, prepared: Prepared, body: dict[str, Any],
                   api_key: str | None, started: float, fields: dict[str, Any],
                   unproven: bool) -> web.StreamResponse:
    """The prepared body to the upstream, its answer (or stream) to the client."""
    route, upstream = prepared.route, request.app[UPSTREAM]
    sent = from_client(request.headers)  # OpenAI-Organization, -Project, -Beta
    if not body.get("stream"):
        try:
            reply = await upstream.complete(route, prepared.body, api_key, sent)
            if unproven:
                await accepted(request, prepared)
        except asyncio.CancelledError:  # the client left before the upstream answered
            _left(started, fields)
            raise
        await prepared.settled()
        billed = usage_fields(reply.usage)
        metrics.observe_usage(request, route.name, billed)
        log.info("request", status=reply.status, latency_ms=_ms(started), **fields, **billed)
        answer = web.Response(body=reply.body, status=reply.status,
                              headers={**reply.headers, **prepared.headers()},
                              content_type="application/json")
        with contextlib.suppress(ConnectionResetError):  # the client left
            await answer.prepare(request)  # written here: the hold ends once it is out
            await answer.write_eof()
        return answer
    try:
        stream = await upstream.open_stream(route, prepared.body, api_key, sent)
    except asyncio.CancelledError:  # the client left before the upstream's headers
        _left(started, fields)
        raise
    if unproven:
        try:
            await accepted(request, prepared)
        except BaseException as exc:
            await stream.aclose()  # the upstream's response is not left open
            if isinstance(exc, asyncio.CancelledError):
                _left(started, fields)
            raise
    resp = web.StreamResponse(headers={**stream.headers, **prepared.headers(),
                                       "Cache-Control": "no-cache",
                                       "Content-Type": "text/event-stream"})
    outcome = "complete"
    usage = StreamUsage()
    try:
        await prepared.settled()
        await resp.prepare(request)
        async for frame in stream:
            usage.see(frame)
            await resp.write(frame)
        await resp.write_eof()
    except ConnectionResetError:  # the client left: closing the stream cancels upstream
        outcome = "client_disconnected"
    except asyncio.CancelledError:  # the same, as `handler_cancellation` delivers it
        outcome = "client_disconnected"
        raise
    finally:
        await stream.aclose()
        metrics.observe_usage(request, route.name, usage.fields)
        log.info("request", status=200, outcome=outcome, latency_ms=_ms(started), **fields,
                 **usage.fields)
    return resp


async def accepted(request: web.Request, prepared: Prepared) -> None:
    """The provider took the caller's key: remember it, and write what the turn deferred.
    If that write fails, the reply still goes out (the provider has answered): the
    session's state did not take the turn's evictions, so the next turn makes them again,
    and the client still holds every message."""
    request.app[AUTH].prove(prepared.tenant)  # `unproven` implies the app has a Guard
    try:
        await prepared.commit()
    except StoreUnavailable as exc:
        log.warning("deferred_write_failed", error=str(exc), events=len(prepared.events))


def _left(started: float, fields: dict[str, Any]) -> None:
    """The request's one log line when its client left before the upstream answered (the
    handler is cancelled): its fitting and its writes happened, so it is logged too."""
    log.info("request", status=None, outcome="client_disconnected", latency_ms=_ms(started),
             **fields)


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)


async def models(request: web.Request) -> web.Response:
    data = [{"id": r.name if any(ch in r.model for ch in "*?[") else r.model,
             "object": "model", "created": 0, "owned_by": "ctxwarden", "route": r.name}
            for r in request.app[SETTINGS].routes]
    return web.json_response({"object": "list", "data": data}, dumps=_dumps)


async def model(request: web.Request) -> web.Response:
    """`GET /v1/models/{id}` (`client.models.retrieve`): the model, if a route takes it."""
    settings = request.app[SETTINGS]
    name = request.match_info["model"]
    route = settings.route_for(name)
    if route is None:
        raise _no_route(settings, name)
    return web.json_response({"id": name, "object": "model", "created": 0,
                              "owned_by": "ctxwarden", "route": route.name}, dumps=_dumps)


def _no_route(settings: Settings, model: str) -> RouteNotFound:
    names = ", ".join(r.model for r in settings.routes) or "none configured"
    return RouteNotFound(f"The model '{model}' does not exist or no route matches it "
                         f"(routes: {names}).", param="model")


async def healthz(request: web.Request) -> web.Response:
    """200 while the proxy can serve; 503 while its store cannot open (proxy/health.py)."""
    body: dict[str, Any] = {"status": "ok", "routes": len(request.app[SETTINGS].routes),
                            "store": type(request.app[STORE]).__name__}
    problem = request.app[HEALTH].check()
    if problem is None:
        return web.json_response(body, dumps=_dumps)
    return web.json_response({**body, "status": "store_unavailable", "error": problem},
                             status=503, dumps=_dumps)


def _dumps(obj: Any) -> str:
    return orjson.dumps(obj).decode()


def new_request_id() -> str:
    return "req_" + uuid.uuid4().hex[:16]
