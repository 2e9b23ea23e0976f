"""Request validation: what OpenAI rejects, we reject first, in its words."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from proxy.errors import InvalidRequest
from proxy.validate import validate_body


def call(cid: str, name: str = "f") -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": "{}"}}


def accepted(body: dict[str, Any]) -> bool:
    """Valid: no error, and the body is left as the client sent it (it is forwarded)."""
    before = copy.deepcopy(body)
    validate_body(body)
    return body == before


def check(body: Any) -> dict[str, Any]:
    with pytest.raises(InvalidRequest) as info:
        validate_body(body)
    error: dict[str, Any] = info.value.body()["error"]
    return error


def test_valid_tool_exchange_passes() -> None:
    assert accepted({"model": "m", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [call("a"), call("b")]},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "tool", "tool_call_id": "b", "content": "2"},
        {"role": "assistant", "content": "done"},
    ]})


def test_same_call_id_in_two_turns_is_valid() -> None:
    # Real tau-bench traffic reuses ids across turns; OpenAI accepts it.
    assert accepted({"model": "m", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [call("a")]},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "assistant", "tool_calls": [call("a")]},
        {"role": "tool", "tool_call_id": "a", "content": "2"},
    ]})


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ([], {"message": "The request body must be a JSON object.", "type":
              "invalid_request_error", "code": "invalid_type", "param": "body"}),
        ({"messages": []}, {"message": "Missing required parameter: 'model'.",
                            "type": "invalid_request_error",
                            "code": "missing_required_parameter", "param": "model"}),
        ({"model": "m", "messages": []}, {
            "message": "Invalid 'messages': empty array. Expected an array with minimum length "
                       "1, but got an empty array instead.",
            "type": "invalid_request_error", "code": "empty_array", "param": "messages"}),
        ({"model": "m", "messages": "hi"}, {
            "message": "Invalid type for 'messages': expected an array.",
            "type": "invalid_request_error", "code": "invalid_type", "param": "messages"}),
        ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, {
            "message": "Invalid value for 'messages[0].role': 'robot'. Supported values are: "
                       "'system', 'assistant', 'user', 'function', 'tool', and 'developer'.",
            "type": "invalid_request_error", "code": "invalid_value",
            "param": "messages[0].role"}),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": "yes"}, {
            "message": "Invalid type for 'stream': expected a boolean.",
            "type": "invalid_request_error", "code": "invalid_type", "param": "stream"}),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": True}, {
            "message": "Invalid type for 'max_tokens': expected an integer.",
            "type": "invalid_request_error", "code": "invalid_type", "param": "max_tokens"}),
        ({"model": "m", "messages": [{"role": "user", "content": 5}]}, {
            "message": "Invalid type for 'messages[0].content': expected one of a string or "
                       "array of objects.",
            "type": "invalid_request_error", "code": "invalid_type",
            "param": "messages[0].content"}),
    ],
)
def test_bad_bodies(body: Any, expected: dict[str, Any]) -> None:
    assert check(body) == expected


def test_orphan_tool_message() -> None:
    err = check({"model": "m", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "zz", "content": "1"},
    ]})
    assert err == {
        "message": "Invalid parameter: messages with role 'tool' must be a response to a "
                   "preceeding message with 'tool_calls'.",
        "type": "invalid_request_error", "code": "invalid_value", "param": "messages[1].role"}


def test_unanswered_call_and_interleaved_message() -> None:
    err = check({"model": "m", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [call("a"), call("b")]},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "user", "content": "in between"},
        {"role": "tool", "tool_call_id": "b", "content": "2"},
    ]})
    assert err["message"].endswith("did not have response messages: b")
    assert err["param"] == "messages.[1].role"


def test_duplicate_id_within_one_message_and_double_answer() -> None:
    err = check({"model": "m", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [call("a"), call("a")]},
    ]})
    assert err["code"] == "duplicate_tool_call_id"
    err = check({"model": "m", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [call("a")]},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "tool", "tool_call_id": "a", "content": "again"},
    ]})
    assert err["param"] == "messages[3].role"


def test_custom_tool_calls_and_legacy_function_calls_pass() -> None:
    assert accepted({"model": "m", "functions": [{"name": "f"}], "response_format": {
        "type": "json_object"}, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [
            {"id": "a", "type": "custom", "custom": {"name": "patch", "input": "*** x"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": ""}},
        {"role": "function", "name": "f", "content": "2"},
    ]})


def _user(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": list(parts)}]}


@pytest.mark.parametrize(
    ("body", "message", "code", "param"),
    [
        (_user({"type": "image_url", "image_url": None}),
         "Missing required parameter: 'messages[0].content[0].image_url'.",
         "missing_required_parameter", "messages[0].content[0].image_url"),
        (_user({"type": "image_url", "image_url": {"detail": "low"}}),
         "Missing required parameter: 'messages[0].content[0].image_url.url'.",
         "missing_required_parameter", "messages[0].content[0].image_url.url"),
        (_user({"type": "input_audio", "input_audio": {"data": "AAAA", "format": "ogg"}}),
         "Invalid value for 'messages[0].content[0].input_audio.format': 'ogg'. Supported "
         "values are: 'wav' and 'mp3'.", "invalid_value",
         "messages[0].content[0].input_audio.format"),
        (_user({"type": "file", "file": {"filename": "a.pdf"}}),
         "Missing required parameter: 'messages[0].content[0].file.file_data' or "
         "'messages[0].content[0].file.file_id'.", "missing_required_parameter",
         "messages[0].content[0].file.file_data"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}],
          "response_format": "json"},
         "Invalid type for 'response_format': expected an object.", "invalid_type",
         "response_format"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "functions": {}},
         "Invalid type for 'functions': expected an array.", "invalid_type", "functions"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"},
                                     {"role": "assistant", "function_call": "f"}]},
         "Missing required parameter: 'messages[1].function_call.name'.",
         "missing_required_parameter", "messages[1].function_call"),
    ],
)
def test_media_parts_and_legacy_fields(body: dict[str, Any], message: str, code: str,
                                       param: str) -> None:
    assert check(body) == {"message": message, "type": "invalid_request_error", "code": code,
                           "param": param}
