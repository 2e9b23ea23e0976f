"""The LiteLLM transport: every provider that does not speak OpenAI's wire format, and the mock.

`litellm.acompletion` translates the OpenAI request for Anthropic, Bedrock, Gemini, Ollama
and the rest, and translates their answers back; here those answers become the same
OpenAI JSON / SSE bytes the direct transport relays, so the edge cannot tell the two apart.
A route's `mock_response` also comes this way: LiteLLM answers it with no network.
A request without an output limit to a provider that requires one (Anthropic, also on
Bedrock and Vertex AI) goes out with the output the proxy reserved for it, not LiteLLM's
default of the model's maximum (`resolve.needs_max_tokens` says why).
"""

from __future__ import annotations

import contextlib
import importlib
import warnings
from collections.abc import AsyncGenerator, Callable, Iterable
from typing import Any

import litellm
import orjson
import structlog
from litellm.types.utils import all_litellm_params

from proxy.errors import InvalidRequest, ProxyError
from proxy.upstream.errors import map_upstream_error, not_an_event_stream
from proxy.upstream.headers import from_litellm, provider_header
from proxy.upstream.transport import ClosingStream, Target, UpstreamReply, sse_error

litellm.suppress_debug_info = True  # no "Provider List: …" banners on stdout per error
# Pydantic builds LiteLLM's response schemas on first use and warns there about a ReadOnly
# TypedDict inside LiteLLM; build them now, once, so a request never trips over the warning.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    litellm.ModelResponse()
    litellm.ModelResponseStream()

# Keys LiteLLM reads as its own controls (api_base, mock_response, fallbacks, callbacks…).
# A client must not be able to steer the proxy with them, so they never leave the body.
CONTROL = (frozenset(all_litellm_params) | {
    "api_base", "base_url", "api_key", "api_version", "organization", "deployment_id",
    "default_headers", "extra_headers", "timeout", "request_timeout", "max_retries",
    "custom_llm_provider", "headers", "client", "model", "messages", "stream",
    "drop_params", "additional_drop_params", "allowed_openai_params",  # the route's call
}) - {"metadata"}
OPENAI_METADATA = frozenset({"openai", "azure"})  # providers whose API takes `metadata`
_DONE = b"data: [DONE]\n\n"
log = structlog.get_logger("ctxwarden")
_WARM_TOOL = {"type": "function", "function": {
    "name": "warm_up", "parameters": {"type": "object", "properties": {}}}}
# What a provider streams in varies (SSE, Ollama's NDJSON, Bedrock's event stream), but
# none streams these: a reply to a streaming request in one is the reply as if not streamed.
_NOT_A_STREAM = frozenset({"application/json", "text/html"})


class LiteLLMTransport:
    """The `Transport` for every other provider, and for `mock_response` routes."""

    async def complete(self, target: Target, body: dict[str, Any]) -> UpstreamReply:
        return await complete(target, body)

    async def open_stream(self, target: Target, body: dict[str, Any]) -> ClosingStream:
        return await open_stream(target, body)


def refuse_unsupported(target: Target, body: dict[str, Any]) -> None:
    """OpenAI's custom (free-form) tools have no translation in LiteLLM's provider
    transforms (1.106: a KeyError 'function' inside the Anthropic transform). Refused with a
    400 that says so before anything is fitted, rather than a 502 from inside LiteLLM."""
    tools = body.get("tools") or ()
    calls = (c for m in body.get("messages") or () if isinstance(m, dict)
             for c in m.get("tool_calls") or ())
    if any(isinstance(t, dict) and t.get("type") == "custom" for t in (*tools, *calls)):
        raise InvalidRequest(
            f"Custom tools (type 'custom') are OpenAI's; {target.model!r} is reached through "
            "LiteLLM, which cannot translate them. Declare the tool as a function, or route "
            "this model to an OpenAI-compatible upstream.",
            code="unsupported_tool_type", param="tools")


def route_kwargs(target: Target, stream: bool) -> dict[str, Any]:
    """What the route decides of a LiteLLM call: model, where, key, headers, timeout, mock,
    `drop_params`."""
    kw: dict[str, Any] = {"model": target.model, "stream": stream, "timeout": target.timeout}
    if target.api_base:
        kw["api_base"] = target.api_base
    if target.api_key:
        kw["api_key"] = target.api_key
    if target.extra_headers:
        kw["extra_headers"] = dict(target.extra_headers)
    if target.mock_response is not None:
        kw["mock_response"] = target.mock_response
    if target.drop_params:
        kw["drop_params"] = True
    return kw


def _kwargs(target: Target, body: dict[str, Any], stream: bool) -> dict[str, Any]:
    fields = {k: v for k, v in body.items() if k not in CONTROL}
    if not stream:
        fields.pop("stream_options", None)
    # LiteLLM's provider transforms edit messages and tools in place; the pipeline's dicts
    # must come back untouched, so LiteLLM gets its own copy (one orjson round trip).
    kw: dict[str, Any] = orjson.loads(orjson.dumps({"messages": body.get("messages"), **fields}))
    kw.update(route_kwargs(target, stream), max_retries=0,
              num_retries=0)  # the client decides about retries; Retry-After reaches it
    if "metadata" in kw:
        # LiteLLM takes `metadata` as its own (logging) and never sends it on. OpenAI's
        # wire has it (tags on a stored completion): it goes as a body field there; other
        # providers' `metadata` means something else, so it stays with LiteLLM.
        meta = kw.pop("metadata")
        if target.provider in OPENAI_METADATA:
            kw["extra_body"] = {**(kw.get("extra_body") or {}), "metadata": meta}
    if (target.default_max_tokens is not None and kw.get("max_tokens") is None
            and kw.get("max_completion_tokens") is None):
        # the output the proxy reserved, not LiteLLM's default of the model's maximum
        kw.pop("max_completion_tokens", None)
        kw["max_tokens"] = target.default_max_tokens
    return kw


def fail(target: Target, exc: BaseException, midstream: bool = False) -> ProxyError:
    """A LiteLLM exception as the proxy's error, mapped at the one boundary."""
    return map_upstream_error(exc, api_base=target.api_base, timeout=target.timeout,
                              secrets=target.secrets, midstream=midstream)


def completion_json(resp: Any) -> dict[str, Any]:
    """A LiteLLM ModelResponse as OpenAI's chat.completion object."""
    data: dict[str, Any] = resp.model_dump(exclude_none=True)
    for choice in data.get("choices", ()):
        choice.pop("provider_specific_fields", None)
        message = choice.get("message")
        if isinstance(message, dict):
            message.pop("provider_specific_fields", None)
            message.setdefault("content", None)  # OpenAI sends null beside tool_calls
    return data


def chunk_event(chunk: Any) -> bytes:
    """One LiteLLM stream chunk as one SSE event (`data: {json}\\n\\n`).

    The usage chunk (`stream_options.include_usage`) has `"choices": []` on OpenAI's wire;
    LiteLLM gives it a choice with an empty delta, which clients that take an empty
    `choices` for the usage chunk would read as one more (empty) delta."""
    data: dict[str, Any] = chunk.model_dump(exclude_none=True)
    choices = data.get("choices")
    if data.get("usage") and choices and all(
            isinstance(c, dict) and not c.get("delta") and c.get("finish_reason") is None
            and c.get("logprobs") is None for c in choices):
        data["choices"] = []
    return b"data: " + orjson.dumps(data) + b"\n\n"


async def complete(target: Target, body: dict[str, Any]) -> UpstreamReply:
    try:
        resp = await litellm.acompletion(**_kwargs(target, body, stream=False))
    except Exception as exc:
        raise fail(target, exc) from None
    data = completion_json(resp)
    usage = data.get("usage")
    return UpstreamReply(status=200, body=orjson.dumps(data),
                         usage=usage if isinstance(usage, dict) else None,
                         headers=from_litellm(resp))


async def open_stream(target: Target, body: dict[str, Any]) -> ClosingStream:
    try:
        stream = await litellm.acompletion(**_kwargs(target, body, stream=True))
    except Exception as exc:
        raise fail(target, exc) from None
    ctype = provider_header(stream, "Content-Type")
    if ctype is not None and ctype.split(";")[0].strip().lower() in _NOT_A_STREAM:
        await stream.aclose()  # LiteLLM would read it as an empty stream: the reply, lost
        raise not_an_event_stream(ctype, target.api_base)
    # Some providers only fail on the first read; take it now so an error still gets a status.
    try:
        first: Any = await stream.__anext__()
    except StopAsyncIteration:
        first = None
    except Exception as exc:
        await stream.aclose()
        raise fail(target, exc) from None

    async def close() -> None:
        await stream.aclose()  # closes the provider's HTTP response

    return ClosingStream(frames(target, first, stream), close, from_litellm(stream))


async def warm(targets: Iterable[Target]) -> None:
    """What LiteLLM loads on its first call (its proxy types, its tool-call (MCP) handler,
    its default tokenizer) loads at start-up instead, by one mock call with a tool per
    model: the first request through a LiteLLM route took 1-3 s longer than the next."""
    models = dict.fromkeys(t.model for t in targets if t.transport == "litellm")
    for model in models:
        try:
            await litellm.acompletion(model=model, mock_response="ok", api_key="warm-up",
                                      messages=[{"role": "user", "content": "warm-up"}],
                                      tools=[_WARM_TOOL])
        except Exception as exc:  # a warm-up: the first request pays what it did not load
            log.info("litellm_warm_up_skipped", model=model, error=type(exc).__name__)
    if models:
        with contextlib.suppress(Exception):  # the tokenizer LiteLLM counts prompts with
            importlib.import_module("litellm.main").encoding  # noqa: B018 (loads it)


async def frames(target: Target, first: Any, stream: Any,
                 frame: Callable[[Any], bytes] = chunk_event, done: bytes = _DONE
                 ) -> AsyncGenerator[bytes, None]:
    """A LiteLLM stream's items as SSE frames (`frame`), ending in `done`, or in an error
    event if the provider fails midway."""
    try:
        if first is not None:
            yield frame(first)
            async for item in stream:
                yield frame(item)
    except Exception as exc:
        yield sse_error(fail(target, exc, midstream=True))
        return
    yield done
