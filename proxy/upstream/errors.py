"""`map_upstream_error`: the one place a foreign failure becomes a `proxy.errors` type.

Both transports end here, so a 429 answered by OpenAI over aiohttp and a 429 raised by
LiteLLM for Anthropic reach the client the same way (status, OpenAI's error shape,
`Retry-After`). Messages keep the provider's words but never carry an API key: a route's
key is scrubbed out, and so is anything shaped like one (providers echo masked keys).

Statuses that are easy to get wrong:
- 503, and Anthropic's 529 `overloaded_error` (LiteLLM raises it as a 500, so the body's
  kind decides), are `UpstreamUnavailable`: 503 with code `upstream_unavailable` or
  `upstream_overloaded`, and the provider's `Retry-After` when it sent one. None is made up
  when it did not: the openai SDK then backs off with jitter on its own, while a fixed
  invented delay would bring every client back at the same instant. Google sends no
  header but says it in the body (`RetryInfo`): that is the provider's own delay, kept.
- Google's body carries the true HTTP status (`code`): LiteLLM raises Gemini's 503
  UNAVAILABLE as a 500, which the body corrects. Only a 500 is corrected: LiteLLM's other
  statuses are deliberate (Google's 400 "API key not valid" becomes a 401).
- Anthropic's `overloaded_error` as a stream event reaches us from LiteLLM as a 500 with only
  its message (LiteLLM drops the kind), so that message, "Overloaded", means overloaded: a
  503 before the first byte, an `upstream_overloaded` error event after it.
- A reply LiteLLM could not parse (a 200 with an empty or non-JSON body) is raised as a 500
  (Gemini: a 422); the JSONDecodeError inside says what happened, and it is a 502 that says
  so, not an error status the upstream never sent.
- 404 is `model_not_found` only when the provider says so (its code, or a message about a
  model). Any other 404 (an HTML "Not Found" from a wrong `api_base` path) is a 502
  `upstream_not_found`: the client's model is fine, the route's URL is not.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterable, Mapping

import aiohttp
import orjson

from proxy.errors import (
    AuthenticationFailed,
    ContextLengthExceeded,
    InvalidRequest,
    PayloadTooLarge,
    PermissionDenied,
    ProxyError,
    RateLimited,
    RouteNotFound,
    UpstreamError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from proxy.upstream.error_body import (
    ErrorBody,
    litellm_message,
    parse_error_body,
    response_text,
    status_of,
    unsupported_params,
)
from proxy.upstream.headers import to_client

# Providers word it differently; LiteLLM's own detection looks for much the same phrases.
_CONTEXT = re.compile(r"context.length|context.window|maximum context|too many tokens|"
                      r"prompt is too long|input is too long|reduce the length|"
                      r"exceed context limit", re.I)
_MODEL = re.compile(r"\bmodels?\b", re.I)  # a 404 about the model, not the URL
_KEYLIKE = re.compile(r"\b(?:sk|pk|rk|xai|gsk|csk)[-_][A-Za-z0-9_\-*]{3,}")
_CONNECT = ("Connection error", "Cannot connect", "Connection refused", "connect call failed")
_OVERLOADED = "Overloaded"  # Anthropic's message for overloaded_error


def map_upstream_error(
    exc: BaseException | None = None,
    *,
    status: int | None = None,
    body: bytes | str | None = None,
    headers: Mapping[str, str] | None = None,
    api_base: str | None = None,
    timeout: float | None = None,
    secrets: Iterable[str | None] = (),
    midstream: bool = False,
) -> ProxyError:
    """Turn an exception, or an upstream HTTP error (status, body, headers), into a ProxyError.

    `midstream`: the failure came after the stream started (the status line is gone), so
    what the client gets is the last SSE event, and it should say the stream was cut.
    """
    where = _where(api_base)
    if isinstance(exc, ProxyError):
        return exc
    if exc is not None and _is_timeout(exc):
        limit = f" within {timeout:g}s" if timeout else ""
        return UpstreamTimeout(f"The upstream{where} did not answer{limit}.")
    not_json = _json_error(exc)
    if not_json and midstream:
        return UpstreamError(f"LiteLLM could not read an event from the upstream{where} as "
                             f"JSON, so the stream ends here: {not_json}",
                             code="upstream_stream_broken")
    if not_json:
        return UpstreamError(f"The upstream{where} answered with a body that is not JSON: "
                             f"{not_json}")
    if exc is not None and midstream:
        reason = _scrub(litellm_message(_first_line(exc)), secrets)
        if reason == _OVERLOADED:
            return UpstreamUnavailable(f"The upstream{where} is overloaded and broke off the "
                                       f"stream: {reason}", code="upstream_overloaded")
        return UpstreamError(f"The upstream{where} broke off the stream: {reason}",
                             code="upstream_stream_broken")
    if exc is not None and _is_connect(exc):
        return UpstreamError(f"Could not connect to the upstream{where}: "
                             f"{_scrub(_first_line(exc), secrets)}", code="upstream_unreachable")
    unsupported = unsupported_params(exc)
    if unsupported is not None:
        return unsupported
    message: str | None = None
    if exc is not None:
        status = status or status_of(exc)
        resp = getattr(exc, "response", None)
        headers = headers or getattr(exc, "litellm_response_headers", None) or getattr(
            resp, "headers", None)
        message = litellm_message(str(getattr(exc, "message", None) or exc))
        sdk_body = getattr(exc, "body", None)  # the openai SDK's parsed error, LiteLLM keeps it
        if isinstance(sdk_body, (dict, str)) and sdk_body:
            body = body or (orjson.dumps(sdk_body) if isinstance(sdk_body, dict) else sdk_body)
        body = body or response_text(resp) or (message if message.startswith("{") else None)
    parsed = parse_error_body(body) or ErrorBody(message or "")
    if parsed.status and status in (None, 500):  # LiteLLM's catch-all; Google's body knows
        status = parsed.status
    if status is None:  # not an HTTP answer at all: a broken connection, a bug in a transport
        reason = _scrub(parsed.message or _first_line(exc) or "unknown error", secrets)
        return UpstreamError(f"The upstream{where} failed: {reason}")
    kind = parsed.kind or ("overloaded_error" if status == 500
                           and parsed.message == _OVERLOADED else None)
    err = ErrorBody(_scrub(parsed.message or f"The upstream answered HTTP {status}.", secrets),
                    parsed.code, parsed.param, kind, retry_after=parsed.retry_after)
    context = type(exc).__name__ == "ContextWindowExceededError" if exc is not None else False
    return _by_status(status, err, headers or {}, context, where)


def not_an_event_stream(content_type: str | None, api_base: str | None) -> UpstreamError:
    """A streaming request answered with something else (a JSON body: the reply as if not
    streamed). Refused rather than relayed: read as SSE it holds no event, and is lost."""
    return UpstreamError(f"The upstream{_where(api_base)} answered a streaming request with "
                         f"{content_type or 'no content type'}, not an event stream.")


def _by_status(status: int, err: ErrorBody, headers: Mapping[str, str], context: bool,
               where: str) -> ProxyError:
    message, code, param = err.message, err.code, err.param
    if status in (400, 422):
        if context or code == "context_length_exceeded" or _CONTEXT.search(message):
            return ContextLengthExceeded(message, param=param)
        return InvalidRequest(message, code=code, param=param)
    if status == 401:
        return AuthenticationFailed(message, code=code)
    if status == 403:
        return PermissionDenied(message, code=code)
    if status == 404:
        if code == "model_not_found" or param == "model" or _MODEL.search(message):
            return RouteNotFound(message, code="model_not_found", param=param)
        return UpstreamError(f"The upstream{where} has no such API path (HTTP 404: {message}); "
                             "check the route's upstream.api_base", code="upstream_not_found")
    if status == 408:
        return UpstreamTimeout(message)
    if status == 413:
        return PayloadTooLarge(message)
    if status == 429:
        return RateLimited(message, code=code, headers=_retry_headers(headers, err))
    if status == 529 or err.kind == "overloaded_error":
        return UpstreamUnavailable(f"The upstream is overloaded: {message}",
                                   code="upstream_overloaded",
                                   headers=_retry_headers(headers, err))
    if status == 503:
        return UpstreamUnavailable(f"The upstream answered HTTP 503: {message}",
                                   headers=_retry_headers(headers, err))
    if 400 <= status < 500:
        return InvalidRequest(message, code=code, param=param)
    return UpstreamError(f"The upstream answered HTTP {status}: {message}")


def _retry_headers(headers: Mapping[str, str], err: ErrorBody) -> dict[str, str] | None:
    """The provider's `Retry-After` header, else the delay its body gave (Google's); with
    what else of its headers tells a client when to retry: `retry-after-ms` and
    `x-should-retry` (the openai SDK reads both), its rate-limit state (`x-ratelimit-*`,
    as on a successful reply) and its request id."""
    out = to_client(headers)
    for name in ("retry-after-ms", "x-should-retry"):
        value = _header(headers, name)
        if value is not None:
            out[name] = value
    retry = _header(headers, "Retry-After") or err.retry_after
    if retry:
        out["Retry-After"] = retry
    return out or None


def _is_timeout(exc: BaseException) -> bool:
    for e in _chain(exc):
        if isinstance(e, (asyncio.TimeoutError, TimeoutError, aiohttp.ServerTimeoutError)):
            return True
        if type(e).__name__ in ("Timeout", "APITimeoutError", "TimeoutException", "ReadTimeout"):
            return True
    return False


def _is_connect(exc: BaseException) -> bool:
    for e in _chain(exc):
        if isinstance(e, (aiohttp.ClientConnectorError, ConnectionRefusedError)):
            return True
        if type(e).__name__ in ("APIConnectionError", "ConnectError"):
            return any(s in str(e) for s in _CONNECT)
    text = str(exc)
    return "InternalServerError" in type(exc).__name__ and any(s in text for s in _CONNECT)


def _json_error(exc: BaseException | None) -> str | None:
    """The parser's words when LiteLLM (or the SDK under it) failed to parse the reply."""
    for e in _chain(exc) if exc is not None else ():
        if isinstance(e, json.JSONDecodeError):
            return str(e)
    return None


def _chain(exc: BaseException) -> Iterable[BaseException]:
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def _scrub(text: str, secrets: Iterable[str | None]) -> str:
    for s in secrets:
        if s and len(s) >= 4:
            text = text.replace(s, "***")
    return _KEYLIKE.sub("***", text)


def _where(api_base: str | None) -> str:
    if not api_base:
        return ""
    url = re.sub(r"//[^/@]*@", "//", api_base)  # never show user:password@
    return " at " + url.split("?", 1)[0]


def _first_line(exc: BaseException | None) -> str:
    if exc is None:
        return ""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name) or headers.get(name.lower())
    return str(value) if value is not None else None
