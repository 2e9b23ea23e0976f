"""A small, real Anthropic Messages API stand-in on 127.0.0.1 (`POST /v1/messages`).

The Anthropic counterpart of `openai_server.UpstreamServer`, with the same scripting: the
proxy reaches it through LiteLLM (`anthropic/claude-...` with `api_base` = `server.url`),
so what it checks is what LiteLLM's transform really sends. It refuses what Anthropic
refuses, with Anthropic's error shape (`anthropic_rules.py`): no `max_tokens`, prompt plus
`max_tokens` over the window, roles that do not alternate, unpaired tool_use/tool_result,
a wrong `x-api-key`.

    server = AnthropicServer(context_window=8000)
    await server.start()              # server.url == "http://127.0.0.1:PORT" (no /v1:
                                      # LiteLLM appends /v1/messages itself)
    server.enqueue("hello")           # next reply; else an echo of the last user text
    server.enqueue(tool_calls=[{"name": "read_file", "arguments": '{"path": "a"}'}])
    server.enqueue_error(529)         # overloaded_error; 429 takes headers={"retry-after": "7"}
    server.enqueue("a b c", break_after=3)   # the connection drops after 3 events; with
                                             # type="overloaded_error", an `error` event instead
    server.history[-1].body           # what the upstream received
    await server.close()
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiohttp import web
from multidict import CIMultiDict

from tests.support.anthropic_rules import check, error_body
from tests.support.fake_server import FakeServer, Received, Rejected, Reply

# Anthropic's bodies for scripted errors: status -> (type, message)
_ERRORS: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "Invalid request."),
    401: ("authentication_error", "invalid x-api-key"),
    403: ("permission_error", "Your API key does not have permission to use the specified "
                              "resource."),
    404: ("not_found_error", "model: {model}"),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "This request would exceed the rate limit for your organization "
                              "of 30,000 input tokens per minute."),
    500: ("api_error", "Internal server error"),
    503: ("api_error", "Service unavailable"),
    529: ("overloaded_error", "Overloaded"),
}


class AnthropicServer(FakeServer):
    def __init__(self, *, context_window: int | None = 200_000, api_key: str | None = None,
                 max_output: int = 64_000) -> None:
        super().__init__(context_window=context_window, api_key=api_key)  # x-api-key
        self.max_output = max_output  # claude-sonnet-4-5's output limit

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/messages", self._messages)

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        self.history.append(Received(body if isinstance(body, dict) else {},
                                     CIMultiDict(request.headers), request.path))
        try:
            self._check_headers(request)
            if not isinstance(body, dict):
                raise Rejected(400, error_body("invalid_request_error",
                                               "There was an issue with the JSON body."))
            prompt = check(body, self.context_window, self.max_output)
        except Rejected as rej:
            self.rejected += 1
            return web.Response(status=rej.status, body=rej.body, content_type="application/json")
        reply = self._queue.popleft() if self._queue else _echo(body)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.status != 200:
            type_, msg = _ERRORS.get(reply.status, ("api_error", "Upstream error."))
            msg = (reply.message or msg).replace("{model}", str(body.get("model")))
            return web.Response(status=reply.status, headers=reply.headers,
                                body=error_body(reply.type or type_, msg),
                                content_type="application/json")
        self.served += 1
        if body.get("stream"):
            return await self._stream(request, body, reply, prompt)
        message = {**self._head(body, prompt), "content": self._content(reply),
                   "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
                   "usage": {"input_tokens": prompt, "output_tokens": _out_tokens(reply)}}
        return web.Response(body=orjson.dumps(message), content_type="application/json")

    def _check_headers(self, request: web.Request) -> None:
        if not request.headers.get("anthropic-version"):
            raise Rejected(400, error_body("invalid_request_error",
                                           "anthropic-version: header is required"))
        if self.api_key is not None and request.headers.get("x-api-key") != self.api_key:
            raise Rejected(401, error_body("authentication_error", "invalid x-api-key"))

    def _head(self, body: dict[str, Any], prompt: int) -> dict[str, Any]:
        return {"id": f"msg_{next(self._ids):024d}", "type": "message", "role": "assistant",
                "model": body["model"], "stop_sequence": None,
                "usage": {"input_tokens": prompt, "output_tokens": 1}}

    def _content(self, reply: Reply) -> list[dict[str, Any]]:
        if not reply.tool_calls:
            return [{"type": "text", "text": reply.text or ""}]
        return [{"type": "tool_use", "id": c.get("id") or f"toolu_{next(self._ids):024d}",
                 "name": c["name"], "input": orjson.loads(c.get("arguments", "{}"))}
                for c in reply.tool_calls]

    def _events(self, body: dict[str, Any], reply: Reply, prompt: int) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = [
            {"type": "message_start", "message": {**self._head(body, prompt), "content": [],
                                                  "stop_reason": None}},
            {"type": "ping"}]
        for i, block in enumerate(self._content(reply)):
            if block["type"] == "text":
                start: dict[str, Any] = {"type": "text", "text": ""}
                deltas = [{"type": "text_delta", "text": p} for p in _pieces(block["text"],
                                                                             reply.chunks)]
            else:
                start = {**block, "input": {}}
                args = orjson.dumps(block["input"]).decode()
                deltas = [{"type": "input_json_delta", "partial_json": p}
                          for p in ("", *_pieces(args, 2))]
            events.append({"type": "content_block_start", "index": i, "content_block": start})
            events += [{"type": "content_block_delta", "index": i, "delta": d} for d in deltas]
            events.append({"type": "content_block_stop", "index": i})
        events.append({"type": "message_delta",
                       "delta": {"stop_reason": "tool_use" if reply.tool_calls else "end_turn",
                                 "stop_sequence": None},
                       "usage": {"output_tokens": _out_tokens(reply)}})
        events.append({"type": "message_stop"})
        return events

    async def _stream(self, request: web.Request, body: dict[str, Any], reply: Reply,
                      prompt: int) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8",
                                           "Cache-Control": "no-cache", **reply.headers})
        await resp.prepare(request)
        for i, event in enumerate(self._events(body, reply, prompt)):
            if reply.break_after is not None and i >= reply.break_after:
                if reply.type:  # Anthropic's mid-stream error event, e.g. overloaded_error
                    await resp.write(b"event: error\ndata: " + error_body(
                        reply.type, reply.message or "Overloaded") + b"\n\n")
                    await resp.write_eof()
                    return resp
                assert request.transport is not None
                request.transport.abort()  # a broken upstream: no message_stop
                return resp
            if reply.chunk_delay:
                await asyncio.sleep(reply.chunk_delay)
            await resp.write(f"event: {event['type']}\n".encode() + b"data: "
                             + orjson.dumps(event) + b"\n\n")
        await resp.write_eof()
        return resp


def _echo(body: dict[str, Any]) -> Reply:
    """'echo: ' + the last user message's text (tool results skipped)."""
    for m in reversed(body["messages"]):
        content = m.get("content")
        if m.get("role") != "user":
            continue
        if isinstance(content, list):
            content = " ".join(b.get("text", "") for b in content if b.get("type") == "text")
        if content:
            return Reply(text="echo: " + str(content)[:200])
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
