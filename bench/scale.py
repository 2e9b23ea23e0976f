"""`make bench-scale`: one, two and four `ctxwarden serve` replicas on one store in object
storage (a moto S3 server on loopback), behind a round-robin client, against one replica
on local disk doing the same work.

    .venv/bin/python -m bench.scale [--quick] [--sessions 200] [--turns 20]
                                    [--update docs/benchmarks.md]

Reuses the load benchmark's parts (bench/load_paths.py): the fixed-latency upstream,
the agent workload, the driver. Each session hops replica on every turn (turn t goes to
replica (session + t) mod n). The upstream notes a digest of every forwarded body per
(session, turn); a run is consistent when every digest equals the local single replica's
for the same session and turn. Lost events: as in bench/load_checks.py (every stub and
every recalled chunk the upstream saw has its event and row in the shared store).
Vectors are off for the comparison (`min_similarity: 1.0`): they are a per-process,
timing-dependent refinement, which even one replica does not repeat run to run.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import orjson

import proxy  # noqa: F401  (offline defaults before litellm)
from bench.harness import free_port, wait_ready
from bench.load import _pct, update
from bench.load_checks import ADMIN, KEYS, key_of, lost_events
from bench.load_paths import FixedLatencyUpstream, Run, aiohttp_sender, drive
from bench.scale_costs import costs, describe
from tests.support.s3 import ENV_KEYS, MotoServer

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- bench-scale:begin -->", "<!-- bench-scale:end -->"


class DigestUpstream(FixedLatencyUpstream):
    """Also notes `turn:digest` of each forwarded body under its session's deps."""

    def _validate(self, body: dict[str, Any]) -> int:
        status = super()._validate(body)
        msgs = body.get("messages") or []
        tools = [m for m in msgs if isinstance(m, dict) and m.get("role") == "tool"]
        first = str(msgs[1].get("content")) if len(msgs) > 1 else ""
        if tools and first.startswith("Refactor the "):
            name = first.split()[2]
            turn = str(tools[-1].get("tool_call_id", "")).removeprefix("call_")
            digest = hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()
            self.deps.setdefault(name, {"stubs": set(), "recalled": set()}).setdefault(
                "bodies", set()).add(f"{turn}:{digest[:16]}")
        return status


def config(tmp: Path, port: int, up_port: int, store: dict[str, Any]) -> Path:
    cfg = tmp / f"config-{port}.yaml"
    cfg.write_text(orjson.dumps({
        "server": {"port": port}, "store": store,
        "auth": {"mode": "proxy_keys", "keys": KEYS, "admin_keys": [ADMIN]},
        "routes": [{"name": "load", "model": "load-*", "context_window": 8000,
                    "max_output_tokens": 256, "recall": {"min_similarity": 1.0},
                    "upstream": {"model": "openai/mock-1", "api_key": "sk-load",
                                 "api_base": f"http://127.0.0.1:{up_port}/v1"}}]}).decode())
    return cfg


async def measure(args: argparse.Namespace, label: str, replicas: int,
                  store: dict[str, Any]) -> dict[str, Any]:
    up_port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), **ENV_KEYS}
    tmp = Path(tempfile.mkdtemp(prefix="ctxw-scale-"))
    procs = [subprocess.Popen([sys.executable, "-m", "bench.scale", "upstream", str(up_port),
                               str(args.latency_ms)], cwd=ROOT, env=env)]
    up = f"http://127.0.0.1:{up_port}/v1"
    try:
        await wait_ready(f"{up}/models", procs[0])
        urls = []
        for _ in range(replicas):
            port = free_port()
            cfg = config(tmp, port, up_port, store)
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "proxy.cli", "serve", "--config", str(cfg)], cwd=ROOT,
                env=env, stderr=open(tmp / f"proxy-{port}.log", "wb")))  # noqa: SIM115
            urls.append(f"http://127.0.0.1:{port}")
        for url, proc in zip(urls, procs[1:], strict=True):
            await wait_ready(f"{url}/healthz", proc)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                         timeout=aiohttp.ClientTimeout(total=None)) as http:
            def headers(name: str) -> dict[str, str]:
                return {"Authorization": f"Bearer {key_of(name)}", "X-Session-ID": name}

            senders = [aiohttp_sender(http, f"{u}/v1/chat/completions", "load-1", headers)
                       for u in urls]

            async def round_robin(name: str, msgs: list[dict[str, Any]]) -> Any:
                turn = sum(m.get("role") == "tool" for m in msgs)
                return await senders[(int(name[1:]) + turn) % replicas](name, msgs)

            run: Run = await drive(label, round_robin, args.sessions, args.turns, args.lines,
                                   args.timeout)
            lost = await lost_events(http, urls[-1], up)
            async with http.get(f"{up}/_deps") as r:
                deps = await r.json()
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
                p.wait(60)
        causes: dict[str, int] = {}
        for log in tmp.glob("proxy-*.log"):  # why a request failed: the store's own words
            for line in log.read_bytes().splitlines():
                if b'"event": "store_unavailable"' in line:
                    ev = orjson.loads(line)
                    detail = re.sub(r"https?://\S+", "<url>", str(ev.get("detail", "")))
                    why = f"{ev.get('op')}: {detail[:240]}"
                    causes[why] = causes.get(why, 0) + 1
        shutil.rmtree(tmp, ignore_errors=True)
    bodies = {f"{name}/{b}" for name, d in deps.items() for b in d.get("bodies", [])}
    return {"label": label, "replicas": replicas, "run": run, "lost": lost, "bodies": bodies,
            "causes": causes}


def report(args: argparse.Namespace, results: list[dict[str, Any]]) -> str:
    ref = results[0]
    want = {b.rsplit(":", 1)[0]: b for b in ref["bodies"]}
    lines = [f"{args.sessions} sessions × {args.turns} turns, all at once, each session on "
             f"another replica every turn; upstream latency {args.latency_ms} ms; window 8,000 "
             f"tokens; {os.cpu_count()} CPU cores shared by every process (moto, the "
             "replicas and their embedders, the upstream, the client), loopback only.", "",
             "| store, replicas | ok | errors | lost events | inconsistent forwarded requests "
             f"(of {len(want):,}) | throughput (req/s), per replica | overhead p50 / p95 (ms) "
             "|",
             "|---|---|---|---|---|---|---|"]
    for res in results:
        run: Run = res["run"]
        got = {b.rsplit(":", 1)[0]: b for b in res["bodies"]}
        bad = sum(got.get(k) != v for k, v in want.items())
        lost = res["lost"]["evict"] + res["lost"]["recall"] + res["lost"]["chunks_missing"]
        tput = len(run.latency_ms) / run.wall_s
        lines.append(
            f"| {res['label']} | {len(run.latency_ms):,} | {sum(run.errors.values())} | "
            f"{lost} | {bad if res is not ref else '(reference)'} | {tput:.0f}, "
            f"{tput / res['replicas']:.0f} | **{_pct(run.overhead_ms, 50):.1f}** / "
            f"{_pct(run.overhead_ms, 95):.1f} |")
    for res in results:
        for why, k in sorted(res["causes"].items()):
            lines.append(f"- {res['label']}: {k} × store_unavailable ({why})")
    if "costs" in results[0]:
        lines += ["", describe(results[0]["costs"])]
    return "\n".join(lines)


def main() -> None:
    if sys.argv[1:2] == ["upstream"]:
        upstream = DigestUpstream(float(sys.argv[3]) / 1000)
        asyncio.run(upstream.serve_forever(int(sys.argv[2])))
        return
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="20 sessions × 20 turns")
    ap.add_argument("--sessions", type=int, default=200)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--latency-ms", type=int, default=50)
    ap.add_argument("--lines", type=int, default=12, help="lines per tool output")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds per run at most")
    ap.add_argument("--update", type=Path, default=None, help="rewrite this doc's section")
    args = ap.parse_args()
    if args.quick:
        args.sessions, args.turns = 20, 20
    moto = MotoServer().start()
    try:
        async def all_runs() -> list[dict[str, Any]]:
            tmp = Path(tempfile.mkdtemp(prefix="ctxw-scale-local-"))
            try:
                out = [await measure(args, "local disk, 1 (reference)", 1,
                                     {"path": str(tmp / "lancedb")})]
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            out[0]["costs"] = await costs(moto)
            for n in args.replicas:
                out.append(await measure(args, f"S3 (moto), {n}", n, {
                    "path": moto.bucket(), "storage_options": moto.storage_options(keys=False)}))
            return out
        table = report(args, asyncio.run(all_runs()))
    finally:
        moto.stop()
    print(table)
    if args.update is not None:
        update(args.update, table, "python -m bench.scale " + " ".join(sys.argv[1:]),
               BEGIN, END)


if __name__ == "__main__":
    main()
