"""Reject what a provider would reject, before any work, with OpenAI's error wording.

Every request we forward must be valid: the `tool` messages answering an assistant's
`tool_calls` follow it immediately, nothing in between, each call answered exactly once.
"""

from __future__ import annotations

from typing import Any

from proxy.errors import InvalidRequest

ROLES = ("system", "developer", "user", "assistant", "tool", "function")
_ROLE_LIST = "'system', 'assistant', 'user', 'function', 'tool', and 'developer'"


def _bad(message: str, param: str, code: str = "invalid_value") -> InvalidRequest:
    return InvalidRequest(message, code=code, param=param)


def _type(value: Any, kind: type, param: str, expected: str) -> None:
    # bool is an int in Python, not in JSON Schema
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise _bad(f"Invalid type for '{param}': expected {expected}.", param, "invalid_type")


def validate_body(body: Any) -> None:
    if not isinstance(body, dict):
        raise _bad("The request body must be a JSON object.", "body", "invalid_type")
    if "model" not in body:
        raise _bad("Missing required parameter: 'model'.", "model", "missing_required_parameter")
    _type(body["model"], str, "model", "a string")
    if not body["model"]:
        raise _bad("Invalid value for 'model': empty string.", "model")
    if "messages" not in body:
        raise _bad("Missing required parameter: 'messages'.", "messages",
                   "missing_required_parameter")
    _type(body["messages"], list, "messages", "an array")
    if not body["messages"]:
        raise _bad("Invalid 'messages': empty array. Expected an array with minimum length 1, "
                   "but got an empty array instead.", "messages", "empty_array")
    for key in ("stream",):
        if key in body and body[key] is not None:
            _type(body[key], bool, key, "a boolean")
    for key in ("max_tokens", "max_completion_tokens", "n"):
        if key in body and body[key] is not None:
            _type(body[key], int, key, "an integer")
            if body[key] < 1:
                raise _bad(f"Invalid '{key}': integer below minimum value. Expected a value >= 1, "
                           f"but got {body[key]} instead.", key, "integer_below_min_value")
    for key in ("tools", "functions"):
        if key in body and body[key] is not None:
            _type(body[key], list, key, "an array")
    if body.get("response_format") is not None:
        _type(body["response_format"], dict, "response_format", "an object")
    validate_messages(body["messages"])


def validate_messages(messages: list[Any]) -> None:
    pending: dict[str, int] = {}  # tool_call_id -> index of the assistant that made it
    pending_at = -1
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        _type(m, dict, where, "an object")
        role = m.get("role")
        if role not in ROLES:
            raise _bad(f"Invalid value for '{where}.role': {role!r}. Supported values are: "
                       f"{_ROLE_LIST}.", f"{where}.role")
        content = m.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise _bad(f"Invalid type for '{where}.content': expected one of a string or array "
                       "of objects.", f"{where}.content", "invalid_type")
        if isinstance(content, list):
            _parts(content, where)
        if role != "assistant" and m.get("tool_calls"):  # chunking reads them as calls
            raise _bad(f"Invalid parameter: '{where}.tool_calls' is only allowed on messages "
                       "with role 'assistant'.", f"{where}.tool_calls")
        fc = m.get("function_call")  # legacy: an assistant's one call, answered by 'function'
        if fc is not None and (not isinstance(fc, dict) or not isinstance(fc.get("name"), str)):
            raise _bad(f"Missing required parameter: '{where}.function_call.name'.",
                       f"{where}.function_call", "missing_required_parameter")
        if role == "tool":
            tcid = m.get("tool_call_id")
            if not isinstance(tcid, str) or tcid not in pending:
                raise _bad("Invalid parameter: messages with role 'tool' must be a response to a "
                           "preceeding message with 'tool_calls'.", f"{where}.role")
            del pending[tcid]
            continue
        if pending:
            raise _unanswered(pending, pending_at)
        if role == "assistant" and m.get("tool_calls"):
            calls = m["tool_calls"]
            _type(calls, list, f"{where}.tool_calls", "an array")
            seen_ids: set[str] = set()  # ids may recur across turns, never within one message
            for k, call in enumerate(calls):
                cw = f"{where}.tool_calls[{k}]"
                _type(call, dict, cw, "an object")
                cid = call.get("id")
                kind = "custom" if call.get("type") == "custom" else "function"
                fn = call.get(kind)  # {"name", "arguments"} or a custom call's {"name", "input"}
                if not isinstance(cid, str) or not cid:
                    raise _bad(f"Missing required parameter: '{cw}.id'.", f"{cw}.id",
                               "missing_required_parameter")
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                    raise _bad(f"Missing required parameter: '{cw}.{kind}.name'.",
                               f"{cw}.{kind}", "missing_required_parameter")
                if cid in seen_ids:
                    raise _bad(f"Duplicate tool call id {cid!r} in '{cw}.id'.", f"{cw}.id",
                               "duplicate_tool_call_id")
                seen_ids.add(cid)
                pending[cid] = i
            pending_at = i
    if pending:
        raise _unanswered(pending, pending_at)


def _parts(content: list[Any], where: str) -> None:
    for k, part in enumerate(content):
        pw = f"{where}.content[{k}]"
        if not isinstance(part, dict):
            raise _bad(f"Invalid type for '{where}.content': array items must be objects.",
                       f"{where}.content", "invalid_type")
        if not isinstance(part.get("type"), str):
            raise _bad(f"Missing required parameter: '{pw}.type'.", f"{pw}.type",
                       "missing_required_parameter")
        if part["type"] == "text" and not isinstance(part.get("text"), str):
            raise _bad(f"Invalid type for '{pw}.text': expected a string.", f"{pw}.text",
                       "invalid_type")
        kind = part["type"]
        if kind in _MEDIA:
            _media(part.get(kind), kind, f"{pw}.{kind}")


_MEDIA = {"image_url": "url", "input_audio": "data", "file": None}


def _media(spec: Any, kind: str, param: str) -> None:
    """An image needs its `url`, audio its `data` and a wav/mp3 `format`, a file an object
    (`file_data` or `file_id`): what the media's tokens are counted from."""
    if not isinstance(spec, dict):
        raise _bad(f"Missing required parameter: '{param}'.", param, "missing_required_parameter")
    key = _MEDIA[kind]
    if key is not None and not isinstance(spec.get(key), str):
        raise _bad(f"Missing required parameter: '{param}.{key}'.", f"{param}.{key}",
                   "missing_required_parameter")
    if kind == "input_audio" and spec.get("format") not in ("wav", "mp3"):
        raise _bad(f"Invalid value for '{param}.format': {spec.get('format')!r}. Supported "
                   "values are: 'wav' and 'mp3'.", f"{param}.format")
    if kind == "file" and not isinstance(spec.get("file_data") or spec.get("file_id"), str):
        raise _bad(f"Missing required parameter: '{param}.file_data' or '{param}.file_id'.",
                   f"{param}.file_data", "missing_required_parameter")


def _unanswered(pending: dict[str, int], at: int) -> InvalidRequest:
    ids = ", ".join(sorted(pending))
    return _bad("An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {ids}", f"messages.[{at}].role")
