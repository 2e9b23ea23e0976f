"""`ctxwarden log --session ID [--json] [--config FILE] [--tenant T]`: a session's decisions.

Why a command beside the admin API: an operator on the box (or in CI) can read the
store directly, with the proxy stopped, and the output shape is the admin endpoint's,
so scripts work against either. The store is opened read-only in spirit: nothing is
written, and the embedding worker is never started.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import orjson

from proxy.admin import event_view
from proxy.auth import DEFAULT_TENANT
from proxy.config import ConfigError, load_settings
from proxy.errors import StoreUnavailable
from store.base import TURN, Event, MemoryStore, Store

COLUMNS = ("turn", "action", "class", "tokens", "score", "preview")


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("log", help="print a session's evictions, recalls and restores")
    p.add_argument("--session", required=True, help="session id (see GET /admin/sessions)")
    p.add_argument("--json", action="store_true", help="JSON, the /admin/evictions shape")
    p.add_argument("--config", default=None,
                   help="YAML config for store.path (default: ./config.yaml if present)")
    p.add_argument("--tenant", default=DEFAULT_TENANT, help="tenant (default: default)")
    p.set_defaults(func=run)


def open_store(path: str) -> Store:
    """The configured store as a reader: no embedding worker, no model load."""
    if path == ":memory:":
        return MemoryStore()
    from store.lance import LanceStore

    return LanceStore(path, _NoEmbedder(), background=False)


class _NoEmbedder:
    """Reading the log never embeds; a model load here would cost seconds for nothing."""

    name = "none"
    dim = None

    async def embed(self, texts: Any) -> Any:
        raise RuntimeError("ctxwarden log does not embed")


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from proxy.cli.serve import configure_logging

    # The store's own lines (`wal_loaded` after a crash, a torn log's warning) go to stderr,
    # warnings only: on stdout they broke `--json` just when an operator reads a dead
    # proxy's store
    configure_logging(json=False, level=logging.WARNING)
    out = out or sys.stdout
    try:
        config = args.config or ("config.yaml" if Path("config.yaml").is_file() else None)
        settings = load_settings(config)
    except ConfigError as exc:
        print(f"ctxwarden: {exc}", file=sys.stderr)
        return 2
    path = settings.store.path
    if "://" not in path and path != ":memory:" and not _holds_a_store(Path(path)):
        print(f"ctxwarden: no store at {path} (store.path); nothing was evicted yet?",
              file=sys.stderr)
        return 1
    try:
        events = [e for e in asyncio.run(_read(path, args.tenant, args.session))
                  if e.action != TURN]  # per-turn summaries are the inspector's, not decisions
    except StoreUnavailable as exc:
        print(f"ctxwarden: {exc.message}", file=sys.stderr)
        return 1
    if args.json:
        out.write(orjson.dumps({"events": [event_view(e) for e in events]}).decode() + "\n")
    else:
        out.write(render(args.session, events))
    if not events:  # a wrong store or tenant looks the same as an unknown session
        print(f"ctxwarden: read the store at {path} as tenant {args.tenant!r}; the proxy's "
              "store.path (--config, CTXWARDEN_STORE__PATH) and the session's tenant "
              "(--tenant, GET /admin/sessions) must be the same", file=sys.stderr)
    return 0


def _holds_a_store(path: Path) -> bool:
    """A directory the proxy has written to: opening an empty one would create the tables."""
    return path.is_dir() and any((path / name).exists()
                                 for name in ("chunks.lance", "events.lance", "_wal"))


async def _read(path: str, tenant: str, session: str) -> list[Event]:
    store = open_store(path)
    try:
        return await store.events(tenant, session)
    finally:
        await store.close()


def render(session: str, events: list[Event], width: int = 60) -> str:
    """A per-turn table, then totals; one line per event, previews cut to one line."""
    if not events:
        return f"session {session}: no events\n"
    rows = [(str(e.turn), e.action, e.klass, str(e.tokens), f"{e.score:.3f}",
             _one_line(e.preview, width)) for e in events]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(COLUMNS)]
    right = {0, 3, 4}

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    lines = [f"session {session}", line(COLUMNS), line(tuple("-" * w for w in widths))]
    lines += [line(r) for r in rows]
    evicted = [e for e in events if e.action == "evict"]
    recalled = [e for e in events if e.action == "recall"]
    restored = [e for e in events if e.action == "restore"]
    first, last = events[0].time, events[-1].time
    lines += ["", f"evicted: {_n(len(evicted), 'chunk')}, {sum(e.tokens for e in evicted)} tokens"
              f" | recalled: {_n(len(recalled), 'passage')}, "
              f"{sum(e.tokens for e in recalled)} tokens"
              f" | restored: {len(restored)}",
              f"turns {events[0].turn}-{events[-1].turn}, {_ts(first)} to {_ts(last)}"]
    return "\n".join(lines) + "\n"


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _one_line(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _ts(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
