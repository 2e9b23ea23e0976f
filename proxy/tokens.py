"""Token counting as the provider counts, cached so a turn costs O(new messages).

OpenAI's accounting for chat models: every message costs its content plus about 4 tokens
of framing, and the reply is primed with 3 more. Tool calls (function and custom), a
legacy `function_call` and any other field a message carries cost what their JSON costs
(an over-count for OpenAI, exact enough for Anthropic's tool_use blocks). The request's
extras (`tools`, legacy `functions`, a `response_format` schema, a named `tool_choice`)
cost their compact JSON, which over-counts OpenAI's internal rendering a little: the safe
direction. Images, files and audio cost what the provider charges (`proxy.media`).

Text is counted with the model's tiktoken encoding when tiktoken knows the model. Other
families have no tokenizer offline, so o200k_base is scaled by a per-family factor (the
route's safety margin, 5 % by default, comes on top); figures in docs/design-notes.md:
- Claude 3+: ×1.30. Anthropic says its published (Claude 2) tokenizer does not match
  Claude 3 and later; measured on the tau-bench airline trajectories, that old tokenizer
  counts 1.037 × o200k (prose 1.039, tool-call JSON 1.093, tool-output JSON 1.024) and
  runs 17× slower, so it is not used. Measurements published with Anthropic's
  token-counting API put Claude 3.5+ at 16 % (English) to 30 % (code) above GPT-4o's
  o200k; agent traffic is JSON and code, so 1.30. With tools, Anthropic adds its
  documented tool-use system prompt (346 tokens).
- Llama 3+, Qwen, Gemma, DeepSeek, Gemini (large BPE/sentencepiece vocabularies, ~128k+):
  ×1.10; measured cl100k_base (what Llama 3's vocabulary extends) at 1.002 × o200k.
- Llama 2, Mistral/Mixtral, Phi and other small-vocabulary families: ×1.35; a 30k
  WordPiece vocabulary measured 1.64 × o200k on the same text (an upper bound: it splits
  every punctuation mark, which sentencepiece does not).
- Any other model name (a local "demo", "mock-1"): o200k, ×1.0.
"""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from typing import Any

import orjson
import tiktoken

from proxy.media import MediaRules

MESSAGE_OVERHEAD = 4
REPLY_PRIMING = 3
EXTRAS_OVERHEAD = 12  # per schema block (tools, functions, response_format)
ANTHROPIC_TOOL_PROMPT = 346  # Anthropic's tool-use system prompt (pricing docs, Claude 3.5+)
_FRAMED = frozenset({"role", "content", "name", "tool_call_id", "tool_calls"})
_FAMILIES = (  # (pattern on the lower-cased model name, family, factor)
    (re.compile(r"claude|anthropic"), "anthropic", 1.30),
    (re.compile(r"llama-?2|mistral|mixtral|codestral|phi-?\d|falcon|vicuna"), "other", 1.35),
    (re.compile(r"llama|qwen|gemma|deepseek|gemini"), "other", 1.10),
)


def encoding_for(model: str) -> tiktoken.Encoding:
    """The model's encoding when tiktoken knows it (provider prefix stripped), else o200k."""
    name = model.split("/", 1)[-1]
    try:
        return tiktoken.encoding_for_model(name)
    except KeyError:
        return tiktoken.get_encoding("o200k_base")


def own_tokenizer(model: str) -> bool:
    """tiktoken has this model's own encoding: counts are the provider's, or over them."""
    try:
        tiktoken.encoding_name_for_model(model.lower().split("/", 1)[-1])
    except KeyError:
        return False
    return True


def family_of(model: str) -> tuple[str, float]:
    """(family, factor on o200k counts) of a model name; see the module docstring."""
    name = model.lower()
    if own_tokenizer(name):
        return "openai", 1.0
    for rx, family, factor in _FAMILIES:
        if rx.search(name):
            return family, factor
    return "openai", 1.0


def _json(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()


class TokenCounter:
    """Counts text with one encoding (scaled by the family's factor) and media by the
    family's rules; text counts cached by text (an LRU bounded in entries and in the
    characters of the texts it keeps: agent tool outputs run to tens of KB each)."""

    def __init__(self, encoding: tiktoken.Encoding, cache_size: int = 200_000,
                 model: str = "", cache_chars: int = 64_000_000) -> None:
        self.encoding = encoding
        self.model = model
        self.family, self.factor = family_of(model)
        self.exact = own_tokenizer(model)  # counts are the provider's or over them
        self.media = MediaRules(self.family, model.lower())
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._cache_size = cache_size
        self._cache_chars = cache_chars  # the texts it keeps as keys, in all
        self._chars = 0
        self._last: tuple[Any, int] = (None, 0)  # the last list content counted

    def text(self, s: str) -> int:
        if not s:
            return 0
        n = self._cache.get(s)
        if n is not None:
            return n
        n = len(self.encoding.encode_ordinary(s))
        if self.factor != 1.0:
            n = math.ceil(n * self.factor)
        self._cache[s] = n
        self._chars += len(s)
        while len(self._cache) > self._cache_size or self._chars > self._cache_chars:
            self._chars -= len(self._cache.popitem(last=False)[0])
        return n

    def content(self, content: Any) -> int:
        if content is None:
            return 0
        if isinstance(content, str):
            return self.text(content)
        if content is self._last[0]:  # message() then content() of one message: once
            return self._last[1]
        total = 0
        for part in content:
            total += self.part(part)
        self._last = (content, total)
        return total

    def part(self, part: Any) -> int:
        if not isinstance(part, dict):
            return self.text(_json(part))
        ptype = part.get("type")
        if ptype == "text":
            return self.text(str(part.get("text", "")))
        if ptype == "refusal":
            return self.text(str(part.get("refusal", "")))
        if ptype in ("image_url", "input_image"):
            return self.media.image_part(part.get(ptype, part.get("image_url")))
        if ptype == "file":
            return self.media.file_part(part.get("file"))
        if ptype == "input_audio":
            return self.media.audio_part(part.get("input_audio"))
        return self.text(_json(part))  # anything else: its JSON, the safe side

    def message(self, msg: dict[str, Any]) -> int:
        n = MESSAGE_OVERHEAD + self.content(msg.get("content"))
        name = msg.get("name")
        if isinstance(name, str):
            n += self.text(name) + 1
        call_id = msg.get("tool_call_id")
        if isinstance(call_id, str):
            n += self.text(call_id) + 1
        calls = msg.get("tool_calls")
        for call in calls if isinstance(calls, list) else ():
            # The whole call as JSON (id, type, name, escaped arguments or custom input):
            # providers render calls their own way, and ids such as "call_3kWx…" cost ~10
            # tokens each; counting the JSON errs on the safe side of every rendering.
            n += 3 + self.text(_json(call))
        for key, value in msg.items():  # function_call, audio, refusal, vendor fields…
            if key not in _FRAMED and value:  # SDK echoes carry "annotations": [], nulls
                n += 3 + self.text(value if isinstance(value, str) else _json(value))
        return n

    def tools(self, tools: Any) -> int:
        if not tools:
            return 0
        n = self.text(_json(tools)) + EXTRAS_OVERHEAD
        return n + (ANTHROPIC_TOOL_PROMPT if self.family == "anthropic" else 0)

    def request_extras(self, body: dict[str, Any]) -> int:
        """What the request costs besides its messages: tool and function schemas, a
        structured-output schema, a named tool choice."""
        n = self.tools(body.get("tools"))
        if body.get("functions"):
            n += self.text(_json(body["functions"])) + EXTRAS_OVERHEAD
        fmt = body.get("response_format")
        if isinstance(fmt, dict) and fmt.get("type") not in (None, "text"):
            n += self.text(_json(fmt)) + EXTRAS_OVERHEAD
        for key in ("tool_choice", "function_call"):
            if isinstance(body.get(key), dict):
                n += self.text(_json(body[key]))
        return n
