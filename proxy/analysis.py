"""Per-message facts that never change for the same message: cached by content hash.

Agent loops resend the whole history on every call, so everything here is computed once
per distinct message and looked up afterwards; a turn costs O(new messages) plus one
hash per message.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any

import orjson

from proxy.tokens import TokenCounter

_LOG_LINE = re.compile(
    r"^\s*(?:\[?\d{4}-\d\d-\d\d|\[?\d\d:\d\d:\d\d|(?:DEBUG|INFO|WARN|WARNING|ERROR|TRACE)\b)"
)
WORD = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-./:@#]{2,}")  # a rare token's candidates
STRIP = ".,:;/-#@"


_DIGIT = re.compile(r"\d")
_RARE: dict[str, str | None] = {}  # word -> its rare form, or None (agent text repeats)


def rare_tokens(text: str) -> frozenset[str]:
    """Ids, paths and numbers: the tokens whose reuse marks a real reference. A word's
    verdict is memoised: a cold 1,000-message history spent most of its analysis here."""
    out = set()
    cache = _RARE
    for w in WORD.findall(text):
        r = cache.get(w, "")
        if r == "":
            s = w.strip(STRIP)
            r = s if len(s) >= 4 and (_DIGIT.search(s) or ("/" in s and "." in s)) else None
            if len(cache) >= 200_000:
                cache.clear()
            cache[w] = r
        if r is not None:
            out.add(r)
    return frozenset(out)


_ERROR_HEAD = ("error", "errors", "exception", "traceback", "fatal", "failed", "failure",
               "failures")
# A report that opens with an error word but counts zero of everything on that line
# ("Failed tests: 0", "Errors: 0, failures: 0", "failures = 0") is a success.
_COUNT = re.compile(r"[:=]\s*(\d+(?:[.,]\d+)?)")
_ERROR_TEXT = ("traceback (most recent call last)",)
# What a failing command prints on stderr ("bash: x.sh: Permission denied"): it counts on
# the output's first or last line, at its end (or anywhere in a short output), not inside
# a file, log or search result that a successful call printed.
_ERROR_LINE = ("command not found", "no such file or directory", "permission denied")
_ERROR_REST = re.compile(r"\"error\"\s*:\s*[\"{]|\bexit (?:code|status):? ?[1-9]")


def looks_failed(text: str) -> bool:
    """A failed tool call's output: it starts with error/exception/traceback/fatal/failed/
    failure (unless that first line counts zero of them), its first 2 KB hold a traceback
    header, an `"error": {` / `"error": "` field or a non-zero exit code, or its first or
    last line ends with "command not found", "No such file or directory" or "Permission
    denied" (anywhere in an output of three lines or less); case-insensitive. Substring
    checks on the lower-cased head: the one regex alternation with IGNORECASE it replaces
    cost ~0.3 ms per tool result."""
    head = text[:2000].lower()
    first = head.lstrip()
    for word in _ERROR_HEAD:
        nxt = first[len(word):len(word) + 1]
        if first.startswith(word) and not nxt.isalnum() and nxt != "_":
            counts = _COUNT.findall(first.split("\n", 1)[0])
            if not counts or any(float(c.replace(",", ".")) for c in counts):
                return True
            break
    if any(t in head for t in _ERROR_TEXT):
        return True
    # The regex only where its literal parts occur: run on every 2 KB head it cost ~12 ms
    # of a cold 1,000-message request, for the same verdicts.
    if ('"error"' in head or "exit " in head) and _ERROR_REST.search(head) is not None:
        return True
    short = len(text) <= 300 and text.count("\n") < 3
    for line in (first.split("\n", 1)[0], text[-300:].rstrip().rsplit("\n", 1)[-1].lower()):
        end = line.rstrip(" .!")
        if any(t in line and (short or end.endswith(t)) for t in _ERROR_LINE):
            return True
    return False


def text_of(msg: dict[str, Any]) -> str:
    """The message's plain text: content parts, then tool-call names and arguments."""
    content = msg.get("content")
    if isinstance(content, str):
        parts = [content]
    elif isinstance(content, list):
        parts = [str(p.get("text", "")) for p in content if isinstance(p, dict)]
    else:
        parts = []
    calls = [*(msg.get("tool_calls") or ()), *([msg["function_call"]] if isinstance(
        msg.get("function_call"), dict) else ())]
    for call in calls:
        name, args = call_of(call)
        parts.append(f"{name}({args})")
    return "\n".join(p for p in parts if p)


def call_of(call: Any) -> tuple[str, str]:
    """(name, arguments) of a function call, a custom tool call (its free-form `input`) or
    a legacy `function_call` (already the inner object)."""
    if not isinstance(call, dict):
        return "", ""
    inner = call.get("custom") if call.get("type") == "custom" else call.get("function", call)
    if not isinstance(inner, dict):
        return "", ""
    args = inner.get("input") if call.get("type") == "custom" else inner.get("arguments")
    return str(inner.get("name", "")), str(args if args is not None else "")


@dataclass(frozen=True, slots=True)
class MsgInfo:
    fp: str  # content fingerprint: identical messages share it
    tokens: int
    content_tokens: int  # the content alone (a stub replaces only this)
    text: str
    rare: frozenset[str]
    is_error: bool
    log_like: bool
    # False: `content_tokens` is estimated from the content's length (`estimate`); the
    # framing in `tokens` is counted. The fit counts it before the message is sent.
    exact: bool = True


# What `measure` finds in a message: (tokens, content_tokens, rare, is_error, log_like,
# exact).
Facts = tuple[int, int, frozenset[str], bool, bool, bool]

# Characters per o200k token on agent traffic, rounded down so an estimate tends high:
# 3.1 on the generated 1,000-message histories (JSON, logs and prose), 3.3 on tau-bench;
# English prose alone ~4.5 (estimated x1.5), dense JSON records ~2.8 (x0.95).
CHARS_PER_TOKEN = 3.0
# Text outside ASCII: Chinese and Japanese run ~1.3 characters a token (~3.9-4.1 UTF-8
# bytes), Russian ~3.7 (~6.8 bytes). A character's bytes past the first, at this many a
# token, cover both from above (`estimated`).
EXTRA_BYTES_PER_TOKEN = 2.5


def fingerprint(msg: dict[str, Any]) -> str:
    return hashlib.blake2b(orjson.dumps(msg, option=orjson.OPT_SORT_KEYS),
                           digest_size=8).hexdigest()


def measure(counter: TokenCounter, msg: dict[str, Any], text: str,
            estimate: bool = False) -> Facts:
    """The costly part of a message's info (tokens, rare identifiers, failure checks): a
    pure function of the message, so a worker process computes the same (proxy/coldpool.py).
    With `estimate`, a plain-text content (the message's whole text: no calls, no parts)
    is not tokenized but estimated from its length, `CHARS_PER_TOKEN`; its framing is
    counted. A history sent whole for the first time is mostly evicted: the fit counts
    what it keeps (`Fitter.fit`), the rest never costs a tokenization."""
    is_tool = msg.get("role") in ("tool", "function")
    found = (rare_tokens(text), is_tool and looks_failed(text),
             is_tool and _looks_like_log(text))
    content = msg.get("content")
    if estimate and isinstance(content, str) and content == text:
        framing = counter.message({**msg, "content": None})
        guess = estimated(counter, content)
        return (framing + guess, guess, *found, False)
    return (counter.message(msg), counter.content(content), *found, True)


def estimated(counter: TokenCounter, text: str) -> int:
    """An estimate of `counter.text(text)` from its length alone: characters at
    CHARS_PER_TOKEN, or for text in a script of multi-byte characters their bytes past the
    first at EXTRA_BYTES_PER_TOKEN, whichever is more (tests/test_estimates.py)."""
    n = len(text) / CHARS_PER_TOKEN
    if not text.isascii():
        n = max(n, (len(text.encode("utf-8", "surrogatepass")) - len(text))
                / EXTRA_BYTES_PER_TOKEN)
    return math.ceil(n * counter.factor)


def counted(counter: TokenCounter, info: MsgInfo) -> MsgInfo:
    """`info` with its content counted, if it was estimated (`measure`)."""
    if info.exact:
        return info
    content = counter.text(info.text)
    return replace(info, tokens=info.tokens - info.content_tokens + content,
                   content_tokens=content, exact=True)


class MessageAnalyzer:
    """Fingerprints, counts and inspects messages once; an LRU cache bounded in entries
    and in the characters of the messages' text it keeps."""

    def __init__(self, counter: TokenCounter, cache_size: int = 100_000,
                 cache_chars: int = 64_000_000) -> None:
        self.counter = counter
        self._cache: OrderedDict[str, MsgInfo] = OrderedDict()
        self._cache_size = cache_size
        self._cache_chars = cache_chars  # the infos' texts, in all
        self._chars = 0

    def info(self, msg: dict[str, Any]) -> MsgInfo:
        fp = fingerprint(msg)
        hit = self._cache.get(fp)
        if hit is not None:
            return hit
        text = text_of(msg)
        return self.put(fp, text, measure(self.counter, msg, text))

    def cached(self, fp: str) -> MsgInfo | None:
        return self._cache.get(fp)

    def update(self, info: MsgInfo) -> None:
        """`info` in place of the cached one with its fingerprint (its count replacing an
        estimate: proxy/recount.py); not cached any more: nothing."""
        if info.fp in self._cache:
            self._cache[info.fp] = info

    def put(self, fp: str, text: str, facts: Facts) -> MsgInfo:
        """Keep what `measure` found for the message with this fingerprint and text."""
        info = MsgInfo(fp, facts[0], facts[1], text, *facts[2:])
        self._cache[fp] = info
        self._chars += len(text)
        while len(self._cache) > self._cache_size or self._chars > self._cache_chars:
            self._chars -= len(self._cache.popitem(last=False)[1].text)
        return info


def _looks_like_log(text: str) -> bool:
    lines = text.splitlines()
    if len(lines) < 40:
        return False
    hits = sum(1 for ln in lines[:400] if _LOG_LINE.match(ln))
    return hits * 2 >= min(len(lines), 400)
