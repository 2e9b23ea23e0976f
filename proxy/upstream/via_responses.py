"""The Responses API to a provider reached through LiteLLM (Anthropic, Gemini, Bedrock…).

`litellm.aresponses` takes a Responses body, speaks the provider's own API (for most,
through its chat transform) and answers with Responses objects; here they become the bytes
OpenAI would send: a `response` object, or one SSE frame per event (`event: <type>` and
`data: <json>`). The route decides as for chat: its model, base, key, headers, timeout,
`drop_params`, and the output reserved for a provider that requires a limit. A failure
before the first byte is mapped at the same boundary as chat's (proxy/upstream/errors.py);
after it, it ends the stream with an `error` event.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import litellm
import orjson

from proxy.upstream.transport import ClosingStream, Target, UpstreamReply
from proxy.upstream.via_litellm import CONTROL, fail, frames, route_kwargs

# the Responses body's own fields LiteLLM would read as its controls: none go through
# from the client but the request's own (input, instructions, tools…)
_KEPT = frozenset({"input", "instructions", "tools", "tool_choice", "max_output_tokens",
                   "metadata", "temperature", "top_p", "text", "reasoning", "user",
                   "parallel_tool_calls", "include", "store", "truncation", "service_tier",
                   "safety_identifier", "prompt_cache_key"})


def _kwargs(target: Target, body: dict[str, Any], stream: bool) -> dict[str, Any]:
    fields = {k: v for k, v in body.items() if k in _KEPT or k not in CONTROL}
    fields.pop("model", None)
    fields.pop("stream", None)
    kw: dict[str, Any] = orjson.loads(orjson.dumps(fields))  # LiteLLM edits in place
    kw.update(route_kwargs(target, stream))
    if target.default_max_tokens is not None and kw.get("max_output_tokens") is None:
        kw["max_output_tokens"] = target.default_max_tokens  # what the proxy reserved
    return kw


async def respond(target: Target, body: dict[str, Any]) -> UpstreamReply:
    try:
        resp: Any = await litellm.aresponses(**_kwargs(target, body, stream=False))
    except Exception as exc:
        raise fail(target, exc) from None
    data: dict[str, Any] = resp.model_dump(exclude_none=True)
    usage = data.get("usage")
    return UpstreamReply(status=200, body=orjson.dumps(data),
                         usage=usage if isinstance(usage, dict) else None, headers={})


async def respond_stream(target: Target, body: dict[str, Any]) -> ClosingStream:
    try:
        stream: Any = await litellm.aresponses(**_kwargs(target, body, stream=True))
        if not hasattr(stream, "__anext__"):  # a mock answers whole, streamed or not
            return ClosingStream(_whole(stream.model_dump(exclude_none=True)), _nothing, {})
        first: Any = await stream.__anext__()  # a provider may only fail on the first read
    except StopAsyncIteration:
        first = None
    except Exception as exc:
        raise fail(target, exc) from None

    async def close() -> None:
        closing = getattr(stream, "aclose", None)
        if closing is not None:
            await closing()

    return ClosingStream(frames(target, first, stream, event_frame, b""), close, {})


def event_frame(event: Any) -> bytes:
    return frame(event.model_dump(exclude_none=True))


def frame(data: dict[str, Any]) -> bytes:
    return (b"event: " + str(data.get("type", "message")).encode() + b"\ndata: "
            + orjson.dumps(data) + b"\n\n")


async def _nothing() -> None:
    return None


async def _whole(response: dict[str, Any]) -> AsyncGenerator[bytes, None]:
    """A whole response as the events OpenAI streams for it: created; each output item
    added, a message's parts added, its text as one delta, done; completed."""
    n = 0

    def event(kind: str, **fields: Any) -> bytes:
        nonlocal n
        n += 1
        return frame({"type": kind, "sequence_number": n - 1, **fields})

    yield event("response.created", response={**response, "status": "in_progress",
                                              "output": []})
    for i, item in enumerate(response.get("output") or ()):
        yield event("response.output_item.added", output_index=i,
                    item={**item, "content": []} if item.get("type") == "message" else item)
        for k, part in enumerate(item.get("content") or ()):
            if item.get("type") != "message":
                break
            at = {"item_id": item.get("id"), "output_index": i, "content_index": k}
            empty = {**part, "text": ""} if part.get("type") == "output_text" else part
            yield event("response.content_part.added", **at, part=empty)
            if part.get("type") == "output_text":
                yield event("response.output_text.delta", **at, delta=part.get("text", ""))
                yield event("response.output_text.done", **at, text=part.get("text", ""))
            yield event("response.content_part.done", **at, part=part)
        yield event("response.output_item.done", output_index=i, item=item)
    yield event("response.completed", response=response)
