"""Token counting as the provider counts, cached so a turn costs O(new messages).

OpenAI's accounting for chat models: every message costs its content plus about 4 tokens
of framing, and the reply is primed with 3 more. Tool-call ids and calls cost what their
JSON costs (an over-count for OpenAI, exact enough for Anthropic's tool_use blocks). `tools`
cost their schema. We count the
schema as compact JSON, which over-counts OpenAI's internal rendering a little: the safe
direction. Models tiktoken does not know (Claude, Llama…) use o200k_base; the route's
safety margin absorbs the difference.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import orjson
import tiktoken

MESSAGE_OVERHEAD = 4
REPLY_PRIMING = 3
IMAGE_TOKENS = 765  # a high-detail 512px tile pair; images are never evicted piecewise


def encoding_for(model: str) -> tiktoken.Encoding:
    """The model's encoding when tiktoken knows it (provider prefix stripped), else o200k."""
    name = model.split("/", 1)[-1]
    try:
        return tiktoken.encoding_for_model(name)
    except KeyError:
        return tiktoken.get_encoding("o200k_base")


class TokenCounter:
    """Counts text with one encoding; results cached by text (bounded LRU)."""

    def __init__(self, encoding: tiktoken.Encoding, cache_size: int = 200_000) -> None:
        self.encoding = encoding
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._cache_size = cache_size

    def text(self, s: str) -> int:
        if not s:
            return 0
        n = self._cache.get(s)
        if n is not None:
            return n
        n = len(self.encoding.encode_ordinary(s))
        self._cache[s] = n
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return n

    def content(self, content: Any) -> int:
        if content is None:
            return 0
        if isinstance(content, str):
            return self.text(content)
        total = 0
        for part in content:
            ptype = part.get("type")
            if ptype == "text":
                total += self.text(str(part.get("text", "")))
            elif ptype in ("image_url", "input_image"):
                total += IMAGE_TOKENS
            else:  # audio, files, refusals…: count their JSON, the safe side
                total += self.text(orjson.dumps(part).decode())
        return total

    def message(self, msg: dict[str, Any]) -> int:
        n = MESSAGE_OVERHEAD + self.content(msg.get("content"))
        name = msg.get("name")
        if isinstance(name, str):
            n += self.text(name) + 1
        call_id = msg.get("tool_call_id")
        if isinstance(call_id, str):
            n += self.text(call_id) + 1
        for call in msg.get("tool_calls") or ():
            # The whole call as JSON (id, type, name, escaped arguments): providers render
            # calls their own way, and ids such as "call_3kWx…" cost ~10 tokens each;
            # counting the JSON errs on the safe side of every rendering we have seen.
            n += 3 + self.text(orjson.dumps(call).decode())
        return n

    def tools(self, tools: Any) -> int:
        if not tools:
            return 0
        return self.text(orjson.dumps(tools).decode()) + 12
