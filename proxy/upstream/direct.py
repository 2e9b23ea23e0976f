"""The direct transport: one aiohttp POST to a server that speaks OpenAI's wire format.

Why not `litellm.acompletion` for these: measured here, LiteLLM's `openai/` path spends
~15 ms at 50 messages and ~195 ms at 1,000 in the openai SDK's recursive parameter
transform, while the request the client sent is already valid OpenAI. So the body goes out
as the client wrote it (only `model` swapped), serialized once with orjson, and the SSE
reply is relayed as bytes: cut at event boundaries (`\\n\\n`), never re-parsed.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import Any

import aiohttp
import orjson

from proxy.errors import ProxyError, UpstreamError
from proxy.upstream.errors import map_upstream_error, not_an_event_stream
from proxy.upstream.headers import to_client
from proxy.upstream.transport import ClosingStream, Target, UpstreamReply, sse_error

_DONE = b"data: [DONE]\n\n"


class DirectTransport:
    """The `Transport` for OpenAI-wire providers, over one pooled aiohttp session.

    `session` is called per request: the owner creates the session on first use, inside
    the running loop (aiohttp binds a session to it).
    """

    def __init__(self, session: Callable[[], aiohttp.ClientSession]) -> None:
        self._session = session

    async def complete(self, target: Target, body: dict[str, Any]) -> UpstreamReply:
        return await complete(self._session(), target, body)

    async def open_stream(self, target: Target, body: dict[str, Any]) -> ClosingStream:
        return await open_stream(self._session(), target, body)


def _payload(target: Target, body: dict[str, Any], stream: bool) -> bytes:
    out = target.prepare(body) if target.prepare is not None else body
    out = dict(out)
    out["model"] = target.model
    if stream:
        out["stream"] = True
    elif out.get("stream"):
        del out["stream"]
        out.pop("stream_options", None)  # OpenAI refuses stream_options without stream
    return orjson.dumps(out)


def timeout_of(target: Target) -> aiohttp.ClientTimeout:
    # Per connect and per read, like the openai SDK: a long stream is fine, a silent one is not.
    return aiohttp.ClientTimeout(total=None, sock_connect=target.timeout,
                                 sock_read=target.timeout)


def _fail(target: Target, exc: BaseException) -> ProxyError:
    return map_upstream_error(exc, api_base=target.api_base, timeout=target.timeout,
                              secrets=target.secrets)


async def _error_status(target: Target, resp: aiohttp.ClientResponse) -> ProxyError:
    raw = await resp.read()
    return map_upstream_error(status=resp.status, body=raw, headers=resp.headers,
                              api_base=target.api_base, timeout=target.timeout,
                              secrets=target.secrets)


async def complete(session: aiohttp.ClientSession, target: Target,
                   body: dict[str, Any]) -> UpstreamReply:
    data = _payload(target, body, stream=False)
    try:
        async with session.post(target.url, data=data, headers=target.headers,
                                proxy=target.proxy, timeout=timeout_of(target)) as resp:
            if resp.status >= 400:
                raise await _error_status(target, resp)
            raw = await resp.read()
            status = resp.status
            headers = to_client(resp.headers)
    except ProxyError:
        raise
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise _fail(target, exc) from None
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise UpstreamError(f"The upstream at {target.api_base} answered {status} with a body "
                            "that is not JSON.") from None
    if isinstance(parsed, dict) and "error" in parsed and "choices" not in parsed:
        raise map_upstream_error(status=502, body=raw, api_base=target.api_base,
                                 secrets=target.secrets)
    usage = parsed.get("usage") if isinstance(parsed, dict) else None
    return UpstreamReply(status=status, body=raw,
                         usage=usage if isinstance(usage, dict) else None, headers=headers)


async def open_stream(session: aiohttp.ClientSession, target: Target,
                      body: dict[str, Any]) -> ClosingStream:
    data = _payload(target, body, stream=True)
    try:
        resp = await session.post(target.url, data=data, headers=target.headers,
                                  proxy=target.proxy, timeout=timeout_of(target))
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise _fail(target, exc) from None
    try:
        if resp.status >= 400:
            raise await _error_status(target, resp)
        ctype = resp.headers.get("Content-Type", "")
        if "text/event-stream" not in ctype:
            raise not_an_event_stream(ctype, target.api_base)
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        resp.close()
        raise _fail(target, exc) from None
    except BaseException:
        resp.close()
        raise

    async def close() -> None:
        resp.close()  # drops the connection: the upstream stops generating

    return ClosingStream(_relay(target, resp), close, to_client(resp.headers))


async def _relay(target: Target, resp: aiohttp.ClientResponse) -> AsyncGenerator[bytes, None]:
    """Yield whole SSE events as they arrive; end with `[DONE]`, or an error event if cut."""
    buf = b""
    last = b""
    try:
        async for chunk in resp.content.iter_any():
            if b"\r" in chunk or buf.endswith(b"\r"):  # SSE allows CRLF and CR; OpenAI LF
                buf = _lf(buf + chunk)
            else:
                buf += chunk
            cut = buf.rfind(b"\n\n")
            if cut < 0:
                continue
            out, buf = buf[:cut + 2], buf[cut + 2:]
            last = out
            yield out
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        yield sse_error(map_upstream_error(exc, api_base=target.api_base, timeout=target.timeout,
                                           secrets=target.secrets, midstream=True))
        return
    finally:
        resp.close()
    if buf.endswith(b"\r"):  # a CR line ending, nothing after it
        buf = buf[:-1] + b"\n"
    if buf.strip():  # the upstream ended without the blank line after its last event
        last = buf.rstrip(b"\n") + b"\n\n"
        yield last
    if not last.endswith(_DONE):
        yield _DONE


def _lf(buf: bytes) -> bytes:
    """SSE's line endings (CRLF, CR, LF) as LF. A CR at the very end stays: it may be the
    first half of a CRLF whose LF comes with the next read."""
    tail = buf.endswith(b"\r")
    body = (buf[:-1] if tail else buf).replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return body + b"\r" if tail else body
