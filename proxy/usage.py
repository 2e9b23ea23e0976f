"""What the provider says a reply cost: prompt, completion and cached prompt tokens.

The proxy's own figures (`X-Ctxwarden-Tokens-Out`, the request log's `prefix_ratio`) are
its counts and its estimate of what a prefix cache can serve, made before forwarding. The
provider's `usage` is the bill: `prompt_tokens_details.cached_tokens` (OpenAI, and what
LiteLLM reports for Anthropic's cache reads and Gemini's cached content) says how much of
the prompt its cache actually served. Both go to the request log (`usage_prompt`,
`usage_completion`, `usage_cached`) and to `/metrics`, so an operator sees whether the
stable prefix the proxy keeps (sticky evictions, recall near the tail) pays off.

A stream carries usage only when the client asked for it (`stream_options.include_usage`):
the proxy never asks on its behalf, since that adds a chunk with no choices the client did
not expect. `StreamUsage` reads it from the frames going by, parsing only the one that
holds a usage object.
"""

from __future__ import annotations

from typing import Any, TypeGuard

import orjson


def usage_fields(usage: Any) -> dict[str, int]:
    """The request log's usage fields of a provider's `usage` object (those it has)."""
    if not isinstance(usage, dict):
        return {}
    out: dict[str, int] = {}
    for key, field in (("prompt_tokens", "usage_prompt"),
                       ("completion_tokens", "usage_completion")):
        value = usage.get(key)
        if _count(value):
            out[field] = value
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if not _count(cached):  # Anthropic's own name, where a transport passes it as is
        cached = usage.get("cache_read_input_tokens")
    if _count(cached):
        out["usage_cached"] = cached
    return out


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class StreamUsage:
    """`see(frame)` each SSE frame relayed; `fields` then holds the usage chunk's fields
    (empty if the stream had none). A frame is whole events (proxy/upstream/direct.py)."""

    __slots__ = ("fields",)

    def __init__(self) -> None:
        self.fields: dict[str, int] = {}

    def see(self, frame: bytes) -> None:
        if b'"usage":{' not in frame and b'"usage": {' not in frame:
            return  # OpenAI sends "usage":null on every other chunk
        for line in frame.split(b"\n"):
            if not line.startswith(b"data:"):
                continue
            try:
                data = orjson.loads(line[5:])
            except orjson.JSONDecodeError:  # [DONE], or not ours to judge
                continue
            found = usage_fields(data.get("usage")) if isinstance(data, dict) else {}
            if found:
                self.fields = found
