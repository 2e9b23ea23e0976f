"""The load benchmark's parts: the upstream with a fixed latency, the agent workload, and
the three call paths it is driven through (straight to the upstream, through ctxwarden,
through a plain `litellm.acompletion`).

Overhead is measured per request as the client's latency minus the upstream's own service
time, which the upstream writes into the completion id (`chatcmpl-N-svc<µs>`): the id
survives every path unchanged (ctxwarden relays the body as bytes; LiteLLM keeps the id),
so a slow upstream or its queue never counts as the proxy's time.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from tests.support.openai_server import Reply, UpstreamServer

_STARTED: ContextVar[float] = ContextVar("started")
_SVC = re.compile(r"-svc(\d+)$")
_SESSION = re.compile(r"^Refactor the (\S+) service\.$")
_STUB = re.compile(r"offloaded as chunk ([0-9a-f~]+);")
_RECALLED = re.compile(r"\[chunk ([0-9a-f~]+), turn \d+, \w+\]")


class FixedLatencyUpstream(UpstreamServer):
    """The suite's OpenAI stand-in (it still rejects invalid requests), answering after a
    fixed sleep, with its service time in the id. It also notes, per session, the chunks
    each forwarded request depended on (stubs and recalled passages): GET /v1/_deps."""

    def __init__(self, latency_s: float) -> None:
        super().__init__(context_window=None, record=False)
        self.latency_s = latency_s
        self.deps: dict[str, dict[str, set[str]]] = {}

    def routes(self, app: web.Application) -> None:
        super().routes(app)
        app.router.add_get("/v1/_deps", self._deps)

    def _validate(self, body: dict[str, Any]) -> int:
        msgs = body.get("messages")
        if isinstance(msgs, list) and len(msgs) > 1 and isinstance(msgs[1], dict):
            session = _SESSION.search(str(msgs[1].get("content")))
            if session is not None:
                mine = self.deps.setdefault(session.group(1), {"stubs": set(), "recalled": set()})
                for m in msgs:
                    if isinstance(m, dict) and m.get("role") == "tool":
                        mine["stubs"].update(_STUB.findall(str(m.get("content"))))
                mine["recalled"].update(_RECALLED.findall(str(msgs[-1].get("content"))))
        return super()._validate(body)

    async def _deps(self, request: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps({k: {kk: sorted(vv) for kk, vv in v.items()}
                                               for k, v in self.deps.items()}),
                            content_type="application/json")

    def _echo(self, body: dict[str, Any]) -> Reply:  # type: ignore[override]
        return Reply(text="Done. What next?", delay=self.latency_s)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        _STARTED.set(time.perf_counter())
        return await super()._chat(request)

    def _head(self, body: dict[str, Any], obj: str) -> dict[str, Any]:
        head = super()._head(body, obj)
        head["id"] += f"-svc{int((time.perf_counter() - _STARTED.get()) * 1e6)}"
        return head

    async def serve_forever(self, port: int) -> None:
        """Serve on `port` until the process is stopped (the benchmarks' upstream process)."""
        await self.start(port=port)
        await asyncio.Event().wait()


def service_ms(completion_id: str) -> float | None:
    m = _SVC.search(completion_id or "")
    return int(m.group(1)) / 1000 if m else None


def tool_output(name: str, t: int, lines: int) -> str:
    """A plausible file read: code lines with ids unique to the session and turn."""
    return "\n".join(f"{name}/mod{t}.py:{i}: def handle_{name}_{t}_{i}(req): "
                     f"return store.get('{name}-{t}-{i}', default={i * 7})"
                     for i in range(lines))


def next_turn(msgs: list[dict[str, Any]], name: str, t: int, lines: int) -> None:
    """Append one agent step: a tool call, its result, a remark, the user's next ask."""
    if not msgs:
        msgs += [{"role": "system", "content": "You are a careful coding agent."},
                 {"role": "user", "content": f"Refactor the {name} service."}]
    cid = f"call_{t}"
    msgs += [{"role": "assistant", "content": None, "tool_calls": [{
                 "id": cid, "type": "function", "function": {
                     "name": "read_file", "arguments": f'{{"path": "{name}/mod{t}.py"}}'}}]},
             {"role": "tool", "tool_call_id": cid, "content": tool_output(name, t, lines)},
             {"role": "assistant", "content": f"mod{t} read."},
             {"role": "user", "content": f"What does handle_{name}_{max(0, t - 9)}_3 return?"}]


@dataclass
class Run:
    path: str
    latency_ms: list[float] = field(default_factory=list)
    overhead_ms: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    evicted: dict[str, int] = field(default_factory=dict)  # session -> max header seen
    recalled: dict[str, int] = field(default_factory=dict)  # session -> sum of headers

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


# A sender posts one request and returns (completion id, X-Ctxwarden-* headers).
Sender = Callable[[str, list[dict[str, Any]]], Awaitable[tuple[str, dict[str, str]]]]


def aiohttp_sender(http: aiohttp.ClientSession, url: str, model: str,
                   headers: Callable[[str], dict[str, str]]) -> Sender:
    async def send(name: str, msgs: list[dict[str, Any]]) -> tuple[str, dict[str, str]]:
        async with http.post(url, data=orjson.dumps({"model": model, "messages": msgs}),
                             headers={"Content-Type": "application/json", **headers(name)}) as r:
            raw = await r.read()
            if r.status != 200:
                raise RuntimeError(f"HTTP {r.status}")
            info = {k: v for k, v in r.headers.items() if k.startswith("X-Ctxwarden-")}
        return str(orjson.loads(raw)["id"]), info
    return send


def litellm_sender(api_base: str) -> Sender:
    import litellm

    async def send(name: str, msgs: list[dict[str, Any]]) -> tuple[str, dict[str, str]]:
        resp = await litellm.acompletion(model="openai/mock-1", messages=msgs,
                                         api_base=api_base, api_key="sk-load", max_retries=0)
        return str(resp.id), {}
    return send


async def drive(path: str, send: Sender, sessions: int, turns: int, lines: int,
                timeout_s: float, prefix: str = "a") -> Run:
    """`sessions` agents at once, each `turns` requests in a row; bounded by `timeout_s`."""
    run = Run(path)

    async def agent(name: str) -> None:
        msgs: list[dict[str, Any]] = []
        for t in range(turns):
            next_turn(msgs, name, t, lines)
            started = time.perf_counter()
            try:
                cid, info = await send(name, msgs)
            except Exception as exc:  # counted, never fatal: the run goes on
                run.error(str(exc)[:60] or type(exc).__name__)
                continue
            took = (time.perf_counter() - started) * 1000
            run.latency_ms.append(took)
            svc = service_ms(cid)
            if svc is None:
                run.error("no service time in the reply id")
                continue
            run.overhead_ms.append(took - svc)
            if info:
                ev = int(info.get("X-Ctxwarden-Evicted", 0))
                run.evicted[name] = max(run.evicted.get(name, 0), ev)
                run.recalled[name] = run.recalled.get(name, 0) + int(
                    info.get("X-Ctxwarden-Recalled", 0))
            msgs.append({"role": "assistant", "content": "Done. What next?"})  # the reply

    started = time.perf_counter()
    tasks = [asyncio.create_task(agent(f"{prefix}{i:03d}")) for i in range(sessions)]
    done, pending = await asyncio.wait(tasks, timeout=timeout_s)
    for task in pending:
        task.cancel()
        run.error("run timed out")
    await asyncio.gather(*pending, return_exceptions=True)
    run.wall_s = time.perf_counter() - started
    return run
