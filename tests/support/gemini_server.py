"""A small, real Gemini API stand-in on 127.0.0.1 (`models/{model}:generateContent`).

The Gemini counterpart of `openai_server.UpstreamServer`, with the same scripting: the
proxy reaches it through LiteLLM (`gemini/gemini-2.5-flash` with `api_base` = `server.url`,
which LiteLLM calls as `{api_base}/models/{model}:generateContent`, or
`:streamGenerateContent?alt=sse` for a stream), so what it checks is what LiteLLM's
transform really sends. It refuses what Gemini refuses, with Google's error shape
(`gemini_rules.py`): roles other than user/model, function calls and responses that do not
pair turn by turn, a prompt over the window, a missing key (403) or a wrong one (400
API_KEY_INVALID), sent as `x-goog-api-key` or `?key=`.

    server = GeminiServer(context_window=8000, api_key="AIza-test")
    await server.start()              # server.url == "http://127.0.0.1:PORT/v1beta"
    server.enqueue("hello")           # next reply; else an echo of the last user text
    server.enqueue(tool_calls=[{"name": "read_file", "arguments": '{"path": "a"}'}])
    server.enqueue_error(429, headers={"retry-after": "7"})  # RESOURCE_EXHAUSTED; Google
        # sends no Retry-After header, so the delay goes in the body as RetryInfo "7s"
    server.enqueue_error(503)         # UNAVAILABLE "The model is overloaded. ..."
    server.enqueue("a b c", break_after=2)   # the connection drops after 2 events; with
                                             # type="UNAVAILABLE", Google's error event instead
    server.history[-1].body           # what the upstream received
    await server.close()
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiohttp import web
from multidict import CIMultiDict

from tests.support.fake_server import FakeServer, Received, Rejected, Reply
from tests.support.gemini_rules import STATUSES, check, error_body, invalid

_RATE = ("You exceeded your current quota, please check your plan and billing details. For "
         "more information on this error, head to: "
         "https://ai.google.dev/gemini-api/docs/rate-limits.")
# Google's messages for scripted errors, by status
_ERRORS: dict[int, str] = {
    400: "Request contains an invalid argument.",
    403: "The caller does not have permission",
    404: "models/{model} is not found for API version v1beta, or is not supported for "
         "generateContent. Call ListModels to see the list of available models and their "
         "supported methods.",
    429: _RATE,
    500: "An internal error has occurred. Please retry or report in "
         "https://developers.generativeai.google/guide/troubleshooting",
    503: "The model is overloaded. Please try again later.",
    504: "Deadline expired before operation could complete.",
}
_BAD_KEY = "API key not valid. Please pass a valid API key."
_UNREGISTERED = ("Method doesn't allow unregistered callers (callers without established "
                 "identity). Please use API Key or other form of API consumer identity to call "
                 "this API.")


class GeminiServer(FakeServer):
    PATH = "/v1beta"

    def __init__(self, *, context_window: int | None = 1_048_576,
                 api_key: str | None = None) -> None:
        # api_key: when set, `x-goog-api-key` (or `?key=`) must be it
        super().__init__(context_window=context_window, api_key=api_key)

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1beta/models/{call}", self._call)

    async def _call(self, request: web.Request) -> web.StreamResponse:
        model, _, method = request.match_info["call"].partition(":")
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        self.history.append(Received(body if isinstance(body, dict) else {},
                                     CIMultiDict(request.headers), request.path_qs))
        try:
            if method not in ("generateContent", "streamGenerateContent"):
                raise Rejected(404, error_body(404, _ERRORS[404].replace("{model}", model)))
            self._check_key(request)
            if not isinstance(body, dict):
                raise invalid(f"Invalid JSON payload received. Unexpected token.\n{raw[:20]!r}")
            prompt = check(body, self.context_window)
        except Rejected as rej:
            self.rejected += 1
            return web.Response(status=rej.status, body=rej.body, content_type="application/json")
        reply = self._queue.popleft() if self._queue else _echo(body)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.status != 200:
            return self._error(reply, model)
        self.served += 1
        if method == "streamGenerateContent":
            return await self._stream(request, model, reply, prompt)
        answer = self._response(model, self._parts(reply), prompt, _out_tokens(reply), True)
        return web.Response(body=orjson.dumps(answer), content_type="application/json")

    def _check_key(self, request: web.Request) -> None:
        if self.api_key is None:
            return
        got = request.headers.get("x-goog-api-key") or request.query.get("key")
        if not got:
            raise Rejected(403, error_body(403, _UNREGISTERED, [{
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "CONSUMER_INVALID", "domain": "googleapis.com"}]))
        if got != self.api_key:
            raise Rejected(400, error_body(400, _BAD_KEY, [{
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "API_KEY_INVALID", "domain": "googleapis.com"}]))

    def _error(self, reply: Reply, model: str) -> web.Response:
        message = (reply.message or _ERRORS.get(reply.status, "Unknown error.")).replace(
            "{model}", model)
        headers = {k: v for k, v in reply.headers.items() if k.lower() != "retry-after"}
        details: list[dict[str, Any]] | None = None
        if reply.status == 429:  # Google says when to come back in the body, as RetryInfo
            delay = next((v for k, v in reply.headers.items() if k.lower() == "retry-after"),
                         "20")
            details = [{"@type": "type.googleapis.com/google.rpc.Help", "links": [{
                "description": "Learn more about Gemini API quotas",
                "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}]},
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{delay}s"}]
        return web.Response(status=reply.status, headers=headers, content_type="application/json",
                            body=error_body(reply.status, message, details))

    def _parts(self, reply: Reply) -> list[dict[str, Any]]:
        if not reply.tool_calls:
            return [{"text": reply.text or ""}]
        return [{"functionCall": {"name": c["name"],
                                  "args": orjson.loads(c.get("arguments", "{}"))}}
                for c in reply.tool_calls]

    def _response(self, model: str, parts: list[dict[str, Any]], prompt: int, out: int,
                  last: bool) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        if last:
            candidate["finishReason"] = "STOP"
        return {"candidates": [candidate],
                "usageMetadata": {"promptTokenCount": prompt, "candidatesTokenCount": out,
                                  "totalTokenCount": prompt + out, "promptTokensDetails": [
                                      {"modality": "TEXT", "tokenCount": prompt}]},
                "modelVersion": model, "responseId": f"resp-{next(self._ids):012d}"}

    async def _stream(self, request: web.Request, model: str, reply: Reply,
                      prompt: int) -> web.StreamResponse:
        if reply.tool_calls:
            pieces = [[p] for p in self._parts(reply)]
        else:
            pieces = [[{"text": t}] for t in _pieces(reply.text or "", reply.chunks)] or [[]]
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           **reply.headers})
        await resp.prepare(request)
        for i, parts in enumerate(pieces):
            if reply.break_after is not None and i >= reply.break_after:
                if reply.type:  # Google's error inside the stream, e.g. UNAVAILABLE
                    code = next(c for c, name in STATUSES.items() if name == reply.type)
                    message = reply.message or _ERRORS[code]
                    await resp.write(b"data: " + error_body(code, message) + b"\r\n\r\n")
                    await resp.write_eof()
                    return resp
                assert request.transport is not None
                request.transport.abort()  # a broken upstream: no finishReason
                return resp
            if reply.chunk_delay:
                await asyncio.sleep(reply.chunk_delay)
            last = i == len(pieces) - 1
            event = self._response(model, parts, prompt, _out_tokens(reply) if last else 0, last)
            await resp.write(b"data: " + orjson.dumps(event) + b"\r\n\r\n")
        await resp.write_eof()
        return resp


def _echo(body: dict[str, Any]) -> Reply:
    """'echo: ' + the last user turn's text (function responses skipped)."""
    for turn in reversed(body["contents"]):
        text = " ".join(p["text"] for p in turn["parts"] if isinstance(p.get("text"), str))
        if turn["role"] == "user" and text:
            return Reply(text="echo: " + text[:200])
    return Reply(text="echo")


def _pieces(text: str, n: int | None) -> list[str]:
    """`text` in `n` pieces, else one piece per word (the space leads the word)."""
    if not text:
        return []
    if n is None:
        words = text.split(" ")
        return [w if i == 0 else " " + w for i, w in enumerate(words)]
    size = max(1, -(-len(text) // n))
    return [text[i:i + size] for i in range(0, len(text), size)]


def _out_tokens(reply: Reply) -> int:
    return len((reply.text or "").split()) + 10 * len(reply.tool_calls or [])

