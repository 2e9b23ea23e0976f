"""Reading a provider's error body, whatever its shape, and LiteLLM's wrapping of it.

OpenAI answers `{"error": {"message", "type", "code", "param"}}`; Anthropic
`{"type": "error", "error": {"type", "message"}}` (the kind is in `type`, e.g.
`overloaded_error`, `not_found_error`); Google (Gemini, Vertex AI) `{"error": {"code": 503,
"message", "status": "UNAVAILABLE", "details"}}`, where `code` is the HTTP status (LiteLLM
raises Gemini's 503 as a 500, so the body's is the true one) and a 429 tells when to come
back only in the body, as `RetryInfo.retryDelay` ("7s"); vLLM and FastAPI
`{"detail": ...}`; a web server in front of the API plain text or an HTML page. LiteLLM
hands the Anthropic body over inside its exception's message, as `AnthropicError - {...}`
(or `b'{...}'` when streamed) followed by `. Handle with `litellm.InternalServerError`.`:
`litellm_message` unwraps that.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.errors import InvalidRequest

# "litellm.RateLimitError: RateLimitError: OpenAIException - <provider message>",
# "litellm.InternalServerError: AnthropicError - <body>", "AnthropicException BadGatewayError - "
_LITELLM_PREFIX = re.compile(r"^(?:litellm\.\w+:\s*)*(?:\w+Error:\s*)*"
                             r"(?:\w+(?:Exception|Error)(?:\s+\w+Error)?\s+-\s*)?")
_HANDLE_WITH = re.compile(r"\.?\s*Handle with `litellm\.\w+`\.?\s*$")
_ORIGINAL = re.compile(r"\s*Original exception:.*$", re.S)  # LiteLLM repeats the cause
_BYTES = re.compile(r"^b(['\"]).*\1$", re.S)
_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.I | re.S)
_TAG = re.compile(r"<[^>]+>")
_GOOGLE_STATUS = re.compile(r"^[A-Z_]+$")  # google.rpc.Code names: UNAVAILABLE, NOT_FOUND…
_SECONDS = re.compile(r"^(\d+(?:\.\d+)?)s$")  # a protobuf Duration in JSON: "7s", "0.5s"


@dataclass(frozen=True, slots=True)
class ErrorBody:
    message: str
    code: str | None = None
    param: str | None = None
    kind: str | None = None  # the error's `type` (Anthropic's only classifier), or Google's
    status: int | None = None  # the HTTP status the provider put in the body (Google)
    retry_after: str | None = None  # seconds, from the body (Google's RetryInfo)


def litellm_message(text: str) -> str:
    """The provider's own words from a LiteLLM exception's message (a JSON body stays JSON)."""
    text = _ORIGINAL.sub("", _LITELLM_PREFIX.sub("", text.strip()))
    text = _HANDLE_WITH.sub("", text).strip()
    if _BYTES.match(text):
        try:
            raw = ast.literal_eval(text)  # a bytes literal only: literal_eval runs no code
        except (ValueError, SyntaxError):
            return text
        if isinstance(raw, bytes):
            return raw.decode(errors="replace")
    return text


def parse_error_body(body: bytes | str | None) -> ErrorBody | None:
    """The message (and code, param, kind) of any error body; None for an empty one."""
    if not body:
        return None
    try:
        data: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        text = body.decode(errors="replace") if isinstance(body, bytes) else body
        text = _plain(text)
        return ErrorBody(text) if text else None
    err = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(err, str):
        return ErrorBody(err)
    if not isinstance(err, dict):
        return None
    message = err.get("message") or err.get("detail") or err.get("msg")
    if not isinstance(message, str):
        message = orjson.dumps(message).decode() if message is not None else None
    if message is None:
        return None
    code, param, kind = err.get("code"), err.get("param"), err.get("type")
    if _is_google(err):
        return ErrorBody(message, kind=err["status"], status=code,
                         retry_after=_retry_delay(err.get("details")))
    return ErrorBody(message, str(code) if code is not None else None,
                     param if isinstance(param, str) else None,
                     kind if isinstance(kind, str) else None)


def _is_google(err: dict[str, Any]) -> bool:
    """Google's shape: `code` the HTTP status as a number, `status` a google.rpc.Code name."""
    code, status = err.get("code"), err.get("status")
    return (type(code) is int and 400 <= code < 600 and isinstance(status, str)
            and _GOOGLE_STATUS.match(status) is not None)


def _retry_delay(details: Any) -> str | None:
    """Whole seconds (rounded up, as `Retry-After` wants) from a RetryInfo detail."""
    for d in details if isinstance(details, list) else ():
        if isinstance(d, dict) and str(d.get("@type", "")).endswith("google.rpc.RetryInfo"):
            match = _SECONDS.match(str(d.get("retryDelay", "")))
            if match:
                return str(math.ceil(float(match.group(1))))
    return None


def _plain(text: str) -> str:
    """Text as is; an HTML page as its title (else its text), whitespace collapsed."""
    if "<" in text and ">" in text and re.search(r"<(?:html|head|body|title|h1)\b", text, re.I):
        title = _TITLE.search(text)
        text = title.group(1) if title else _TAG.sub(" ", text)
        return " ".join(text.split())[:300]
    return text.strip()[:1000]


def response_text(resp: Any) -> str | None:
    """An httpx/aiohttp response's text, if it was read; None otherwise."""
    try:
        text = resp.text if resp is not None else None
    except Exception:  # an httpx response whose body was streamed and not read
        return None
    return text if isinstance(text, str) and text else None


_UNSUPPORTED = re.compile(
    r"(\S+) does not support parameters: \[([^\]]*)\], for model=([^\s]+?)\.?\s")


def unsupported_params(exc: BaseException | None) -> InvalidRequest | None:
    """LiteLLM refusing OpenAI parameters its provider transform has no place for. Its own
    message tells the reader to set `litellm.drop_params` or a LiteLLM proxy's
    `litellm_settings`, neither of which a ctxwarden user has: say what to do here."""
    if exc is None or type(exc).__name__ != "UnsupportedParamsError":
        return None
    found = _UNSUPPORTED.search(str(exc))
    if found is None:
        return None
    provider, names, model = found.groups()
    params = [n.strip().strip("'\"") for n in names.split(",") if n.strip()]
    return InvalidRequest(
        f"Unsupported parameter(s) for {model} ({provider}, reached through LiteLLM): "
        f"{', '.join(repr(p) for p in params)}. Remove them from the request, or set "
        "`drop_params: true` in the route's `upstream` to have them dropped.",
        code="unsupported_parameter", param=params[0] if params else None)


def status_of(exc: BaseException) -> int | None:
    """The HTTP status LiteLLM's exception carries, if any."""
    value = getattr(exc, "status_code", None)
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None
