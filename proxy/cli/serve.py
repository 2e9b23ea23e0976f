"""`ctxwarden serve`: run the proxy; and the logging every command sets up."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

import structlog

from proxy.config import ConfigError, load_settings


def configure_logging(json: bool = True, level: int = logging.INFO) -> None:
    """One JSON line per event on stderr; no message text is ever passed to it."""
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
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

    from proxy.app import init_app

    try:
        settings = load_settings(args.config)
        if args.host:
            settings.server.host = args.host
        if args.port:
            settings.server.port = args.port
        configure_logging(json=not args.pretty)
        app = init_app(settings)
    except ConfigError as exc:
        print(f"ctxwarden: {exc}", file=sys.stderr)
        return 2
    host, port = settings.server.host, settings.server.port
    names = ", ".join(f"{r.name} ({r.model} -> {r.upstream.model})" for r in settings.routes)
    print(f"ctxwarden listening on http://{host}:{port}/v1  routes: {names or 'none'}",
          file=sys.stderr)
    web.run_app(app, host=host, port=port, print=None, handler_cancellation=True,
                access_log=None)
    return 0


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("serve", help="run the proxy")
    p.add_argument("--config", default="config.yaml", help="YAML config (default config.yaml)")
    p.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (default 8787)")
    p.add_argument("--pretty", action="store_true", help="human-readable log lines")
    p.set_defaults(func=serve)
