"""`POST /v1/responses`: the Responses API fitted like chat, or passed through.

OpenAI's Agents SDK and Codex call the Responses API, not chat completions; a user who
points `OPENAI_BASE_URL` here changes nothing else, so their loops are fitted too. A
request whose whole history is in its `input` (a list of items, no
`previous_response_id` or `conversation`: with those the provider holds the history, and
the request only its newest items) goes through the same pipeline as a chat request:
its items become chat messages (proxy/items.py), the pipeline chunks, fits, offloads and
recalls them in the request's session, and the fitted messages go back over the items
they came from. The body goes to the route's upstream with the route's model and key: at
`/responses` to a provider that speaks OpenAI's wire format, through LiteLLM's Responses
API to any other (proxy/upstream/via_responses.py). The answer (a stream too) comes back
as OpenAI would send it, with ctxwarden's headers. `/admin/sent` holds the Responses body
as it was sent.

Passed through unchanged (proxy/passthrough.py, one `responses_passed` log line with the
reason): a body that is not JSON, or not translated (a `computer_call`, an
`item_reference`), or not valid as chat (the provider says what is wrong), a request
with server-side state, and a model no route takes.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import structlog
from aiohttp import web

from proxy import metrics
from proxy.errors import InvalidRequest
from proxy.handlers import accepted, caller, read_raw
from proxy.items import Plan, Untranslatable, to_chat, to_items
from proxy.keys import PIPELINE, SETTINGS, UPSTREAM
from proxy.passthrough import send
from proxy.upstream.transport import Target
from proxy.upstream.via_responses import respond, respond_stream
from proxy.validate import validate_body
from store.quiet import FORWARD_HOLD_S, QUIET

log = structlog.get_logger("ctxwarden")

STATEFUL = ("previous_response_id", "conversation")
# what the chat body carries besides messages: the session's keys and what the budget
# counts (tools and a named tool choice by their JSON, as chat's)
CARRIED = ("user", "metadata", "tools", "tool_choice", "stream")


async def responses(request: web.Request) -> web.StreamResponse:
    started = time.perf_counter()
    raw = await read_raw(request)
    with QUIET.busy():
        body, chat, plan, why = _translated(raw)
        if body is None or chat is None or plan is None:
            log.info("responses_passed", reason=why)
            return await send(request, "responses", raw)
        settings = request.app[SETTINGS]
        route = settings.route_for(chat["model"])
        upstream = request.app[UPSTREAM]
        if route is None:
            log.info("responses_passed", reason="no route takes the model")
            return await send(request, "responses", raw)
        # no `upstream.check`: LiteLLM's Responses bridge translates custom tools (as a
        # function of one string), which its chat transform cannot
        tenant, key, api_key, unproven = caller(request, route.name, chat)
        pipeline = request.app[PIPELINE]
        prepared = await pipeline.prepare(chat, route, tenant, key, defer=unproven,
                                          beside=True)
        target = upstream.target(route, api_key)
        body = {**body, "model": target.model,
                "input": to_items(plan, prepared.body["messages"], prepared.kept)}
    fields: dict[str, Any] = {**prepared.log_fields(), "stream": bool(chat.get("stream")),
                              "endpoint": "responses",
                              "overhead_ms": round((time.perf_counter() - started) * 1000, 2)}
    metrics.observe(request, prepared, fields["overhead_ms"])
    forwarded = QUIET.hold(FORWARD_HOLD_S)
    try:
        async def ready(status: int) -> None:  # the upstream's status line is in
            if unproven and status < 400:
                await accepted(request, prepared)
            await prepared.settled()
            if not unproven or status < 400:  # /admin/sent: the body as it was sent
                pipeline.sent.put(tenant, prepared.session, prepared.turn, body)

        if target.transport == "direct":
            resp = await send(request, "responses", orjson.dumps(body), route=route,
                              headers=prepared.headers(), before=ready, logged=False)
        else:
            resp = await _via_litellm(request, target, body, prepared.headers(), ready)
    finally:
        forwarded()
    log.info("request", status=resp.status, latency_ms=round(
        (time.perf_counter() - started) * 1000, 2), **fields)
    return resp


async def _via_litellm(request: web.Request, target: Target, body: dict[str, Any],
                       headers: dict[str, str], ready: Callable[[int], Awaitable[None]]
                       ) -> web.StreamResponse:
    """The body to a provider LiteLLM reaches (proxy/upstream/via_responses.py), its answer
    to the client as OpenAI would send it."""
    if not body.get("stream"):
        reply = await respond(target, body)
        await ready(reply.status)
        answer = web.Response(body=reply.body, status=reply.status, headers=headers,
                              content_type="application/json")
        with contextlib.suppress(ConnectionResetError):  # the client left
            await answer.prepare(request)
            await answer.write_eof()
        return answer
    stream = await respond_stream(target, body)
    try:
        await ready(200)
        resp = web.StreamResponse(headers={**headers, "Cache-Control": "no-cache",
                                           "Content-Type": "text/event-stream"})
        await resp.prepare(request)
        async for frame in stream:
            await resp.write(frame)
        await resp.write_eof()
    except ConnectionResetError:  # the client left: closing the stream ends the call
        log.info("responses_client_disconnected")
    finally:
        await stream.aclose()
    return resp


Translated = tuple[dict[str, Any] | None, dict[str, Any] | None, Plan | None, str]


def _translated(raw: bytes) -> Translated:
    """The Responses body, the chat body standing for it and the plan to write it back;
    or Nones and why the request is passed through instead."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None, None, None, "not JSON"
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        return None, None, None, "no model"
    held = [k for k in STATEFUL if body.get(k)]
    if held:
        return None, None, None, f"the provider holds the history ({held[0]})"
    try:
        plan = to_chat(body)
    except Untranslatable as exc:
        return None, None, None, str(exc)
    chat: dict[str, Any] = {"model": body["model"], "messages": plan.messages}
    chat.update((k, body[k]) for k in CARRIED if body.get(k) is not None)
    if isinstance(body.get("max_output_tokens"), int):
        chat["max_completion_tokens"] = body["max_output_tokens"]
    text = body.get("text")
    if isinstance(text, dict) and isinstance(text.get("format"), dict):  # a schema's cost
        chat["response_format"] = text["format"]
    try:
        validate_body(chat)
    except InvalidRequest as exc:
        return None, None, None, f"not valid as chat: {exc}"
    return body, chat, plan, ""
