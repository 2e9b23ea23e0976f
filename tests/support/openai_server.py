"""A small, real OpenAI stand-in on 127.0.0.1 that every integration test talks to.

Why a real server and not a mock: the proxy's job is the wire (bytes, statuses, SSE
framing, disconnects), so the tests must exercise a real socket. The server rejects what
OpenAI rejects, with OpenAI's own error bodies, so a test that passes here would not be
refused by the real API for the same reason (over-long prompt, broken tool-call pairs).

    server = UpstreamServer(context_window=8000)
    await server.start()              # server.url == "http://127.0.0.1:PORT/v1"
    server.enqueue("hello")           # next reply; else an echo of the last user message
    server.enqueue_error(429, headers={"Retry-After": "7"})
    ...
    server.history[-1].body           # what the upstream received
    await server.close()
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import tiktoken
from aiohttp import web
from multidict import CIMultiDict

import proxy  # noqa: F401  (offline defaults: tiktoken reads its cache dir from the env)
from tests.support.fake_server import FakeServer, Received, Rejected, Reply

__all__ = ["Received", "Rejected", "Reply", "UpstreamServer"]

_ROLES = ("system", "assistant", "user", "function", "tool", "developer")
_TOOL_ORPHAN = ("Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                "message with 'tool_calls'.")
_TOOL_UNANSWERED = ("An assistant message with 'tool_calls' must be followed by tool messages "
                    "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                    "response messages: ")
# OpenAI's bodies for scripted errors: (message, type, code)
_ERRORS: dict[int, tuple[str, str, str | None]] = {
    400: ("Invalid request.", "invalid_request_error", None),
    401: ("Incorrect API key provided: sk-***. You can find your API key at "
          "https://platform.openai.com/account/api-keys.", "invalid_request_error",
          "invalid_api_key"),
    403: ("You are not allowed to sample from this model", "invalid_request_error",
          "unsupported_country_region_territory"),
    404: ("The model `{model}` does not exist or you do not have access to it.",
          "invalid_request_error", "model_not_found"),
    429: ("Rate limit reached for {model} on tokens per min (TPM): Limit 30000, Used 30000, "
          "Requested 100. Please try again in 7s.", "tokens", "rate_limit_exceeded"),
    500: ("The server had an error while processing your request. Sorry about that!",
          "server_error", None),
    503: ("The engine is currently overloaded, please try again later", "server_error", None),
}


def _err(message: str, type_: str, code: str | None, param: str | None = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": type_, "param": param,
                                   "code": code}})


class UpstreamServer(FakeServer):
    PATH = "/v1"

    def __init__(self, *, context_window: int | None = 128_000, api_key: str | None = None,
                 models: tuple[str, ...] = ("gpt-4o-mini", "mock-1"),
                 record: bool = True, prefix_cache: int | None = None) -> None:
        super().__init__(context_window=context_window, api_key=api_key)  # Bearer <key>
        self.models = models
        self.record = record  # False for benchmarks: thousands of 870 KB bodies add up
        # A prompt cache as OpenAI reports it: `cached_tokens` are the prompt's leading
        # messages that an earlier prompt began with too, counted, when they come to
        # `prefix_cache` tokens or more (OpenAI's minimum is 1,024); None: no cache (0)
        self.prefix_cache = prefix_cache
        self._prompts: list[list[bytes]] = []  # the last prompts' messages, serialized
        self.disconnects = 0
        self._enc: tiktoken.Encoding | None = None

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        # The rest of the API, as far as ctxwarden's passthrough needs a real other side
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_get("/v1/files", self._files)
        app.router.add_delete("/v1/models/{model:.+}", self._delete_model)

    async def wait_disconnects(self, n: int = 1, timeout: float = 2.0) -> bool:
        deadline = time.monotonic() + timeout
        while self.disconnects < n and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        return self.disconnects >= n

    # -- handlers ---------------------------------------------------------------------
    async def _models(self, request: web.Request) -> web.Response:
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "system"}
                for m in self.models]
        return web.Response(body=orjson.dumps({"object": "list", "data": data}),
                            content_type="application/json")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        if self.record:
            self.history.append(Received(body if isinstance(body, dict) else {},
                                         CIMultiDict(request.headers), request.path))
        try:
            if not isinstance(body, dict):
                raise Rejected(400, _err("We could not parse the JSON body of your request.",
                                         "invalid_request_error", None))
            self._check_auth(request)
            prompt_tokens = self._validate(body)
        except Rejected as rej:
            self.rejected += 1
            return web.Response(status=rej.status, body=rej.body, content_type="application/json")
        reply = self._queue.popleft() if self._queue else self._echo(body)
        try:
            if reply.delay:
                await asyncio.sleep(reply.delay)
            if reply.status != 200:
                return self._error_response(reply, body)
            self.served += 1
            cached = self._cached(body["messages"], prompt_tokens)
            if body.get("stream"):
                return await self._stream(request, body, reply, prompt_tokens, cached)
            return web.Response(body=orjson.dumps(self._completion(body, reply, prompt_tokens,
                                                                   cached)),
                                headers=reply.headers, content_type="application/json")
        except asyncio.CancelledError:
            self.disconnects += 1
            raise

    async def _received(self, request: web.Request) -> dict[str, Any]:
        """Record the request (its path with the query) and check its key."""
        raw = await request.read()
        body = orjson.loads(raw) if raw else {}
        self.history.append(Received(body, CIMultiDict(request.headers), request.path_qs))
        self._check_auth(request)
        return body if isinstance(body, dict) else {}

    async def _embeddings(self, request: web.Request) -> web.Response:
        try:
            body = await self._received(request)
            texts = body.get("input")
            if texts is None:
                raise Rejected(400, _err("'input' is a required property",
                                         "invalid_request_error", None))
        except Rejected as rej:
            return web.Response(status=rej.status, body=rej.body, content_type="application/json")
        texts = [texts] if isinstance(texts, str) else list(texts)
        data = [{"object": "embedding", "index": i,
                 "embedding": [(hash(t) >> k) % 97 / 97 for k in range(0, 32, 4)]}
                for i, t in enumerate(texts)]
        n = sum(len(str(t).split()) for t in texts)
        return web.Response(body=orjson.dumps({
            "object": "list", "data": data, "model": body.get("model"),
            "usage": {"prompt_tokens": n, "total_tokens": n}}), content_type="application/json")

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        """A Responses API stream: one event a word of the reply, named as OpenAI names them."""
        try:
            body = await self._received(request)
        except Rejected as rej:
            return web.Response(status=rej.status, body=rej.body, content_type="application/json")
        reply = self._queue.popleft() if self._queue else Reply(text="ok")
        unpaired = _unpaired(body.get("input"))
        if unpaired:
            return web.Response(status=400, body=_err(unpaired, "invalid_request_error", None,
                                                      "input"), content_type="application/json")
        if reply.status != 200:
            return self._error_response(reply, body)
        if not body.get("stream"):
            return web.Response(body=orjson.dumps(self._response(body, reply)),
                                content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await resp.prepare(request)
        try:
            for i, word in enumerate(_split(reply.text or "", None)):
                if reply.chunk_delay:
                    await asyncio.sleep(reply.chunk_delay)
                event = {"type": "response.output_text.delta", "sequence_number": i,
                         "delta": word, "model": body.get("model")}
                await resp.write(b"event: response.output_text.delta\ndata: "
                                 + orjson.dumps(event) + b"\n\n")
        except (asyncio.CancelledError, ConnectionResetError):
            self.disconnects += 1
            raise
        await resp.write_eof()
        return resp

    def _response(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        """A non-streamed Responses API answer: the reply's text as a message item, its
        calls as `function_call` items."""
        output: list[dict[str, Any]] = [
            {"type": "function_call", "id": f"fc_{next(self._ids):06d}",
             "call_id": c["id"], "name": c["function"]["name"],
             "arguments": c["function"]["arguments"], "status": "completed"}
            for c in self._tool_calls(reply)]
        if reply.text is not None and not output:
            output.append({"type": "message", "id": f"msg_{next(self._ids):06d}",
                           "status": "completed", "role": "assistant",
                           "content": [{"type": "output_text", "text": reply.text,
                                        "annotations": []}]})
        n = len(orjson.dumps(body.get("input"))) // 4
        return {"id": f"resp_{next(self._ids):06d}", "object": "response",
                "created_at": int(time.time()), "model": body.get("model"),
                "status": "completed", "output": output, "parallel_tool_calls": True,
                "tool_choice": "auto", "tools": body.get("tools") or [],
                "usage": {"input_tokens": n, "output_tokens": 1, "total_tokens": n + 1,
                          "input_tokens_details": {"cached_tokens": 0},
                          "output_tokens_details": {"reasoning_tokens": 0}}}

    async def _files(self, request: web.Request) -> web.Response:
        await self._received(request)
        return web.Response(body=orjson.dumps({"object": "list", "data": [],
                                               "has_more": False}),
                            content_type="application/json")

    async def _delete_model(self, request: web.Request) -> web.Response:
        """Deleting a fine-tuned model, as OpenAI answers it."""
        await self._received(request)
        return web.Response(body=orjson.dumps({"id": request.match_info["model"],
                                               "object": "model", "deleted": True}),
                            content_type="application/json")

    def _check_auth(self, request: web.Request) -> None:
        if self.api_key is None:
            return
        got = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if got != self.api_key:
            shown = (got[:3] + "*" * 10 + got[-4:]) if len(got) > 8 else "***"
            msg = (f"Incorrect API key provided: {shown}. You can find your API key at "
                   "https://platform.openai.com/account/api-keys.")
            raise Rejected(401, _err(msg, "invalid_request_error", "invalid_api_key"))

    def _error_response(self, reply: Reply, body: dict[str, Any]) -> web.Response:
        msg, type_, code = _ERRORS.get(reply.status, ("Upstream error.", "server_error", None))
        msg = (reply.message or msg).replace("{model}", str(body.get("model")))
        payload = _err(msg, reply.type or type_, reply.code or code)
        return web.Response(status=reply.status, body=payload, headers=reply.headers,
                            content_type="application/json")

    # -- what OpenAI rejects ----------------------------------------------------------
    def _validate(self, body: dict[str, Any]) -> int:
        if not body.get("model"):
            raise Rejected(400, _err("you must provide a model parameter",
                                     "invalid_request_error", None))
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise Rejected(400, _err("Invalid 'messages': empty array. Expected an array with "
                                     "minimum length 1, but got an empty array instead.",
                                     "invalid_request_error", "empty_array", "messages"))
        pending: set[str] = set()  # tool_call ids of the last assistant still to be answered
        pending_at = 0
        for i, m in enumerate(msgs):
            role = m.get("role") if isinstance(m, dict) else None
            if role not in _ROLES:
                raise Rejected(400, _err(
                    f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', "
                    "'user', 'function', 'tool', and 'developer'.",
                    "invalid_request_error", "invalid_value", f"messages.[{i}].role"))
            if role == "tool":
                cid = m.get("tool_call_id")
                if cid not in pending:
                    raise Rejected(400, _err(_TOOL_ORPHAN, "invalid_request_error", None,
                                             f"messages.[{i}].role"))
                pending.discard(cid)
                continue
            if pending:
                raise Rejected(400, _err(_TOOL_UNANSWERED + ", ".join(sorted(pending)),
                                         "invalid_request_error", None,
                                         f"messages.[{pending_at}].role"))
            if role == "assistant" and m.get("tool_calls"):
                pending, pending_at = {c.get("id") for c in m["tool_calls"]}, i
        if pending:
            raise Rejected(400, _err(_TOOL_UNANSWERED + ", ".join(sorted(pending)),
                                     "invalid_request_error", None,
                                     f"messages.[{pending_at}].role"))
        if self.context_window is None:
            return len(orjson.dumps(msgs)) // 4
        tokens, tool_tokens = self.count_tokens(msgs, body.get("tools"))
        if tokens > self.context_window:
            raise Rejected(400, _err(
                f"This model's maximum context length is {self.context_window} tokens. However, "
                f"your messages resulted in {tokens} tokens (including {tool_tokens} in your "
                "tool definitions). Please reduce the length of the messages.",
                "invalid_request_error", "context_length_exceeded", "messages"))
        return tokens

    def count_tokens(self, msgs: list[Any], tools: Any = None) -> tuple[int, int]:
        """OpenAI's cookbook count: 3 per message + its values (+1 for a name) + 3."""
        if self._enc is None:
            self._enc = tiktoken.get_encoding("o200k_base")
        enc = self._enc
        n = 3
        for m in msgs:
            n += 3
            for key, value in m.items():
                if isinstance(value, str):
                    n += len(enc.encode(value, disallowed_special=()))
                elif isinstance(value, list) and key == "content":
                    text = " ".join(p.get("text", "") for p in value if isinstance(p, dict))
                    n += len(enc.encode(text, disallowed_special=()))
                elif value is not None:
                    n += len(enc.encode(orjson.dumps(value).decode(), disallowed_special=()))
                if key == "name":
                    n += 1
        tool_tokens = 0
        if tools:
            tool_tokens = len(enc.encode(orjson.dumps(tools).decode(), disallowed_special=()))
        return n + tool_tokens, tool_tokens

    # -- answers ----------------------------------------------------------------------
    @staticmethod
    def _echo(body: dict[str, Any]) -> Reply:
        users = [m for m in body["messages"] if m.get("role") == "user"]
        last: dict[str, Any] = users[-1] if users else {}
        content = last.get("content")
        if isinstance(content, list):
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        return Reply(text="echo: " + str(content or "")[:200])

    def _tool_calls(self, reply: Reply) -> list[dict[str, Any]]:
        return [{"id": c.get("id") or f"call_{next(self._ids):06d}", "type": "function",
                 "function": {"name": c["name"], "arguments": c.get("arguments", "{}")}}
                for c in reply.tool_calls or []]

    def _head(self, body: dict[str, Any], obj: str) -> dict[str, Any]:
        return {"id": f"chatcmpl-{next(self._ids):08d}", "object": obj, "created": int(time.time()),
                "model": body["model"], "service_tier": "default",
                "system_fingerprint": "fp_fake0001"}

    def _cached(self, msgs: list[Any], prompt: int) -> int:
        if self.prefix_cache is None:
            return 0
        keys = [orjson.dumps(m, option=orjson.OPT_SORT_KEYS) for m in msgs]
        lead = 0
        for prev in self._prompts:
            n = next((i for i, (a, b) in enumerate(zip(prev, keys, strict=False))
                      if a != b), min(len(prev), len(keys)))
            lead = max(lead, n)
        self._prompts = [*self._prompts[-63:], keys]
        if not lead:
            return 0
        head = msgs[:lead]
        tokens = min(prompt, len(orjson.dumps(head)) // 4 if self.context_window is None
                     else self.count_tokens(head)[0])
        return tokens if tokens >= self.prefix_cache else 0

    @staticmethod
    def _usage(prompt: int, completion: int, cached: int = 0) -> dict[str, Any]:
        return {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                              "accepted_prediction_tokens": 0,
                                              "rejected_prediction_tokens": 0}}

    def _completion(self, body: dict[str, Any], reply: Reply, prompt: int,
                    cached: int = 0) -> dict[str, Any]:
        calls = self._tool_calls(reply)
        message: dict[str, Any] = {"role": "assistant", "content": None if calls else reply.text,
                                   "refusal": None, "annotations": []}
        if calls:
            message["tool_calls"] = calls
        n = int(body.get("n") or 1)
        finish = "tool_calls" if calls else "stop"
        choices = [{"index": i, "message": message, "logprobs": None, "finish_reason": finish}
                   for i in range(n)]
        completion = len((reply.text or "").split()) + 10 * len(calls)
        return {**self._head(body, "chat.completion"), "choices": choices,
                "usage": self._usage(prompt, completion, cached)}

    def _events(self, body: dict[str, Any], reply: Reply, prompt: int,
                cached: int = 0) -> list[dict[str, Any]]:
        head = self._head(body, "chat.completion.chunk")
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        extra = {"usage": None} if usage else {}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                         "finish_reason": finish}], **extra}

        events = [chunk({"role": "assistant", "content": "" if not reply.tool_calls else None,
                         "refusal": None})]
        calls = self._tool_calls(reply)
        for i, c in enumerate(calls):
            events.append(chunk({"tool_calls": [{"index": i, "id": c["id"], "type": "function",
                                                 "function": {"name": c["function"]["name"],
                                                              "arguments": ""}}]}))
            events.append(chunk({"tool_calls": [{"index": i, "function": {
                "arguments": c["function"]["arguments"]}}]}))
        text = reply.text or ""
        pieces = _split(text, reply.chunks) if not calls else []
        events += [chunk({"content": p}) for p in pieces]
        events.append(chunk({}, "tool_calls" if calls else "stop"))
        if usage:
            completion = len(text.split()) + 10 * len(calls)
            events.append({**head, "choices": [],
                           "usage": self._usage(prompt, completion, cached)})
        return events

    async def _stream(self, request: web.Request, body: dict[str, Any], reply: Reply,
                      prompt: int, cached: int = 0) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8",
                                           "Cache-Control": "no-cache", **reply.headers})
        await resp.prepare(request)
        for i, event in enumerate(self._events(body, reply, prompt, cached)):
            if reply.break_after is not None and i >= reply.break_after:
                assert request.transport is not None
                request.transport.abort()  # a broken upstream: no terminating chunk
                return resp
            if reply.chunk_delay:
                await asyncio.sleep(reply.chunk_delay)
            if not await self._write(resp, b"data: " + orjson.dumps(event) + b"\n\n", reply):
                return resp
        if reply.done:
            await self._write(resp, b"data: [DONE]\n\n", reply)
        await resp.write_eof()
        return resp

    async def _write(self, resp: web.StreamResponse, data: bytes, reply: Reply) -> bool:
        size = reply.write_size or len(data)
        try:
            for i in range(0, len(data), size):
                await resp.write(data[i:i + size])
                if reply.write_size:
                    await asyncio.sleep(0.0005)  # let each piece leave as its own segment
        except ConnectionResetError:
            self.disconnects += 1
            return False
        return True


def _unpaired(items: Any) -> str | None:
    """OpenAI's refusal of a Responses input whose calls and outputs do not pair up."""
    if not isinstance(items, list):
        return None
    calls = {str(i.get("call_id")) for i in items if isinstance(i, dict) and "call_id" in i
             and str(i.get("type", "")).endswith("_call")}  # function, custom, shell…
    for item in items:
        if isinstance(item, dict) and item.get("type") in ("function_call_output",
                                                           "custom_tool_call_output"):
            if str(item.get("call_id")) not in calls:
                return (f"No tool call found for function call output with call_id "
                        f"{item.get('call_id')}.")
    answered = {str(i.get("call_id")) for i in items if isinstance(i, dict)
                and str(i.get("type", "")).endswith("_output")}
    for call in sorted(c for c in calls if c not in answered):
        return f"No tool output found for function call {call}."
    return None


def _split(text: str, n: int | None) -> list[str]:
    if not text:
        return []
    if n is None:
        words = text.split(" ")
        return [w if i == 0 else " " + w for i, w in enumerate(words)]
    size = max(1, -(-len(text) // n))
    return [text[i:i + size] for i in range(0, len(text), size)]
