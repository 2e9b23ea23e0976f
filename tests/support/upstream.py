"""Calling the upstream boundary directly: a route to the fake, a request body, a test key."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.config import RouteSettings
from tests.support.messages import user

KEY = "sk-proj-SECRETSECRET0123456789"  # the route's key: no error or log may show it
TOOLS: list[dict[str, Any]] = [{"type": "function", "function": {
    "name": "read_file", "description": "Read a file", "strict": True,
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                   "required": ["path"], "additionalProperties": False}}}]
BOTH = pytest.mark.parametrize("transport", ["direct", "litellm"])


def route(url: str | None, transport: str = "auto", **up: Any) -> RouteSettings:
    """Route `r` to `openai/gpt-4o-mini` at `url`; `up` overrides upstream fields."""
    upstream = {"model": "openai/gpt-4o-mini", "api_base": url, "api_key": KEY,
                "transport": transport, **up}
    return RouteSettings.model_validate({"name": "r", "upstream": upstream})


def body(*messages: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"model": "client-model", "messages": list(messages) or [user("hi there")], **fields}
