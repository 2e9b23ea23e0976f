"""`ctxwarden` command line: `serve`, plus one module per other subcommand.

    serve   serve.py        run the proxy
    log     log.py          a session's decisions, read from the store
    demo    demo.py         a scripted agent session through a proxy (demo_server.py starts
                            one in-process with --start; demo_script.py is the script)
    bench   bench.py        the benchmarks in bench/, run as a separate process from a checkout
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from proxy.cli.serve import configure_logging

__all__ = ["build_parser", "configure_logging", "main"]

# Each module has `add_parser(subparsers)`; a new subcommand is one line here.
SUBCOMMANDS: tuple[str, ...] = ("proxy.cli.serve", "proxy.cli.log", "proxy.cli.demo",
                                "proxy.cli.bench")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ctxwarden", description="An OpenAI-compatible reverse proxy that fits agent "
        "conversations to the model's window: evicts, offloads, recalls, and logs why.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMANDS:
        importlib.import_module(name).add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(sys.argv[1:] if argv is None else list(argv))
    if extra and not getattr(args, "passthrough", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if extra:  # `ctxwarden bench --help`: options before the bench subcommand go along
        args.args = [*extra, *args.args]
    return int(args.func(args))
