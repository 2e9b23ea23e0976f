"""`ctxwarden bench policies|replay ...`: the policy benchmarks, run from a source checkout.

The benchmarks live in bench/ (they need tests/data, matplotlib and scipy), which ships with
the source tree, not with the installed package, and the product never imports bench/ or
tests/. So this command runs `python -m bench.cli ARGS` as a separate process, in the
checkout this package was installed from (`make install` installs it editable); from a
wheel it says where to get one. Every argument goes to bench/cli.py unchanged.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # proxy/cli/bench.py -> the checkout


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("bench", add_help=False,
                              help="benchmark the eviction policies (from a source checkout; "
                                   "`ctxwarden bench --help` for its options)")
    p.add_argument("args", nargs=argparse.REMAINDER)
    p.set_defaults(func=run, passthrough=True)


def run(args: argparse.Namespace) -> int:
    if not (ROOT / "bench" / "cli.py").is_file():
        print("ctxwarden bench: the benchmarks ship with the source tree, not the installed "
              f"package, and there is none at {ROOT}; clone the repository and run "
              "`make install`, then `ctxwarden bench` from it.", file=sys.stderr)
        return 2
    return subprocess.call([sys.executable, "-m", "bench.cli", *args.args], cwd=ROOT)
