"""What Anthropic's Messages API rejects, with its own words, for `anthropic_server`.

Each rule raises `Rejected(400, <Anthropic's error body>)`. The messages follow the real
API's (as of 2025): `max_tokens` is required, roles alternate starting with `user`, every
`tool_use` is answered by a `tool_result` in the very next message and nothing else is,
and the prompt plus `max_tokens` must fit the window. A request that passes here would
not be refused by Anthropic for the same reasons.
"""

from __future__ import annotations

from typing import Any

import orjson
import tiktoken

import proxy  # noqa: F401  (offline defaults: tiktoken reads its cache dir from the env)
from tests.support.openai_server import Rejected

_ENC: list[tiktoken.Encoding] = []


def error_body(type_: str, message: str) -> bytes:
    """Anthropic's error shape: `{"type": "error", "error": {"type", "message"}}`."""
    return orjson.dumps({"type": "error", "error": {"type": type_, "message": message}})


def invalid(message: str) -> Rejected:
    return Rejected(400, error_body("invalid_request_error", message))


def check(body: dict[str, Any], window: int | None, max_output: int) -> int:
    """Raise `Rejected` for what Anthropic refuses; return the prompt's token count."""
    if not body.get("model"):
        raise invalid("model: Field required")
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        raise invalid("max_tokens: Field required")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise invalid("max_tokens: Input should be a valid integer greater than 0")
    if max_tokens > max_output:
        raise invalid(f"max_tokens: {max_tokens} > {max_output}, which is the maximum allowed "
                      f"number of output tokens for {body['model']}")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise invalid("messages: at least one message is required")
    _alternation(msgs)
    _tool_pairs(msgs)
    tokens = count_tokens(body)
    if window is not None and tokens > window:
        raise invalid(f"prompt is too long: {tokens} tokens > {window} maximum")
    if window is not None and tokens + max_tokens > window:
        raise invalid(f"input length and `max_tokens` exceed context limit: {tokens} + "
                      f"{max_tokens} > {window}, decrease input length or `max_tokens` and "
                      "try again")
    return tokens


def _alternation(msgs: list[Any]) -> None:
    prev = None
    for i, m in enumerate(msgs):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ("user", "assistant"):
            raise invalid(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        if i == 0 and role != "user":
            raise invalid('messages: first message must use the "user" role')
        if role == prev:
            raise invalid(f'messages: roles must alternate between "user" and "assistant", '
                          f'but found multiple "{role}" roles in a row')
        content = m.get("content")
        last_assistant = i == len(msgs) - 1 and role == "assistant"
        if not content and not last_assistant:
            raise invalid(f"messages.{i}: all messages must have non-empty content except for "
                          "the optional final assistant message")
        for j, block in enumerate(content if isinstance(content, list) else ()):
            if block.get("type") == "text" and not block.get("text"):
                raise invalid(f"messages.{i}.content.{j}.text: text content blocks must be "
                              "non-empty")
        prev = role


def _blocks(m: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    content = m.get("content")
    return [b for b in content if b.get("type") == kind] if isinstance(content, list) else []


def _tool_pairs(msgs: list[dict[str, Any]]) -> None:
    asked: list[str] = []  # tool_use ids of the previous assistant message
    for i, m in enumerate(msgs):
        answered = [str(b.get("tool_use_id")) for b in _blocks(m, "tool_result")]
        stray = [a for a in answered if a not in asked]
        if stray:
            raise invalid(f"messages.{i}.content.0: unexpected `tool_use_id` found in "
                          f"`tool_result` blocks: {stray[0]}. Each `tool_result` block must "
                          "have a corresponding `tool_use` block in the previous message.")
        missing = [a for a in asked if a not in answered]
        if missing:
            raise _unanswered(i - 1, missing)
        asked = ([str(b.get("id")) for b in _blocks(m, "tool_use")]
                 if m["role"] == "assistant" else [])
    if asked:
        raise _unanswered(len(msgs) - 1, asked)


def _unanswered(at: int, ids: list[str]) -> Rejected:
    return invalid(f"messages.{at}: `tool_use` ids were found without `tool_result` blocks "
                   f"immediately after: {', '.join(ids)}. Each `tool_use` block must have a "
                   "corresponding `tool_result` block in the next message.")


def _text(value: Any) -> str:
    """Every text and tool input in a content value, as one string to count."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        return orjson.dumps(value).decode() if value is not None else ""
    parts: list[str] = []
    for b in value:
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text":
            parts.append(b.get("text", ""))
        elif kind == "tool_use":
            parts.append(b.get("name", "") + orjson.dumps(b.get("input")).decode())
        elif kind == "tool_result":
            parts.append(_text(b.get("content")))
        else:
            parts.append(orjson.dumps(b).decode())
    return " ".join(parts)


def count_tokens(body: dict[str, Any]) -> int:
    """A rough count (o200k, not Claude's tokenizer): system + messages + tools, 4 a message."""
    if not _ENC:
        _ENC.append(tiktoken.get_encoding("o200k_base"))
    enc = _ENC[0]
    texts = [_text(body.get("system"))] + [_text(m.get("content")) for m in body["messages"]]
    if body.get("tools"):
        texts.append(orjson.dumps(body["tools"]).decode())
    return sum(len(enc.encode(t, disallowed_special=())) for t in texts) + 4 * len(
        body["messages"])
