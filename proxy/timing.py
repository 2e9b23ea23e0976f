"""The store and the upstream timed for /metrics (proxy/metrics.py).

Why the upstream is timed by wrapping its methods on the instance rather than with a
wrapper object: the app's other parts hold it and reach its own methods; an in-place wrap
changes none of that. The store gets a wrapper (`TimedStore`): the store object itself is
left as it is (the app, its tests and the admin side hold it).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any

STORE_OPS = ("record", "offload", "log", "recall", "evicted_ids", "events", "sessions", "fetch",
             "log_turns", "turns")
_INNER = "__ctxwarden_inner__"


def _timed(fn: Callable[..., Awaitable[Any]], observe: Callable[[tuple[Any, ...], float], None],
           ) -> Callable[..., Awaitable[Any]]:
    inner = getattr(fn, _INNER, fn)  # re-instrumenting (a second app) replaces, never nests

    @functools.wraps(inner)
    async def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await inner(*args, **kwargs)
        finally:
            observe(args, time.perf_counter() - started)

    setattr(timed, _INNER, inner)
    return timed


class TimedStore:
    """The store as the request path uses it: every store operation timed into
    `ctxwarden_store_seconds{op}`. A wrapper, not a patch: the store object itself is
    left as it is (the app, its tests and the admin side hold it)."""

    def __init__(self, store: Any, hist: Any) -> None:
        self.inner = store
        self._hist = hist
        self._wrapped: dict[str, Callable[..., Awaitable[Any]]] = {}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in STORE_OPS or not callable(attr):
            return attr
        fn = self._wrapped.get(name)
        if fn is None:
            fn = self._wrapped[name] = _timed(attr, _observer(self._hist.labels(name)))
        return fn


def _observer(hist: Any) -> Callable[[tuple[Any, ...], float], None]:
    def seen(_args: tuple[Any, ...], seconds: float) -> None:
        hist.observe(seconds)
    return seen


def instrument_upstream(upstream: Any, m: Any) -> None:
    """`ctxwarden_upstream_seconds{route, stream}` (`m`: the app's `Metrics`)."""
    for op, stream in (("complete", "false"), ("open_stream", "true")):
        def seen(args: tuple[Any, ...], s: float, stream: str = stream) -> None:
            m.upstream_seconds.labels(args[0].name, stream).observe(s)
        setattr(upstream, op, _timed(getattr(upstream, op), seen))


class Laps:
    """A request's time by phase (`phases_ms` in its log line: proxy/pipeline.py), so an
    operator can tell where a slow request's overhead went: `lap(name)` adds the time
    since the previous lap (or since it was made) to `name`."""

    __slots__ = ("_t", "ms")

    def __init__(self) -> None:
        self._t = time.perf_counter()
        self.ms: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.ms[name] = self.ms.get(name, 0.0) + (now - self._t) * 1000
        self._t = now

    def rounded(self) -> dict[str, float]:
        return {k: round(v, 2) for k, v in self.ms.items()}
