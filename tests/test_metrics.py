"""`GET /metrics`: the counters and histograms move with real traffic through the real app."""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families

from proxy.app import init_app
from proxy.cli.demo import drive
from proxy.config import load_settings
from store.base import MemoryStore
from tests.support.app import settings_for
from tests.support.messages import long_session
from tests.support.openai_server import UpstreamServer

ClientFactory = Callable[..., Awaitable[TestClient[Any, Any]]]
ROOT = Path(__file__).resolve().parent.parent
CHAT = "/v1/chat/completions"


async def scrape(client: TestClient[Any, Any]) -> dict[tuple[str, frozenset[Any]], float]:
    resp = await client.get("/metrics")
    assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/plain")
    out: dict[tuple[str, frozenset[Any]], float] = {}
    for fam in text_string_to_metric_families(await resp.text()):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def get(m: dict[tuple[str, frozenset[Any]], float], name: str, **labels: str) -> float:
    return m.get((name, frozenset(labels.items())), 0.0)


def by_class(events: list[dict[str, Any]], action: str) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for e in events:
        if e["action"] == action:
            out[e["class"]] += e["tokens"]
    return dict(out)


async def test_counters_follow_requests_statuses_tokens_and_evictions(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    client = await aiohttp_client(init_app(settings_for(upstream), store=MemoryStore()))
    before = await scrape(client)
    assert get(before, "ctxwarden_requests_total", path=CHAT, route="test", status="200") == 0

    sid = {"X-Session-ID": "m1"}
    first = await client.post(CHAT, json={"model": "test-1", "messages": long_session(14)},
                              headers=sid)
    assert first.status == 200 and int(first.headers["X-Ctxwarden-Evicted"]) > 0
    second = await client.post(CHAT, headers=sid, json={
        "model": "test-1", "stream": True, "messages": long_session(15)})
    assert second.status == 200 and (await second.text()).endswith("data: [DONE]\n\n")
    bad = await client.post(CHAT, data=b"{not json", headers={"Content-Type": "application/json"})
    assert bad.status == 400
    assert (await client.get("/nowhere")).status == 404
    upstream.enqueue_error(429, headers={"Retry-After": "7"})
    limited = await client.post(CHAT, headers={"X-Session-ID": "m2"}, json={
        "model": "test-1", "messages": [{"role": "user", "content": "hi"}]})
    assert limited.status == 429

    m = await scrape(client)
    req = "ctxwarden_requests_total"
    assert get(m, req, path=CHAT, route="test", status="200") == 2
    assert get(m, req, path=CHAT, route="test", status="429") == 1
    assert get(m, req, path=CHAT, route="", status="400") == 1  # refused before a route
    assert get(m, req, path="unmatched", route="", status="404") == 1
    assert get(m, req, path="/metrics", route="", status="200") == 1  # the first scrape

    ok = (first, second)
    hi = (await (await client.get("/admin/turns?session=m2")).json())["turns"][0]  # the 429
    assert get(m, "ctxwarden_tokens_in_total", route="test") == (
        sum(int(r.headers["X-Ctxwarden-Tokens-In"]) for r in ok) + hi["tokens_in"])
    assert get(m, "ctxwarden_tokens_out_total", route="test") == (
        sum(int(r.headers["X-Ctxwarden-Tokens-Out"]) for r in ok) + hi["tokens_out"])
    events = (await (await client.get("/admin/evictions?session=m1")).json())["events"]
    evicted = by_class(events, "evict")
    assert evicted and all(
        get(m, "ctxwarden_evicted_tokens_total", route="test", **{"class": k}) == v
        for k, v in evicted.items())
    up = "ctxwarden_upstream_seconds_count"
    assert get(m, up, route="test", stream="false") == 2  # one reply, one 429
    assert get(m, up, route="test", stream="true") == 1
    assert get(m, "ctxwarden_overhead_seconds_count", route="test") == 3
    for phase in ("analyse", "relate", "fit", "commit"):  # each request's phases too
        assert get(m, "ctxwarden_phase_seconds_count", route="test", phase=phase) == 3
    assert 0 < sum(get(m, "ctxwarden_phase_seconds_sum", route="test", phase=phase)
                   for phase in ("wait", "analyse", "load", "chunk", "relate", "fit",
                                 "vector", "recall", "record", "commit")) <= get(
        m, "ctxwarden_overhead_seconds_sum", route="test")
    assert get(m, "ctxwarden_store_seconds_count", op="record") >= 1
    assert get(m, "ctxwarden_store_seconds_count", op="evicted_ids") == 2  # m1 and m2, once each


async def test_demo_session_counts_evicted_and_recalled_tokens_by_class(
        aiohttp_client: ClientFactory, tmp_path: Path) -> None:
    settings = load_settings(ROOT / "config.yaml", store={"path": str(tmp_path / "db")})
    client = await aiohttp_client(init_app(settings))
    result = await drive(client.session, str(client.make_url("")).rstrip("/"), "demo-m",
                         io.StringIO())
    m = await scrape(client)
    evicted, recalled = by_class(result.events, "evict"), by_class(result.events, "recall")
    assert evicted and recalled
    for k, v in evicted.items():
        assert get(m, "ctxwarden_evicted_tokens_total", route="demo", **{"class": k}) == v
    for k, v in recalled.items():
        assert get(m, "ctxwarden_recalled_tokens_total", route="demo", **{"class": k}) == v
    assert get(m, "ctxwarden_requests_total", path=CHAT, route="demo", status="200") == 10
    assert get(m, "ctxwarden_upstream_seconds_count", route="demo", stream="false") == 10
    # One durable store call per turn that evicts or recalls; recall itself reads the
    # session's index, never the store.
    assert get(m, "ctxwarden_store_seconds_count", op="record") >= 1
    assert get(m, "ctxwarden_store_seconds_count", op="recall") == 0
    assert get(m, "ctxwarden_tokens_in_total", route="demo") == sum(
        t["tokens_in"] for t in result.turns)
