"""One provider family behind one face, so an end-to-end test runs against each the same way.

- `openai`: the fake OpenAI (`openai_server.py`), reached by the direct transport.
- `anthropic`: the fake Anthropic (`anthropic_server.py`), reached through LiteLLM's
  `anthropic/claude-sonnet-4-5` transform, so what it checks is what Anthropic would get.

Each server checks its key and refuses what its provider refuses; `Provider` reads what it
received in that provider's own shape (tool pairs, the last message's text).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.support.anthropic_server import AnthropicServer
from tests.support.openai_server import Received, Reply, UpstreamServer

FAMILIES = ("openai", "anthropic")
KEYS = {"openai": "sk-up-openai-0001", "anthropic": "sk-ant-api03-test-0001"}
MODELS = {"openai": "openai/gpt-4o", "anthropic": "anthropic/claude-sonnet-4-5"}


@dataclass
class Provider:
    family: str
    server: UpstreamServer | AnthropicServer

    @property
    def upstream(self) -> dict[str, Any]:
        """A route's `upstream` settings for this provider's fake."""
        return {"model": MODELS[self.family], "api_base": self.server.url,
                "api_key": KEYS[self.family]}

    @property
    def history(self) -> list[Received]:
        return self.server.history

    @property
    def rejected(self) -> int:
        return self.server.rejected

    def set_window(self, tokens: int) -> None:
        self.server.context_window = tokens

    def enqueue(self, text: str | None = None, **fields: Any) -> Reply:
        return self.server.enqueue(text, **fields)

    def enqueue_error(self, status: int, message: str | None = None, **fields: Any) -> Reply:
        return self.server.enqueue_error(status, message, **fields)

    def tool_pairs(self, body: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
        """The call ids the assistant turns made, in order, and each result's text by id."""
        calls: list[str] = []
        results: dict[str, str] = {}
        for m in body["messages"]:
            if self.family == "openai":
                calls += [c["id"] for c in m.get("tool_calls") or ()]
                if m["role"] == "tool":
                    results[m["tool_call_id"]] = text(m["content"])
                continue
            for block in m["content"] if isinstance(m["content"], list) else ():
                if block["type"] == "tool_use":
                    calls.append(block["id"])
                elif block["type"] == "tool_result":
                    results[block["tool_use_id"]] = text(block.get("content"))
        return calls, results

    def last_text(self, body: dict[str, Any]) -> str:
        """All text of the last message sent upstream (strings or content blocks)."""
        return text(body["messages"][-1]["content"])


def text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    out = []
    for part in content:
        if part.get("type") == "text":
            out.append(part.get("text", ""))
        elif part.get("type") == "tool_result":
            out.append(text(part.get("content")))
    return "\n".join(out)


async def start(family: str, window: int | None = 128_000) -> Provider:
    """The family's fake, started, requiring the family's key."""
    server: UpstreamServer | AnthropicServer
    if family == "openai":
        server = UpstreamServer(context_window=window, api_key=KEYS[family])
    else:
        server = AnthropicServer(context_window=window, api_key=KEYS[family])
    await server.start()
    return Provider(family, server)
