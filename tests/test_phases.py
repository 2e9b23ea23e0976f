"""Where a request's preparation went: `phases_ms` in its log line.

Real parts: the app over HTTP, the fake upstream, a cold history that evicts (so every
phase has work) and the turn after it.
"""

from __future__ import annotations

from typing import Any

from structlog.testing import capture_logs

from proxy.timing import Laps
from store.base import MemoryStore
from tests.support.app import CHAT, make, settings_for
from tests.support.messages import cold_history

PHASES = ["wait", "analyse", "load", "chunk", "relate", "fit", "vector", "recall", "record",
          "commit"]


def test_laps_add_up_by_name() -> None:
    laps = Laps()
    laps.lap("a")
    laps.lap("b")
    laps.lap("a")
    assert list(laps.ms) == ["a", "b"]
    assert all(v >= 0 for v in laps.ms.values())
    assert laps.rounded() == {k: round(v, 2) for k, v in laps.ms.items()}


async def test_each_request_logs_its_phases(aiohttp_client: Any, upstream: Any) -> None:
    client = await make(aiohttp_client, settings_for(upstream), MemoryStore())
    history = cold_history()
    with capture_logs() as logs:
        for messages in (history, [*history, {"role": "assistant", "content": "Done."},
                                   {"role": "user", "content": "And the next step?"}]):
            resp = await client.post(CHAT, json={"model": "test-1", "messages": messages},
                                     headers={"X-Session-ID": "phases"})
            assert resp.status == 200, await resp.text()
    lines = [e for e in logs if e["event"] == "request"]
    assert len(lines) == 2
    for line in lines:
        phases = line["phases_ms"]
        assert list(phases) == PHASES  # in the order the request went through them
        assert all(isinstance(v, float) and v >= 0 for v in phases.values())
        # the phases are the preparation; the overhead adds the body's read and the route
        assert sum(phases.values()) <= line["overhead_ms"] + 0.1 * len(PHASES)
    cold = lines[0]["phases_ms"]
    assert lines[0]["new_evictions"] > 0  # the cold history evicted: commit wrote chunks
    # its analysis, relating and fit did measurable work: the laps are timed, not zeros
    assert min(cold["analyse"], cold["relate"], cold["fit"]) > 0
