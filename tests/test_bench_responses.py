"""bench/responses.py's Responses bodies stand for the same chat histories: every
tau-bench trajectory, as items and back through proxy/items.py, is the chat history it
came from (so the section compares the two endpoints on the same traffic)."""

from __future__ import annotations

from typing import Any

from bench.responses import as_items
from proxy.items import to_chat
from tests.support.messages import tau_trajectories


def plain(m: dict[str, Any]) -> dict[str, Any]:
    """A message without its empty fields (a result's `content: null` reads as "")."""
    out = {k: v for k, v in m.items() if v not in (None, "", [])}
    return {**out, "content": out.get("content", "")} if m["role"] == "tool" else out


def test_every_tau_trajectory_round_trips_through_items() -> None:
    trajectories = tau_trajectories()
    assert len(trajectories) == 200
    for t in trajectories:
        instructions, items = as_items(t["traj"])
        plan = to_chat({"instructions": instructions, "input": items})
        assert [plain(m) for m in plan.messages] == [plain(m) for m in t["traj"]], t["task_id"]
        assert sum(len(s) for s in plan.sources) == len(items)  # each item in one message
