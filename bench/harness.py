"""Running the real proxy for a benchmark: `ctxwarden serve` in its own process, the test
suite's OpenAI stand-in in this one recording every body it receives, and a `Target` for
the replay core (bench/replay.py) that sends over HTTP.

Why this shape: the proxy runs as it is deployed (its own process, event loop and CPU
time; its peak RSS is its own), and what reached the upstream is read from the upstream,
not from the proxy's account of it. The upstream counts no tokens (`context_window=None`):
the replay core checks the window itself on the recorded bodies.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import statistics
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench.replay import Sent

ROOT = Path(__file__).resolve().parents[1]


def median_ms(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time of `fn()` over `repeat` calls, in milliseconds."""
    runs = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - t) * 1000)
    return statistics.median(runs)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_ready(url: str, proc: subprocess.Popen[bytes] | None = None,
                     timeout: float = 90.0) -> None:
    """Until GET `url` answers below 500 (or the process exits: an error naming it)."""
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{url}: the process exited with {proc.returncode}")
            try:
                async with s.get(url) as r:
                    if r.status < 500:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise TimeoutError(url)


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return float("nan")
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def descendants(pid: int) -> list[int]:
    """`pid`'s live child processes, recursively (an embedder process, say)."""
    out: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for t in tasks:
        try:
            kids = [int(k) for k in (t / "children").read_text().split()]
        except OSError:
            continue
        for k in kids:
            out += [k, *descendants(k)]
    return out


def entry_point(root: Path = ROOT) -> tuple[str, str]:
    """(module, function) of the `ctxwarden` console script, read from pyproject.toml, so
    the benchmark starts whatever the checkout under test declares."""
    scripts = tomllib.loads((root / "pyproject.toml").read_text())["project"]["scripts"]
    module, func = scripts["ctxwarden"].split(":")
    return module, func


class ProxyProcess:
    """`ctxwarden serve --config <yaml>` from the checkout at `root` (default this one).

    Its stderr (one JSON log line per request) goes to `log`."""

    def __init__(self, config: Path, port: int, root: Path = ROOT) -> None:
        self.config, self.port, self.root = config, port, root
        self.url = f"http://127.0.0.1:{port}"
        self.log = config.with_suffix(".log")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ProxyProcess:
        module, func = entry_point(self.root)
        code = f"import sys; from {module} import {func}; sys.exit({func}())"
        env = {**os.environ, "PYTHONPATH": str(self.root)}
        self.proc = subprocess.Popen(  # noqa: S603  (our own interpreter and module)
            [sys.executable, "-c", code, "serve", "--config", str(self.config)],
            cwd=self.root, env=env, stdout=subprocess.DEVNULL,
            stderr=self.log.open("wb"))
        return self

    async def ready(self, timeout: float = 120.0) -> None:
        await wait_ready(f"{self.url}/healthz", self.proc, timeout)

    def failure(self) -> str:
        """The last lines of the log, for a process that did not start."""
        try:
            lines = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-3:])

    def peak_rss_mb(self) -> float:
        """Peak RSS of the proxy plus that of its live child processes (MB)."""
        if self.proc is None:
            return float("nan")
        pids = [self.proc.pid, *descendants(self.proc.pid)]
        return sum(rss_mb(p, "VmHWM") for p in pids)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def log_lines(self, event: str = "request") -> list[dict[str, Any]]:
        """The proxy's structured log lines of one event."""
        out = []
        pattern = re.compile(rb'"event": ?"' + event.encode() + rb'"')
        for line in self.log.read_bytes().splitlines():
            if pattern.search(line):
                try:
                    out.append(orjson.loads(line))
                except orjson.JSONDecodeError:
                    continue
        return out


class HttpTarget:
    """Sends a request to the proxy and returns what the upstream received for it.

    `upstream` is a `tests.support.openai_server.UpstreamServer` running in this process
    with `record=True`; its history is cleared after each request."""

    def __init__(self, http: aiohttp.ClientSession, proxy_url: str, upstream: Any,
                 model: str) -> None:
        self.http, self.proxy_url, self.upstream, self.model = http, proxy_url, upstream, model

    async def send(self, body: dict[str, Any], session: str) -> Sent:
        sent, got = await self.post("/v1/chat/completions", {**body, "model": self.model},
                                    session)
        if got is not None:
            sent.messages = got["messages"]
        return sent

    async def post(self, path: str, body: dict[str, Any], session: str
                   ) -> tuple[Sent, dict[str, Any] | None]:
        """`body` to the proxy's `path`: the outcome (its `messages` left to the caller) and
        the body the upstream received for it (None: nothing forwarded)."""
        headers = {"Content-Type": "application/json", "X-Session-ID": session}
        history = self.upstream.history
        n0 = len(history)
        t0 = time.perf_counter()
        async with self.http.post(f"{self.proxy_url}{path}", data=orjson.dumps(body),
                                  headers=headers) as r:
            reply = await r.read()
            status, h = r.status, r.headers
        ms = (time.perf_counter() - t0) * 1000
        got = history[n0:]
        del history[:]
        recalled = int(h.get("X-Ctxwarden-Recalled", 0) or 0)
        if status != 200 or not got:
            code = "not_recorded" if status == 200 else _error_code(reply)
            return Sent(None, status, code, ms=ms), None
        return Sent(None, status, recalled=recalled, ms=ms), got[-1].body

    async def direct(self, body: dict[str, Any]) -> float:
        """The same request straight to the upstream: milliseconds."""
        raw = orjson.dumps({**body, "model": "mock-1"})
        t0 = time.perf_counter()
        async with self.http.post(f"{self.upstream.url}/chat/completions", data=raw,
                                  headers={"Content-Type": "application/json"}) as r:
            await r.read()
        ms = (time.perf_counter() - t0) * 1000
        del self.upstream.history[:]
        return ms


def _error_code(raw: bytes) -> str | None:
    try:
        err = orjson.loads(raw).get("error") or {}
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return err.get("code") or err.get("type")


async def store_backlog(http: aiohttp.ClientSession, url: str) -> int | None:
    """The proxy's background work left (GET /admin/store): evicted chunks and new passages
    waiting for the embedder, texts in its queue, log records not in LanceDB yet. None if
    the proxy does not say. Only `backlog` counted before: a proxy whose store had embedded
    every chunk still embedded passages for ~10 s, on the cores the next measurement used."""
    try:
        async with http.get(f"{url}/admin/store") as r:
            if r.status != 200:
                return None
            state = await r.json()
    except (aiohttp.ClientError, ValueError):
        return None
    rows = state.get("rows") or {}
    counts = [state.get("backlog"), *(rows.get(k) for k in PENDING)]
    if not any(isinstance(v, int | float) for v in counts):
        return None
    return sum(int(v) for v in counts if isinstance(v, int | float))


PENDING = ("vectors_pending", "embed_queue", "wal_pending")


async def drain(http: aiohttp.ClientSession, url: str, limit_s: float) -> tuple[float, int | None]:
    """Wait (at most `limit_s`) until the proxy's background work is done (`store_backlog`):
    (seconds waited, work left)."""
    t0 = time.monotonic()
    left = await store_backlog(http, url)
    while left and time.monotonic() - t0 < limit_s:
        await asyncio.sleep(0.25)
        left = await store_backlog(http, url)
    return time.monotonic() - t0, left
