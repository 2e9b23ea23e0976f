"""`ctxwarden serve`: run the proxy; and the logging every command sets up."""

from __future__ import annotations

import argparse
import errno
import gc
import logging
import os
import socket
import sys
from collections.abc import AsyncIterator
from typing import Any

import structlog

from proxy.config import ConfigError, Settings, load_settings


def configure_logging(json: bool = True, level: int = logging.INFO) -> None:
    """One JSON line per event on stderr; no message text is ever passed to it."""
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json  # colours only for a terminal
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )


def serve(args: argparse.Namespace) -> int:
    from aiohttp import web

    try:
        settings = load_settings(args.config)
        if not settings.routes:  # every chat request would be a 404 model_not_found
            raise ConfigError(f"{args.config}: no routes: add at least one under `routes:` "
                              "(the shipped config.yaml has a demo route and commented "
                              "OpenAI, Anthropic and local ones), or set CTXWARDEN_ROUTES")
        if args.host:
            settings.server.host = args.host
        if args.port:
            settings.server.port = args.port
        configure_logging(json=not args.pretty)
        # the imports and the store take a while (~10 s on 2 cores): say so, not nothing
        print(f"ctxwarden: starting on {settings.server.host}:{settings.server.port} "
              "(LiteLLM, the store, the embedder's process); 'listening' follows when ready",
              file=sys.stderr, flush=True)
        from proxy.app import init_app

        app = init_app(settings)
    except ConfigError as exc:
        print(f"ctxwarden: {exc}", file=sys.stderr)
        return 2
    for warning in keyless_routes(settings):
        print(f"ctxwarden: warning: {warning}", file=sys.stderr)
    app.on_startup.append(open_store)
    app.on_startup.append(start_cold_pool)
    app.on_startup.append(warm_upstream)
    app.on_startup.append(freeze_heap)  # last: after the store and its imports loaded
    app.cleanup_ctx.append(collect_at_rest)
    host, port = settings.server.host, settings.server.port
    names = ", ".join(f"{r.name} ({r.model} -> {r.upstream.model})" for r in settings.routes)

    def listening(_aiohttp_banner: str) -> None:  # called once the socket is bound
        print(f"ctxwarden listening on http://{host}:{port}/v1  routes: {names or 'none'}",
              file=sys.stderr, flush=True)

    try:
        web.run_app(app, host=host, port=port, print=listening, handler_cancellation=True,
                    access_log=None)
    except OSError as exc:  # only the listening socket's failure is explained here
        if isinstance(exc, socket.gaierror):
            why, fix = f"unknown host ({exc.strerror})", "check --host or server.host"
        elif "bind" in str(exc):
            why = os.strerror(exc.errno) if exc.errno else str(exc)
            fix = ("free the port or choose another: --port, server.port or "
                   "CTXWARDEN_SERVER__PORT") if exc.errno == errno.EADDRINUSE else \
                "check --host / server.host and --port / server.port"
        else:
            raise
        print(f"ctxwarden: cannot listen on {host}:{port}: {why}; {fix}", file=sys.stderr)
        return 2
    finally:
        # The store is closed (its cleanup ran); the embedding child goes now, not at the
        # interpreter's exit, where a dispatcher still feeding it could even start another.
        from store.embed import close_shared

        close_shared()
    return 0


def keyless_routes(settings: Settings) -> list[str]:
    """Routes that will reach their provider's public endpoint with no key: no
    `upstream.api_key`, no `api_key_env`, no `api_base` (a local server may need none) and
    none of the provider's own variables LiteLLM reads (OPENAI_API_KEY, …). Their first
    request would come back 401 with the provider's "no API key" message, which reads as
    if the client's key were missing; said at start-up instead. Not refused: a provider may
    take credentials from elsewhere (an AWS role). Mode passthrough sends the client's key."""
    import litellm

    if settings.auth.mode == "passthrough":
        return []
    out: list[str] = []
    for i, route in enumerate(settings.routes):
        up = route.upstream
        if up.api_key or up.api_key_env or up.api_base or up.mock_response is not None:
            continue
        try:
            missing = litellm.validate_environment(model=up.model)["missing_keys"]
        except Exception:  # LiteLLM cannot tell: say nothing rather than guess
            continue
        if missing:
            out.append(f"routes[{i}] ({route.name!r}) has no key for {up.model!r}: set "
                       f"upstream.api_key_env (e.g. {missing[0]}) or upstream.api_key, or "
                       f"export {' or '.join(missing)}; else the provider answers 401")
    return out


async def open_store(app: Any) -> None:
    """Open the store before serving: what the last process left in the write-ahead log is
    replayed, and chunks it left without vectors are embedded, with no request needed. A
    store that cannot open now is logged, not fatal: the first request that needs it tries
    again (and answers 503 `store_unavailable` if it still cannot), and `/healthz` says so
    until it opens (proxy/health.py)."""
    from proxy.keys import HEALTH

    try:
        await app[HEALTH].open()
    except Exception as exc:
        structlog.get_logger("ctxwarden").warning("store_open_failed", error=type(exc).__name__,
                                                  detail=str(exc)[:300])


async def start_cold_pool(app: Any) -> None:
    """The worker that measures half of a cold history (proxy/coldpool.py) starts now,
    not with the first history that needs it."""
    from proxy.keys import PIPELINE

    app[PIPELINE].cold.start()


async def warm_upstream(app: Any) -> None:
    """LiteLLM's lazy loads happen now, not in the first request (proxy/upstream)."""
    from proxy.keys import UPSTREAM

    await app[UPSTREAM].warm()


async def freeze_heap(app: Any) -> None:
    """What start-up loaded (litellm's model tables, LanceDB, the app: ~400,000 objects)
    leaves the garbage collector's sight (`gc.freeze`). A full collection walked all of
    it: a ~250 ms pause for whichever request it landed on; ~15 ms after. What is made
    later is collected as usual."""
    gc.collect()
    gc.freeze()
    structlog.get_logger("ctxwarden").info("heap_frozen", objects=gc.get_freeze_count())


async def collect_at_rest(app: Any) -> AsyncIterator[None]:
    """Full garbage collections while no request is being prepared (proxy/gcrest.py)."""
    from proxy.gcrest import RestingCollector

    collector = RestingCollector()
    collector.start()
    yield
    await collector.stop()


def _port(value: str) -> int:
    """--port as server.port takes it: 1-65535 (argparse says which, not a traceback)."""
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port: use 1-65535")
    return port


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("serve", help="run the proxy")
    p.add_argument("--config", default="config.yaml", help="YAML config (default config.yaml)")
    p.add_argument("--host", default=None,
                   help="bind address (default: server.host of the config, 127.0.0.1)")
    p.add_argument("--port", type=_port, default=None,
                   help="port (default: server.port of the config or CTXWARDEN_SERVER__PORT, "
                        "8787)")
    p.add_argument("--pretty", action="store_true",
                   help="human-readable log lines (default: one JSON object a line)")
    p.set_defaults(func=serve)
