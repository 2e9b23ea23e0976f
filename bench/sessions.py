"""Generated agent sessions: a coding agent reading files, running tools, failing, retrying.

Deterministic for a seed. Each session grows turn by turn to `target_tokens` of history;
some tool outputs hold a *needle* (a unique fact) that a later user message asks about.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

WORDS = ("request handler cache session token module config parser builder queue worker "
         "schema record index batch stream buffer client server policy window budget chunk "
         "result value error retry limit offset cursor field table column vector").split()
TOOLS = ("read_file", "run_tests", "grep", "list_dir", "http_get")


@dataclass
class Needle:
    fact: str  # the sentence holding it
    key: str  # the unique token a correct answer must contain
    question: str
    turn: int  # index of the message holding it


@dataclass
class Session:
    messages: list[dict[str, Any]]
    needles: list[Needle] = field(default_factory=list)


def _prose(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _code(rng: random.Random, lines: int, tag: str) -> str:
    out = []
    for i in range(lines):
        a, b = rng.choice(WORDS), rng.choice(WORDS)
        out.append(f"def {a}_{b}_{tag}_{i}(x):\n    return {a}(x) + {rng.randint(0, 999)}")
    return "\n".join(out)


def generate(rng: random.Random, target_tokens: int, needle_every: int = 6) -> Session:
    """One session of roughly `target_tokens` (4 chars ≈ 1 token) with needles."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. " + _prose(rng, 200)},
        {"role": "user", "content": "Refactor the service and keep the tests green. "
                                    + _prose(rng, 30)},
    ]
    needles: list[Needle] = []
    size, k = 0, 0
    reads: list[str] = []
    while size < target_tokens * 4:
        k += 1
        name = rng.choice(TOOLS)
        path = rng.choice(reads) if reads and rng.random() < 0.15 else f"src/mod_{k}.py"
        reads.append(path)
        cid = f"call_{k}"
        msgs.append({"role": "assistant", "content": None, "tool_calls": [{
            "id": cid, "type": "function",
            "function": {"name": name, "arguments": f'{{"path": "{path}"}}'}}]})
        if rng.random() < 0.15:
            out = f"Error: {name} failed\nTraceback (most recent call last):\n" + _prose(rng, 60)
        else:
            out = _code(rng, rng.randint(8, 60), str(k))
            if k % needle_every == 0:
                key = f"{rng.choice(WORDS).upper()}-{rng.randint(10000, 99999)}"
                fact = f"# deployment ticket for {path} is {key} (owner: team {k})"
                lines = out.split("\n")
                lines.insert(rng.randint(0, len(lines)), fact)
                out = "\n".join(lines)
                needles.append(Needle(fact, key, f"What is the deployment ticket for {path}?",
                                      len(msgs)))
        msgs.append({"role": "tool", "tool_call_id": cid, "content": out})
        size += len(out) + 60
        if rng.random() < 0.3:
            msgs.append({"role": "assistant", "content": _prose(rng, 40)})
            msgs.append({"role": "user", "content": "Continue. " + _prose(rng, 10)})
    return Session(msgs, needles)


def requests_of(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Every history after which the agent called the model."""
    return [messages[:i] for i in range(2, len(messages) + 1)
            if i == len(messages) or messages[i]["role"] == "assistant"]
