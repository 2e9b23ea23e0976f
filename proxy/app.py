"""`init_app(settings)`: the aiohttp application, its resources and its error boundary."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta

import structlog
from aiohttp import web

from proxy import admin, handlers, passthrough, responses
from proxy.auth import require_key, setup_auth
from proxy.config import ConfigError, Settings
from proxy.errors import MethodNotAllowed, ProxyError, RouteNotFound
from proxy.health import StoreHealth
from proxy.keys import HEALTH, PIPELINE, REQUEST_ID, SETTINGS, STORE, UPSTREAM
from proxy.metrics import Metrics, count_requests, setup_metrics
from proxy.pipeline import Pipeline
from proxy.replica import Replica
from proxy.timing import TimedStore
from proxy.upstream import Upstream
from store.base import MemoryStore, Store

log = structlog.get_logger("ctxwarden")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def error_boundary(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure leaves as OpenAI's error shape; input never causes a 500."""
    request_id = request.headers.get("X-Request-ID") or handlers.new_request_id()
    request[REQUEST_ID] = request_id  # a stream's headers get it as it starts (below)
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(request_id=request_id)
    try:
        resp = await handler(request)
    except ProxyError as exc:
        log.info("error", status=exc.status, code=exc.code, path=request.path)
        return exc.response({"X-Request-ID": request_id})
    except web.HTTPNotFound:
        return RouteNotFound(f"Unknown path: {request.method} {request.path}",
                             code="unknown_url").response({"X-Request-ID": request_id})
    except web.HTTPMethodNotAllowed as exc:
        return MethodNotAllowed(
            f"Method {request.method} is not allowed on {request.path}",
            headers={"Allow": ", ".join(sorted(exc.allowed_methods))},
        ).response({"X-Request-ID": request_id})
    except Exception:
        log.exception("internal_error", path=request.path)
        return ProxyError("The proxy failed while handling this request; see its log for "
                          f"request id {request_id}.").response({"X-Request-ID": request_id})
    if not resp.prepared:
        resp.headers["X-Request-ID"] = request_id
    return resp


async def stream_request_id(request: web.Request, response: web.StreamResponse) -> None:
    """A streamed response is sent before the boundary sees it: it gets its
    `X-Request-ID` here, as its headers go out."""
    request_id = request.get(REQUEST_ID)
    if request_id is not None and "X-Request-ID" not in response.headers:
        response.headers["X-Request-ID"] = request_id


def make_store(settings: Settings) -> Store:
    if settings.store.path == ":memory:":
        return MemoryStore()
    from store.embed import get_embedder
    from store.lance import LanceStore

    embedder = get_embedder(settings.store.embedder, settings.store.embed_model,
                            precision=settings.store.embed_precision)
    st = settings.store
    if st.shared:  # committed before forwarding; reads see every replica's commits
        return LanceStore(st.path, embedder, storage_options=st.options(), wal=False,
                          read_consistency_interval=timedelta(0))
    return LanceStore(st.path, embedder, wal_dir=st.wal_dir, storage_options=st.options())


def make_replica(settings: Settings, store: Store) -> Replica | None:
    """Sessions' heads on a shared store (proxy/replica.py); None for a local one."""
    if not settings.store.shared:
        return None
    from store.shared import SessionHeads

    return Replica(SessionHeads(settings.store.path, settings.store.options()), store)


def init_app(settings: Settings, store: Store | None = None,
             upstream: Upstream | None = None) -> web.Application:
    app = web.Application(client_max_size=int(settings.server.max_body_mb * 1024 * 1024),
                          # the one place their order is set, outermost first: the
                          # counter sees the final status, the boundary maps every error,
                          # the key check runs inside it (its 401 is mapped too)
                          middlewares=[count_requests, error_boundary, require_key])
    app[SETTINGS] = settings
    app.on_response_prepare.append(stream_request_id)
    problems: list[str] = []  # the auth's and every route's, in one ConfigError
    try:
        setup_auth(app, settings.auth)  # keys and tenants; /admin/* and /ui* need an admin key
    except ConfigError as exc:
        problems.append(str(exc))
    # Every route's upstream is resolved now: a misconfigured one raises ConfigError here,
    # naming the route, and the server does not start (rather than 502 its first request).
    try:
        if upstream is None:
            app[UPSTREAM] = Upstream(settings.routes)
        else:
            upstream.add_routes(settings.routes)
            app[UPSTREAM] = upstream
    except ConfigError as exc:
        problems.append(str(exc))
    if problems:
        raise ConfigError("\n".join(problems))
    app[STORE] = store if store is not None else make_store(settings)
    app[HEALTH] = StoreHealth(app[STORE])  # /healthz: 503 while the store cannot open
    m = Metrics()  # the pipeline's store calls are timed through a wrapper, not a patch
    app[PIPELINE] = Pipeline(settings, TimedStore(app[STORE], m.store_seconds),
                             make_replica(settings, app[STORE]))

    async def resources(app: web.Application) -> AsyncIterator[None]:
        yield
        if upstream is None:
            await app[UPSTREAM].close()
        await app[PIPELINE].close()
        await app[HEALTH].close()  # a retry of the store's opening, if one is running
        await app[STORE].close()

    app.cleanup_ctx.append(resources)
    app.router.add_post("/v1/chat/completions", handlers.chat_completions)
    app.router.add_post("/chat/completions", handlers.chat_completions)
    app.router.add_post("/v1/responses", responses.responses)  # managed like chat
    app.router.add_get("/v1/models", handlers.models)
    app.router.add_get("/v1/models/{model:.+}", handlers.model)
    app.router.add_get("/healthz", handlers.healthz)
    setup_metrics(app, m)  # GET /metrics, request counts, store and upstream timings
    # /admin/evictions, /admin/sessions, and the inspector: /ui, /admin/turns, /admin/chunk,
    # /admin/store. Order matters: the inspector's drain runs before the store closes.
    admin.setup(app)
    passthrough.setup(app)  # last: the rest of /v1 goes upstream unchanged
    return app
