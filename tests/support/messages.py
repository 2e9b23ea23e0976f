"""Chat messages for tests: one-line builders, an agent session, real trajectories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.attachments import image_part, png, with_media

# 200 real tau-bench trajectories (MIT, sierra-research/tau-bench@59a200c; see tests/data/).
TAU = Path(__file__).resolve().parents[1] / "data" / "tau-bench-gpt-4o-airline.json"


def call(cid: str, name: str = "lookup", args: str = "{}") -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str | None = None, *calls: dict[str, Any]) -> dict[str, Any]:
    m: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        m["tool_calls"] = list(calls)
    return m


def tool(cid: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": cid, "content": text}


def filler(n_words: int, seed: str = "x") -> str:
    return " ".join(f"{seed}word{i % 50}" for i in range(n_words))


def tau_trajectories() -> list[dict[str, Any]]:
    return json.loads(TAU.read_text())  # type: ignore[no-any-return]


def long_session(rounds: int) -> list[dict[str, Any]]:
    """An agent loop that reads a 250-word file per round: long enough to evict."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."},
                                  user("Fix the build.")]
    for i in range(rounds):
        cid = f"call_{i}"
        msgs += [assistant(None, call(cid, "read_file", f'{{"path": "src/m{i}.py"}}')),
                 tool(cid, filler(250, f"m{i}")), assistant(f"Read m{i}."), user(f"next {i}")]
    return msgs


def cold_history(n: int = 6) -> list[dict[str, Any]]:
    """Several real tau-bench trajectories back to back, with an image and a failed
    command: a history a proxy sees whole for the first time."""
    msgs: list[dict[str, Any]] = []
    for t in tau_trajectories()[:n]:
        msgs += [m for m in t["traj"] if m["role"] != "system" or not msgs]
    msgs += [with_media("What does this chart show?", image_part(png(640, 480))),
             assistant(None, call("sh1", "shell", '{"cmd": "make"}')),
             tool("sh1", "Traceback (most recent call last):\n  File 'x.py'\nValueError"),
             user("Why did that fail?")]
    return msgs
