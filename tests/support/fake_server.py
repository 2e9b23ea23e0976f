"""What every provider stand-in shares (OpenAI, Anthropic, Gemini): scripted replies,
what it received, one real aiohttp server on 127.0.0.1.

A subclass adds its routes (`routes`) and speaks its provider's wire; `PATH` is what its
clients put after host and port (`/v1` for OpenAI's SDK, `/v1beta` for LiteLLM's Gemini,
nothing for LiteLLM's Anthropic, which adds `/v1/messages` itself).
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Self

from aiohttp import web
from multidict import CIMultiDict


@dataclass
class Reply:
    """One scripted answer. `status` != 200 answers an error (the provider's body for it)."""

    text: str | None = None
    tool_calls: list[dict[str, Any]] | None = None  # [{"name", "arguments"[, "id"]}]
    status: int = 200
    message: str | None = None  # error message; default: the provider's for the status
    code: str | None = None
    type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before the status line
    chunk_delay: float = 0.0  # stream: seconds between events
    break_after: int | None = None  # stream: drop the connection after this many events
    chunks: int | None = None  # stream: split the text into this many pieces (default: words)
    write_size: int | None = None  # stream: send the bytes in writes this small (re-framing)
    done: bool = True  # stream: end with `data: [DONE]` (some servers just close)


@dataclass
class Received:
    body: dict[str, Any]
    headers: CIMultiDict[str]  # case-insensitive, like HTTP
    path: str


class Rejected(Exception):
    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(status)
        self.status, self.body = status, body


class FakeServer:
    PATH = ""

    def __init__(self, *, context_window: int | None, api_key: str | None) -> None:
        self.context_window = context_window  # None: do not count tokens (benchmarks)
        self.api_key = api_key  # when set, the provider's key header is required
        self.history: list[Received] = []
        self.rejected = 0
        self.served = 0
        self._queue: deque[Reply] = deque()
        self._runner: web.AppRunner | None = None
        self._ids = itertools.count(1)
        self.url = ""

    def enqueue(self, text: str | None = None, **fields: Any) -> Reply:
        reply = Reply(text=text, **fields)
        self._queue.append(reply)
        return reply

    def enqueue_error(self, status: int, message: str | None = None, **fields: Any) -> Reply:
        return self.enqueue(status=status, message=message, **fields)

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def start(self, port: int = 0) -> Self:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        self.routes(app)
        # handler_cancellation: a client that hangs up cancels the handler at once, which is
        # how a server notices (and counts) a disconnect even while it sleeps.
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None,
                                     shutdown_timeout=0.1)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}{self.PATH}"
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
