"""The one transport protocol, and what the two transports share: the reply, the resolved
route (`Target`), the closing stream.

A transport takes a `Target` (the route resolved once, at start) and the fitted body, and
gives back OpenAI bytes: `complete` a chat.completion, `open_stream` SSE events. An error
status raises a `proxy.errors` type before anything reaches the client (see `errors.py`).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import orjson

from proxy.errors import ProxyError


@dataclass(frozen=True, slots=True)
class UpstreamReply:
    """A non-streamed answer: `body` is the chat.completion JSON, sent to the client as-is;
    `headers` the provider's that the client gets too (`headers.to_client`)."""

    status: int
    body: bytes
    usage: dict[str, Any] | None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Target:
    """A route resolved once: where and how to send. Secrets stay out of its repr."""

    transport: Literal["direct", "litellm"]
    provider: str | None
    model: str  # direct: the provider's own model name; litellm: the LiteLLM model string
    api_base: str | None
    timeout: float
    url: str = ""  # direct: the full chat/completions URL
    proxy: str | None = field(default=None, repr=False)  # direct: HTTP(S)_PROXY, if any
    api_key: str | None = field(default=None, repr=False)
    headers: dict[str, str] = field(default_factory=dict, repr=False)  # direct: incl. auth
    # the route's `upstream.extra_headers` (litellm: plus the client's, per request)
    extra_headers: dict[str, str] = field(default_factory=dict, repr=False)
    mock_response: str | None = None
    # litellm: `max_tokens` sent when the client set no output limit (see resolve.py)
    default_max_tokens: int | None = None
    drop_params: bool = False  # litellm: parameters the provider lacks are dropped
    # direct: LiteLLM's mapping of the few fields this provider needs changed, if any
    prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = field(default=None, repr=False)

    @property
    def secrets(self) -> tuple[str | None, ...]:
        return (self.api_key,)


def sse_error(err: ProxyError) -> bytes:
    """The last event of a stream that broke after the status line was already sent."""
    return b"data: " + orjson.dumps(err.body()) + b"\n\n"


class ClosingStream:
    """SSE bytes from a transport, plus what must be closed when the consumer stops early.

    A plain async generator that was never started runs no `finally` on `aclose()`, so the
    upstream response it holds would leak; this wrapper closes it in every case, and it
    closes it at once, so the upstream sees the disconnect and stops generating.
    `headers`: the provider's response headers that the client gets too.
    """

    __slots__ = ("_gen", "_close", "_closed", "headers")

    def __init__(self, gen: AsyncGenerator[bytes, None],
                 close: Callable[[], Awaitable[None]],
                 headers: dict[str, str] | None = None) -> None:
        self._gen = gen
        self._close = close
        self._closed = False
        self.headers = headers or {}

    def __aiter__(self) -> ClosingStream:
        return self

    async def __anext__(self) -> bytes:
        return await self._gen.__anext__()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._gen.aclose()
        finally:
            await self._close()


class Transport(Protocol):
    """How a resolved target is reached: `direct.DirectTransport` (one aiohttp POST) or
    `via_litellm.LiteLLMTransport` (`litellm.acompletion`)."""

    async def complete(self, target: Target, body: dict[str, Any]) -> UpstreamReply:
        """A non-streamed chat completion; raises a ProxyError on any upstream failure."""
        ...

    async def open_stream(self, target: Target, body: dict[str, Any]) -> ClosingStream:
        """SSE bytes; an error status raises here, before the client gets a status line."""
        ...
