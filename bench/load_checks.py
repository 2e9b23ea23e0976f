"""The load benchmark's checks: what the proxy's store holds against what the upstream
received (lost events), what the proxy's own /metrics and request log say about where
its time went, and process RSS."""

from __future__ import annotations

import asyncio
import re
import statistics
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from proxy.auth import tenant_for_key

KEYS = [f"ck-load-tenant-{i}" for i in range(4)]
ADMIN = "ak-load-admin"


def key_of(name: str) -> str:
    return KEYS[int(name.lstrip("aw") or 0) % len(KEYS)]


async def admin(http: aiohttp.ClientSession, url: str, name: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    if name is not None:
        headers["X-Tenant-ID"] = tenant_for_key(key_of(name))
        url = f"{url}/admin/evictions?session={name}"
    async with http.get(url, headers=headers) as r:
        return await r.json()


async def embedded(http: aiohttp.ClientSession, url: str, timeout: float) -> None:
    """Until the store has embedded everything offloaded so far (MiniLM is loaded)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        state = await admin(http, f"{url}/admin/store")
        if state["backlog"] == 0 and state["rows"].get("passages"):
            return
        await asyncio.sleep(0.5)


async def lost_events(http: aiohttp.ClientSession, url: str, upstream: str) -> dict[str, int]:
    """Every chunk a forwarded request depended on (as the upstream saw it: stubs and
    recalled passages) against the proxy's store: its evict and recall events, and the
    offloaded chunk rows."""
    async with http.get(f"{upstream}/_deps") as r:
        deps: dict[str, dict[str, list[str]]] = await r.json()
    lost = {"evict": 0, "recall": 0, "stubs": 0, "recalled": 0, "chunks_missing": 0}
    distinct = 0
    for name, dep in deps.items():
        if name.startswith("w"):
            continue  # the warm-up session
        events = (await admin(http, url, name))["events"]
        evicted = {e["chunk_id"] for e in events if e["action"] == "evict"}
        recalled = {e["chunk_id"] for e in events if e["action"] == "recall"}
        lost["evict"] += len(set(dep["stubs"]) - evicted)
        lost["recall"] += len(set(dep["recalled"]) - recalled)
        lost["stubs"] += len(dep["stubs"])
        lost["recalled"] += len(dep["recalled"])
        distinct += len(evicted)
    rows = (await admin(http, f"{url}/admin/store"))["rows"]
    lost["chunks_missing"] = max(0, distinct - int(rows.get("chunks", 0)))
    return lost


async def inside(http: aiohttp.ClientSession, url: str) -> dict[str, tuple[float, float]]:
    """Mean seconds and count of the store calls and the pre-forward time, from /metrics."""
    async with http.get(f"{url}/metrics") as r:
        text = await r.text()
    out: dict[str, tuple[float, float]] = {}
    for what, name, label in (("overhead", "ctxwarden_overhead_seconds", 'route="load"'),
                              *((op, "ctxwarden_store_seconds", f'op="{op}"')
                                for op in ("record", "evicted_ids", "fetch"))):
        got = {kind: float(m.group(1)) for kind in ("sum", "count") if (m := re.search(
            rf"^{name}_{kind}{{{label}}} (\S+)$", text, re.M))}
        if got.get("count"):
            out[what] = (got["sum"] / got["count"] * 1000, got["count"])
    return out


def split_overhead(log: Path) -> dict[str, tuple[float, float, int]]:
    """The proxy's pre-forward time from its request log lines: (p50, p99, count) for the
    turns that fit the window and for those that evicted (and so offloaded and logged)."""
    fit: list[float] = []
    evicting: list[float] = []
    for line in log.read_bytes().splitlines():
        if line.startswith(b"{") and b'"event": "request"' in line:
            row = orjson.loads(line)
            (evicting if row.get("evicted") else fit).append(float(row["overhead_ms"]))
    return {k: (statistics.median(v), statistics.quantiles(v, n=100)[98], len(v))
            for k, v in (("fitting", fit), ("evicting", evicting)) if len(v) > 1}
