"""Responses API input items for tests: one-line builders."""

from __future__ import annotations

from typing import Any


def fc(cid: str, name: str = "read_file", args: str = "{}") -> dict[str, Any]:
    """A `function_call` item."""
    return {"type": "function_call", "call_id": cid, "name": name, "arguments": args}


def out(cid: str, text: str) -> dict[str, Any]:
    """The `function_call_output` item answering call `cid`."""
    return {"type": "function_call_output", "call_id": cid, "output": text}


def said(role: str, text: str) -> dict[str, Any]:
    """A `message` item: a user's `input_text`, or an assistant's `output_text`."""
    return {"type": "message", "role": role,
            "content": [{"type": "input_text" if role == "user" else "output_text",
                         "text": text}]}
