"""`ctxwarden serve`: run the proxy; and the logging every command sets up."""

from __future__ import annotations

import argparse
import gc
import logging
import sys
from collections.abc import AsyncIterator
from typing import Any

import structlog

from proxy.config import ConfigError, load_settings


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
    app.on_startup.append(open_store)
    app.on_startup.append(start_cold_pool)
    app.on_startup.append(warm_upstream)
    app.on_startup.append(freeze_heap)  # last: after the store and its imports loaded
    app.cleanup_ctx.append(collect_at_rest)
    host, port = settings.server.host, settings.server.port
    names = ", ".join(f"{r.name} ({r.model} -> {r.upstream.model})" for r in settings.routes)
    print(f"ctxwarden listening on http://{host}:{port}/v1  routes: {names or 'none'}",
          file=sys.stderr)
    try:
        web.run_app(app, host=host, port=port, print=None, handler_cancellation=True,
                    access_log=None)
    finally:
        # The store is closed (its cleanup ran); the embedding child goes now, not at the
        # interpreter's exit, where a dispatcher still feeding it could even start another.
        from store.embed import close_shared

        close_shared()
    return 0


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


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("serve", help="run the proxy")
    p.add_argument("--config", default="config.yaml", help="YAML config (default config.yaml)")
    p.add_argument("--host", default=None,
                   help="bind address (default: server.host of the config, 127.0.0.1)")
    p.add_argument("--port", type=int, default=None,
                   help="port (default: server.port of the config or CTXWARDEN_SERVER__PORT, "
                        "8787)")
    p.add_argument("--pretty", action="store_true",
                   help="human-readable log lines (default: one JSON object a line)")
    p.set_defaults(func=serve)
