"""One provider family behind one face, so an end-to-end test runs against each the same way.

- `openai`: the fake OpenAI (`openai_server.py`), reached by the direct transport.
- `anthropic`: the fake Anthropic (`anthropic_server.py`), reached through LiteLLM's
  `anthropic/claude-sonnet-4-5` transform, so what it checks is what Anthropic would get.
- `gemini`: the fake Gemini (`gemini_server.py`), through LiteLLM's `gemini/gemini-2.5-flash`
  transform. Gemini's wire has no call ids (LiteLLM makes them up), so a call is known there
  by its name and arguments, and a response by its position after the call (`call_key`).

Each server checks its key and refuses what its provider refuses; `Provider` reads what it
received in that provider's own shape (tool pairs, the last message's text).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from tests.support.anthropic_server import AnthropicServer
from tests.support.gemini_server import GeminiServer
from tests.support.openai_server import Received, Reply, UpstreamServer

FAMILIES = ("openai", "anthropic", "gemini")
KEYS = {"openai": "sk-up-openai-0001", "anthropic": "sk-ant-api03-test-0001",
        "gemini": "AIzaSyTest-gemini-0001"}
MODELS = {"openai": "openai/gpt-4o", "anthropic": "anthropic/claude-sonnet-4-5",
          "gemini": "gemini/gemini-2.5-flash"}
Server = UpstreamServer | AnthropicServer | GeminiServer


@dataclass
class Provider:
    family: str
    server: Server

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
        if self.family == "gemini":
            return _gemini_pairs(body)
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

    def call_key(self, cid: str, name: str, arguments: str) -> str:
        """How `tool_pairs` names the call the client knows as `cid`."""
        if self.family != "gemini":
            return cid
        return name + orjson.dumps(orjson.loads(arguments), option=orjson.OPT_SORT_KEYS).decode()

    def last_text(self, body: dict[str, Any]) -> str:
        """All text of the last message sent upstream (strings, blocks or Gemini's parts)."""
        if self.family == "gemini":
            return "\n".join(p["text"] for p in body["contents"][-1]["parts"] if "text" in p)
        return text(body["messages"][-1]["content"])

    def system_text(self, body: dict[str, Any]) -> str:
        """The system prompt sent upstream, wherever the provider wants it."""
        if self.family == "gemini":
            return "\n".join(p.get("text", "") for p in body["system_instruction"]["parts"])
        system = body.get("system") or body["messages"][0]["content"]
        return text(system)

    def first_user_text(self, body: dict[str, Any]) -> str:
        if self.family == "gemini":
            return "\n".join(p.get("text", "") for p in body["contents"][0]["parts"])
        return text(next(m for m in body["messages"] if m["role"] == "user")["content"])

    def streamed(self, sent: Received) -> bool:
        """Whether a request asked for a stream: Gemini says so in the URL, not the body."""
        if self.family == "gemini":
            return sent.path.endswith(":streamGenerateContent?alt=sse")
        return sent.body.get("stream") is True

    def enqueue_overloaded(self) -> None:
        """The provider's own 'overloaded, come back later' answer."""
        if self.family == "gemini":  # 503 UNAVAILABLE: "The model is overloaded. ..."
            self.server.enqueue_error(503)
        else:
            self.server.enqueue_error(529, "Overloaded", type="overloaded_error")


def _gemini_pairs(body: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """Gemini's calls (name + arguments) and each response's text, paired by position."""
    calls: list[str] = []
    results: dict[str, str] = {}
    asked: list[str] = []
    for turn in body["contents"]:
        answers = [p["function_response"] for p in turn["parts"] if "function_response" in p]
        for key, answer in zip(asked, answers, strict=False):
            content = answer["response"].get("content")
            results[key] = content if isinstance(content, str) else orjson.dumps(
                answer["response"]).decode()
        asked = [p["function_call"]["name"] + orjson.dumps(
            p["function_call"].get("args") or {}, option=orjson.OPT_SORT_KEYS).decode()
            for p in turn["parts"] if "function_call" in p]
        calls += asked
    return calls, results


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
    server: Server
    if family == "openai":
        server = UpstreamServer(context_window=window, api_key=KEYS[family])
    elif family == "anthropic":
        server = AnthropicServer(context_window=window, api_key=KEYS[family])
    else:
        server = GeminiServer(context_window=window, api_key=KEYS[family])
    await server.start()
    return Provider(family, server)
