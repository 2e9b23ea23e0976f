"""`make bench-load`: many agent sessions at once through ctxwarden, against a local upstream
with a fixed latency, beside the same run straight to the upstream and through a plain
`litellm.acompletion` call path.

    .venv/bin/python -m bench.load [--sessions 200] [--turns 20] [--latency-ms 50]
                                   [--update docs/reliability.md]

Three processes on loopback: the upstream (`python -m bench.load upstream PORT MS`),
`ctxwarden serve` (LanceDB in a temp dir, the default MiniLM embedder, recall on, four
proxy keys so sessions spread over four tenants), and this client. The three paths run
one after another, never at once, so none takes CPU from another. Bounded: a fixed count
of requests, and a timeout per path after which the rest count as errors.

Reported per path: throughput, latency and overhead p50/p99 (overhead = latency minus the
upstream's own service time, see bench/load_paths.py), errors. For ctxwarden also: lost
events (evictions and recalls its response headers reported that its admin API does not
show, and evicted chunks missing from the store) and the proxy's RSS at start and end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import orjson

import proxy  # noqa: F401  (offline defaults before litellm)
from bench.harness import free_port, rss_mb, wait_ready
from bench.load_checks import (
    ADMIN,
    KEYS,
    admin,
    embedded,
    inside,
    key_of,
    lost_events,
    split_overhead,
)
from bench.load_paths import FixedLatencyUpstream, aiohttp_sender, drive, litellm_sender

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- bench-load:begin -->", "<!-- bench-load:end -->"


def config(tmp: Path, port: int, up_port: int, window: int) -> Path:
    cfg = tmp / "config.yaml"
    cfg.write_text(orjson.dumps({
        "server": {"port": port}, "store": {"path": str(tmp / "lancedb")},
        "auth": {"mode": "proxy_keys", "keys": KEYS, "admin_keys": [ADMIN]},
        "routes": [{"name": "load", "model": "load-*", "context_window": window,
                    "max_output_tokens": 256, "upstream": {
                        "model": "openai/mock-1", "api_key": "sk-load",
                        "api_base": f"http://127.0.0.1:{up_port}/v1"}}]}).decode())
    return cfg


async def measure(args: argparse.Namespace, latency_ms: int) -> dict[str, Any]:
    up_port, px_port = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    upstream = subprocess.Popen([sys.executable, "-m", "bench.load", "upstream", str(up_port),
                                 str(latency_ms)], cwd=ROOT, env=env)
    up = f"http://127.0.0.1:{up_port}/v1"
    px = f"http://127.0.0.1:{px_port}"
    out: dict[str, Any] = {"runs": [], "latency_ms": latency_ms}
    tmp = Path(tempfile.mkdtemp(prefix="ctxw-load-"))
    procs = [upstream]
    shape = (args.sessions, args.turns, args.lines, args.timeout)
    try:
        await wait_ready(f"{up}/models", upstream)
        conn = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=conn,
                                         timeout=aiohttp.ClientTimeout(total=None)) as http:
            out["runs"].append(await drive("direct to the upstream", aiohttp_sender(
                http, f"{up}/chat/completions", "mock-1", lambda n: {}), *shape))
            cfg = config(tmp, px_port, up_port, args.window)
            server = subprocess.Popen([sys.executable, "-m", "proxy.cli", "serve", "--config",
                                       str(cfg)], cwd=ROOT, env=env,
                                      stderr=open(tmp / "proxy.log", "wb"))  # noqa: SIM115
            procs.append(server)
            await wait_ready(f"{px}/healthz", server)

            def headers(name: str) -> dict[str, str]:
                return {"Authorization": f"Bearer {key_of(name)}", "X-Session-ID": name}

            via = aiohttp_sender(http, f"{px}/v1/chat/completions", "load-1", headers)
            # One session long enough to evict, so the store opens and MiniLM is loaded
            # and has embedded something before the clock starts.
            warm = max(args.turns, int(1.5 * args.window / (args.lines * 33 + 60)) + 2)
            await drive("warm-up", via, 1, warm, args.lines, args.timeout, "w")
            await embedded(http, px, 180)
            out["rss_start_mb"] = rss_mb(server.pid)
            run = await drive("through ctxwarden", via, *shape)
            out["runs"].append(run)
            out["rss_end_mb"] = rss_mb(server.pid)
            out["rss_peak_mb"] = rss_mb(server.pid, "VmHWM")
            out["lost"] = await lost_events(http, px, up)
            out["backlog_end"] = (await admin(http, f"{px}/admin/store"))["backlog"]
            out["inside"] = await inside(http, px)
            server.terminate()
            server.wait(60)
            out["proxy_internal_errors"] = len(re.findall(
                rb'"event": "internal_error"', (tmp / "proxy.log").read_bytes()))
            out["split"] = split_overhead(tmp / "proxy.log")
        own = os.getpid()
        out["litellm_rss_start_mb"] = rss_mb(own)
        out["runs"].append(await drive("plain litellm.acompletion", litellm_sender(up), *shape))
        out["litellm_rss_end_mb"] = rss_mb(own)
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                p.wait(60)
        shutil.rmtree(tmp, ignore_errors=True)  # ~50 MB of LanceDB per run
    return out


def _pct(xs: list[float], q: int) -> float:
    return statistics.quantiles(xs, n=100)[q - 1] if len(xs) > 1 else float("nan")


def report(args: argparse.Namespace, out: dict[str, Any]) -> str:
    lines = [f"### Upstream latency {out['latency_ms']:,} ms", "",
             "| path | ok | errors | throughput (req/s) | latency p50 / p99 (ms) "
             "| overhead p50 / p99 (ms) |", "|---|---|---|---|---|---|"]
    for r in out["runs"]:
        errs = sum(r.errors.values())
        lines.append(f"| {r.path} | {len(r.latency_ms):,} | {errs} | "
                     f"{len(r.latency_ms) / r.wall_s:.0f} | {_pct(r.latency_ms, 50):.1f} / "
                     f"{_pct(r.latency_ms, 99):.1f} | **{_pct(r.overhead_ms, 50):.1f}** / "
                     f"{_pct(r.overhead_ms, 99):.1f} |")
    lost = out["lost"]
    lines += ["", f"- Lost events: **{lost['evict'] + lost['recall']}**: of the "
              f"{lost['stubs']:,} offloaded chunks and {lost['recalled']:,} recalled ones that "
              f"forwarded requests depended on (as the upstream received them), "
              f"{lost['evict']} had no evict event and {lost['recall']} no recall event in "
              f"the proxy's store; evicted chunks missing from the store: "
              f"{lost['chunks_missing']}. Embedding backlog when the run ended: "
              f"{out['backlog_end']} chunks (durable, embedded later).",
              "- Inside ctxwarden, before forwarding (its request log, p50 / p99 ms): "
              + "; ".join(f"{k} turns {v[0]:.1f} / {v[1]:.0f} over {v[2]:,}"
                          for k, v in out["split"].items())
              + ". Mean ms per store call (its /metrics): " + ", ".join(
                  f"{k} {v[0]:.0f} × {v[1]:,.0f}" for k, v in out["inside"].items()
                  if k != "overhead") + ".",
              "- ctxwarden RSS (with its embedder process): "
              f"{out['rss_start_mb']:.0f} MB at start, "
              f"{out['rss_end_mb']:.0f} MB at the end, peak {out['rss_peak_mb']:.0f} MB; "
              f"internal errors in its log: {out['proxy_internal_errors']}.",
              f"- The LiteLLM path runs in the client process: its RSS went from "
              f"{out['litellm_rss_start_mb']:.0f} to {out['litellm_rss_end_mb']:.0f} MB."]
    for r in out["runs"]:
        if r.errors:
            lines.append(f"- Errors on '{r.path}': " + ", ".join(
                f"{k} × {v}" for k, v in sorted(r.errors.items())))
    return "\n".join(lines)


def update(doc: Path, table: str, command: str, begin: str = BEGIN, end: str = END) -> None:
    """Rewrite the doc's section between the `begin` and `end` markers (append it if absent)."""
    block = f"{begin}\nMade by `{command}`.\n\n{table}\n{end}"
    text = doc.read_text() if doc.exists() else ""
    if begin in text and end in text:
        text = text[:text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        text += ("\n" if text else "") + block + "\n"
    doc.write_text(text)


def main() -> None:
    if sys.argv[1:2] == ["upstream"]:
        upstream = FixedLatencyUpstream(float(sys.argv[3]) / 1000)
        asyncio.run(upstream.serve_forever(int(sys.argv[2])))
        return
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--latency-ms", type=int, nargs="+", default=[50, 2000],
                    help="upstream latencies to run at, one full run each")
    ap.add_argument("--lines", type=int, default=12, help="lines per tool output")
    ap.add_argument("--window", type=int, default=8000, help="the route's context window")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per path at most")
    ap.add_argument("--update", type=Path, default=None, help="rewrite this doc's section")
    args = ap.parse_args()
    n = args.sessions * args.turns
    head = (f"{args.sessions} concurrent sessions × {args.turns} turns = {n:,} requests per "
            f"path, each session sending its next turn as soon as the last is answered; tool "
            f"outputs of {args.lines} lines (~{args.lines * 33} tokens); route window "
            f"{args.window:,} tokens. {platform.python_implementation()} "
            f"{platform.python_version()}, {os.cpu_count()} CPU cores shared by all three "
            "processes, loopback only.")
    tables = [report(args, asyncio.run(measure(args, ms))) for ms in args.latency_ms]
    table = "\n\n".join([head, *tables])
    print(table)
    if args.update is not None:
        update(args.update, table, "python -m bench.load " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
