"""`GET /metrics` in Prometheus' text format (prometheus-client), one registry per app.

    ctxwarden_requests_total{path, route, status}   path is the route template, route the
                                                    config route a chat request matched
    ctxwarden_tokens_in_total{route}                prompt tokens clients sent
    ctxwarden_tokens_out_total{route}               prompt tokens forwarded (fitted + recall)
    ctxwarden_evicted_tokens_total{route, class}    tokens newly evicted
    ctxwarden_recalled_tokens_total{route, class}   tokens re-injected by recall
    ctxwarden_upstream_prompt_tokens_total{route}   prompt tokens the provider billed
    ctxwarden_upstream_cached_tokens_total{route}   ... of which its prompt cache served
    ctxwarden_upstream_completion_tokens_total{route}  completion tokens it billed (usage
                                                    as replies report it: proxy/usage.py)
    ctxwarden_store_seconds{op}                     store calls (record, evicted_ids, …)
    ctxwarden_upstream_seconds{route, stream}       a whole reply, or until a stream opens
    ctxwarden_overhead_seconds{route}               time in the proxy before forwarding
    ctxwarden_phase_seconds{route, phase}           ... by phase (the request log's
                                                    `phases_ms`: analyse, relate, fit, …)
    ctxwarden_embed_backlog                         evicted chunks waiting to be embedded
    ctxwarden_embed_lag_seconds                     age of the oldest of them (read from the
                                                    store's `lag()` at scrape time)
    ctxwarden_vectors_pending                       new passages waiting for the vectors
                                                    that refine relevance (proxy/relate.py)
    ctxwarden_sessions                              session states held in memory
    ctxwarden_session_memory_bytes                  their estimated size (`footprint`)
    ctxwarden_sessions_dropped_total                states dropped for room (reloaded from
                                                    the store when their session is next seen)
    ctxwarden_cold_offloaded_messages_total         unseen messages a worker process measured
                                                    (proxy/coldpool.py)
    ctxwarden_cold_worker_failures_total            times it died or hung (measured here then)

Why per app, not prometheus-client's global registry: tests and benchmarks build many apps
in one process, and each must count only its own traffic. The store's and the upstream's
timings: proxy/timing.py. The edge's hooks are one line (`observe`) plus one middleware.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest

from proxy.keys import PIPELINE, STORE, UPSTREAM
from proxy.timing import instrument_upstream

if TYPE_CHECKING:
    from collections.abc import Iterator

    from proxy.pipeline import Pipeline
    from proxy.prepared import Prepared

FAST = (.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1.0, 2.5, 5.0)
SLOW = (.005, .01, .025, .05, .1, .25, .5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
BILLED = (  # a reply's usage field (proxy/usage.py), its counter, the counter's help
    ("usage_prompt", "ctxwarden_upstream_prompt_tokens",
     "Prompt tokens the provider reported (its usage)"),
    ("usage_cached", "ctxwarden_upstream_cached_tokens",
     "Prompt tokens the provider reported its prompt cache served"),
    ("usage_completion", "ctxwarden_upstream_completion_tokens",
     "Completion tokens the provider reported"))


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter("ctxwarden_requests", "HTTP requests by path template, "
                                "config route and status", ["path", "route", "status"],
                                registry=r)
        self.tokens_in = Counter("ctxwarden_tokens_in", "Prompt tokens clients sent",
                                 ["route"], registry=r)
        self.tokens_out = Counter("ctxwarden_tokens_out", "Prompt tokens forwarded upstream "
                                  "(after eviction and recall)", ["route"], registry=r)
        self.evicted = Counter("ctxwarden_evicted_tokens", "Tokens newly evicted, by class",
                               ["route", "class"], registry=r)
        self.recalled = Counter("ctxwarden_recalled_tokens", "Tokens recalled, by class",
                                ["route", "class"], registry=r)
        self.billed = {field: Counter(name, text, ["route"], registry=r)
                       for field, name, text in BILLED}
        self.store_seconds = Histogram("ctxwarden_store_seconds", "Store call latency",
                                       ["op"], buckets=FAST, registry=r)
        self.upstream_seconds = Histogram("ctxwarden_upstream_seconds", "Upstream latency: "
                                          "whole reply, or until a stream opens",
                                          ["route", "stream"], buckets=SLOW, registry=r)
        self.overhead_seconds = Histogram("ctxwarden_overhead_seconds", "Time in the proxy "
                                          "before forwarding", ["route"], buckets=FAST,
                                          registry=r)
        self.phase_seconds = Histogram("ctxwarden_phase_seconds", "Time in the proxy "
                                       "before forwarding, by phase", ["route", "phase"],
                                       buckets=FAST, registry=r)
        self.embed_backlog = Gauge("ctxwarden_embed_backlog", "Evicted chunks waiting to be "
                                   "embedded", registry=r)
        self.embed_lag = Gauge("ctxwarden_embed_lag_seconds", "Age of the oldest evicted "
                               "chunk waiting to be embedded", registry=r)


METRICS: web.AppKey[Metrics] = web.AppKey("metrics", Metrics)
ROUTE: web.RequestKey[str] = web.RequestKey("ctxwarden_route", str)


def observe(request: web.Request, p: Prepared, overhead_ms: float) -> None:
    """The handler's one hook: what this request did to the context."""
    m = request.app.get(METRICS)
    if m is None:
        return
    route = request[ROUTE] = p.route.name
    m.tokens_in.labels(route).inc(p.tokens_in)
    m.tokens_out.labels(route).inc(p.tokens_out)
    for e in p.events:
        if e.action == "evict":
            m.evicted.labels(route, e.klass).inc(e.tokens)
        elif e.action == "recall":
            m.recalled.labels(route, e.klass).inc(e.tokens)
    m.overhead_seconds.labels(route).observe(overhead_ms / 1000)
    for phase, ms in p.laps.ms.items():
        m.phase_seconds.labels(route, phase).observe(ms / 1000)


def observe_usage(request: web.Request, route: str, fields: dict[str, int]) -> None:
    """What the provider reported a reply cost (proxy/usage.py `usage_fields`)."""
    m = request.app.get(METRICS)
    if m is None:
        return
    for field, counter in m.billed.items():
        if field in fields:
            counter.labels(route).inc(fields[field])


def _path(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


@web.middleware
async def count_requests(request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
                         ) -> web.StreamResponse:
    status = 500
    try:
        resp = await handler(request)
        status = resp.status
        return resp
    except web.HTTPException as exc:
        status = exc.status
        raise
    except asyncio.CancelledError:
        status = 499  # the client left before an answer
        raise
    finally:
        request.app[METRICS].requests.labels(_path(request), request.get(ROUTE, ""),
                                             str(status)).inc()


class PipelineCollector:
    """The pipeline's session LRU, cold pool, vector feed and embedder holds, read at
    scrape time."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.sessions = pipeline.sessions
        self.cold = pipeline.cold
        self.relater = pipeline.relater
        self.hush = pipeline.hush

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("ctxwarden_vectors_pending", "New passages waiting for the "
                                "vectors that refine relevance", value=self.relater.backlog)
        s = self.sessions
        yield GaugeMetricFamily("ctxwarden_sessions", "Session states held in memory",
                                value=len(s))
        yield GaugeMetricFamily("ctxwarden_session_memory_bytes", "Estimated memory of the "
                                "session states held", value=s.bytes)
        yield CounterMetricFamily("ctxwarden_sessions_dropped", "Session states dropped for "
                                  "room (reloaded from the store when next seen)",
                                  value=s.dropped)
        yield CounterMetricFamily("ctxwarden_cold_offloaded_messages", "Unseen messages a "
                                  "worker process measured", value=self.cold.offloaded)
        yield CounterMetricFamily("ctxwarden_cold_worker_failures", "Times the cold pool's "
                                  "worker died or hung", value=self.cold.failures)
        yield CounterMetricFamily("ctxwarden_embedder_holds", "Times the embedder process "
                                  "was stopped while a cold history was prepared",
                                  value=self.hush.holds)
        yield CounterMetricFamily("ctxwarden_embedder_held_seconds", "Time the embedder "
                                  "process spent stopped for cold histories",
                                  value=self.hush.seconds)
        yield CounterMetricFamily("ctxwarden_embedder_holds_refused", "Cold histories "
                                  "prepared with the embedder running: its fifth of the "
                                  "time was due", value=self.hush.refused)


async def metrics(request: web.Request) -> web.Response:
    body = generate_latest(request.app[METRICS].registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def setup_metrics(app: web.Application, m: Metrics) -> None:
    """GET /metrics and request counts; `m` is the one the pipeline's TimedStore feeds."""
    app[METRICS] = m  # `count_requests` (in init_app's middleware list) reads it
    app.router.add_get("/metrics", metrics)
    m.registry.register(PipelineCollector(app[PIPELINE]))
    lag = getattr(app[STORE], "lag", None)  # LanceStore: cheap, no LanceDB query
    if callable(lag):
        m.embed_backlog.set_function(lambda: float(lag()["backlog"]))
        m.embed_lag.set_function(lambda: float(lag()["embed_lag_s"]))

    async def wrap_upstream(app: web.Application) -> AsyncIterator[None]:
        instrument_upstream(app[UPSTREAM], m)  # the upstream exists once startup ran
        yield

    app.cleanup_ctx.append(wrap_upstream)
