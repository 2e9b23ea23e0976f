"""Reading what the proxy sends on the wire: strict SSE, and a port nobody listens on."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from typing import Any

import orjson


def parse_sse(raw: bytes) -> list[Any]:
    """A strict SSE reader: only `data: ` events, each ended by a blank line."""
    assert raw.endswith(b"\n\n"), raw[-80:]
    events: list[Any] = []
    for block in raw[:-2].split(b"\n\n"):
        assert block.startswith(b"data: ") and b"\n" not in block, block[:200]
        payload = block[len(b"data: "):]
        events.append("[DONE]" if payload == b"[DONE]" else orjson.loads(payload))
    return events


async def collect(stream: AsyncIterator[bytes]) -> bytes:
    """A transport's whole stream; every piece must be whole events."""
    pieces = [piece async for piece in stream]
    assert all(p.endswith(b"\n\n") for p in pieces)  # never a split event
    return b"".join(pieces)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port
