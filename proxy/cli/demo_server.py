"""The proxy `ctxwarden demo` talks to: one already running (`--url`), or, with `--start`,
one started in the demo's own process and event loop from the config's demo route.

Why in-process: the demo must work on a fresh machine with one command and nothing else
running; the same `init_app` as `ctxwarden serve` runs, so what the demo shows is what
the server does.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import structlog
from aiohttp import web

DEFAULT_URL = "http://127.0.0.1:8787"


class DemoError(Exception):
    """The demo cannot go on; the message says why and what to do."""


def quiet_server_logs() -> None:
    """With --start the proxy's request lines would bury the demo's table: warnings only."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
                        logger_factory=structlog.PrintLoggerFactory(sys.stderr))


def _base(url: str) -> str:
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


async def _check(url: str) -> None:
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http, \
                http.get(f"{url}/healthz") as resp:
            if resp.status == 200:
                return
            if resp.status == 503:  # a ctxwarden whose store cannot open (proxy/health.py)
                raise DemoError(f"the proxy at {url} cannot serve: {(await resp.text())[:300]}")
            raise DemoError(f"{url}/healthz answered {resp.status}; is this a ctxwarden proxy?")
    except aiohttp.ClientError as exc:
        raise DemoError(f"no proxy answers at {url} ({type(exc).__name__}). Point the demo at "
                        "yours with --url, start one with `make serve`, or let the demo start "
                        "its own: ctxwarden demo --start") from None


@asynccontextmanager
async def started(args: argparse.Namespace) -> AsyncIterator[str]:
    """The base URL (no /v1) of a proxy that answers, for as long as the block runs."""
    if not args.start:
        url = _base(args.url or DEFAULT_URL)
        await _check(url)
        yield url
        return
    from proxy.app import init_app
    from proxy.config import ConfigError, load_settings

    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        raise DemoError(str(exc)) from None
    if settings.route_for(args.model) is None:
        raise DemoError(f"no route in {args.config} matches model {args.model!r}; the shipped "
                        "config.yaml has the `demo` route (LiteLLM mock, window 1200)")
    if args.port is not None:
        settings.server.port = args.port
    quiet_server_logs()
    runner = web.AppRunner(init_app(settings), handler_cancellation=True, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, settings.server.host, settings.server.port)
        try:
            await site.start()
        except OSError as exc:
            raise DemoError(f"cannot listen on {settings.server.host}:{settings.server.port} "
                            f"({exc.strerror}); is a proxy already running there? Then run "
                            "`ctxwarden demo` without --start, or pass --port 0") from None
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()
