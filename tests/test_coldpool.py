"""A cold history measured half in a worker process gives what one process gives.

Real parts: the worker is a real spawned process, the messages real tau-bench agent
traffic (tool calls, failed calls, JSON records) plus an image and a failing shell output.
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import pytest
from structlog.testing import capture_logs

from proxy.analysis import MessageAnalyzer, MsgInfo
from proxy.coldpool import ColdPool
from proxy.keys import PIPELINE
from proxy.prefix import Prefix, infos_of
from proxy.tokens import TokenCounter, encoding_for
from store.base import MemoryStore
from tests.support.app import CHAT, make, settings_for
from tests.support.messages import cold_history


def analyzer(model: str = "gpt-4o") -> MessageAnalyzer:
    return MessageAnalyzer(TokenCounter(encoding_for(model), model=model))


async def here(msgs: list[dict[str, Any]], model: str = "gpt-4o",
               prev: Prefix | None = None) -> tuple[list[MsgInfo], int]:
    """The infos this process alone gives a cold history (contents estimated)."""
    return await ColdPool(0, min_bytes=0).infos(analyzer(model), msgs, prev)


async def started(pool: ColdPool) -> ColdPool:
    pool.start()
    for _ in range(600):
        if pool.ready:
            return pool
        await asyncio.sleep(0.05)
    raise AssertionError("the cold pool's worker did not start in 30 s")


async def test_a_worker_measures_what_this_process_measures() -> None:
    msgs = cold_history()
    pool = await started(ColdPool(1, min_bytes=0))
    try:
        for model in ("gpt-4o", "anthropic/claude-3-5-sonnet"):  # the tokenizer's factor too
            mine = await here(msgs, model)
            theirs = await pool.infos(analyzer(model), msgs, None)
            assert theirs == mine
        assert pool.offloaded >= len(msgs) // 2 and pool.failures == 0
        # the previous request's messages are taken from it, not measured again
        a = analyzer()
        first, _ = await pool.infos(a, msgs[:-4], None)
        before = pool.offloaded
        infos, matched = await pool.infos(a, msgs, Prefix(msgs[:-4], first))
        assert matched == len(msgs) - 4 and infos == (await here(msgs))[0]
        assert pool.offloaded - before <= 4
    finally:
        pool.close()


async def test_below_min_bytes_or_before_the_worker_is_up_nothing_leaves() -> None:
    msgs = cold_history(2)
    pool = ColdPool(1, min_bytes=10**9)
    try:
        assert not pool.ready
        infos, _ = await pool.infos(analyzer(), msgs, None)  # starts it, measures here
        assert infos == infos_of(analyzer(), msgs, None)[0]  # counted: not cold
        assert all(i.exact for i in infos)
        await started(pool)
        await pool.infos(analyzer(), msgs, None)
        assert pool.offloaded == 0
    finally:
        pool.close()


async def test_two_cold_histories_at_once_the_second_is_measured_here() -> None:
    """One job out at a time: a burst of cold histories never queues behind the worker
    (a queue would only add waiting, and could time out as a hung worker)."""
    a, b = cold_history(3), cold_history(6)[-60:]
    pool = await started(ColdPool(1, min_bytes=0))
    try:
        await pool.infos(analyzer(), a, None)
        alone = pool.offloaded  # what the first sends when nothing else is out
        got = await asyncio.gather(pool.infos(analyzer(), a, None),
                                   pool.infos(analyzer(), b, None))
        assert [g[0] for g in got] == [(await here(m))[0] for m in (a, b)]
        assert alone > 0 and pool.offloaded == 2 * alone  # none of the second's
        assert not pool.busy and pool.failures == 0
    finally:
        pool.close()


async def test_a_dead_worker_costs_its_request_nothing() -> None:
    msgs = cold_history()
    want = (await here(msgs))[0]
    pool = await started(ColdPool(1, min_bytes=0))
    try:
        for child in pool.processes():
            os.kill(child.pid or 0, signal.SIGKILL)
        with capture_logs() as logs:
            got: list[MsgInfo] = (await pool.infos(analyzer(), msgs, None))[0]
        assert got == want
        assert pool.failures == 1
        assert [e["event"] for e in logs] == ["cold_pool_failed"]
        await started(pool)  # a new worker takes the next cold history
        assert (await pool.infos(analyzer(), msgs, None))[0] == want
        assert pool.offloaded > 0
    finally:
        pool.close()


async def test_a_hung_worker_is_killed_and_its_half_measured_here(monkeypatch: Any) -> None:
    from proxy import coldpool

    monkeypatch.setattr(coldpool, "TIMEOUT_S", 0.5)
    msgs = cold_history()
    pool = await started(ColdPool(1, min_bytes=0))
    try:
        stopped = pool.processes()
        assert stopped
        for child in stopped:
            os.kill(child.pid or 0, signal.SIGSTOP)
        with capture_logs() as logs:
            got = (await pool.infos(analyzer(), msgs, None))[0]
        assert got == (await here(msgs))[0]
        assert [(e["event"], e["error"]) for e in logs] == [("cold_pool_failed", "TimeoutError")]
        for child in stopped:
            child.join(5)
            if child.exitcode is None:  # reaped by another waiter (the executor's thread)
                with pytest.raises(ProcessLookupError):  # gone all the same, not hung
                    os.kill(child.pid or 0, 0)
            else:
                assert child.exitcode == -signal.SIGKILL
    finally:
        pool.close()


async def test_through_the_app_the_forwarded_request_is_the_same(
        aiohttp_client: Any, upstream: Any) -> None:
    """A whole history sent cold to a server with a worker and to one without: the same
    body reaches the upstream, and the same decisions are logged."""
    msgs = cold_history()
    bodies, logs = [], []
    for workers in (0, 1):
        settings = settings_for(upstream, recall={"enabled": True})
        settings.server.cold_workers = workers
        store = MemoryStore()
        client = await make(aiohttp_client, settings, store)
        pool = client.app[PIPELINE].cold
        pool.min_bytes = 0  # cold either way: contents estimated, what is kept counted
        if workers:
            await started(pool)
        resp = await client.post(CHAT, json={"model": "test-1", "messages": msgs},
                                 headers={"X-Session-ID": "cold"})
        assert resp.status == 200, await resp.text()
        assert resp.headers["X-Ctxwarden-Evicted"] != "0"
        assert (pool.offloaded > 0) == bool(workers)
        metrics = await (await client.get("/metrics")).text()
        assert f"ctxwarden_cold_offloaded_messages_total {float(pool.offloaded)}" in metrics
        assert "ctxwarden_cold_worker_failures_total 0.0" in metrics
        bodies.append(upstream.history[-1])
        logs.append([(e.action, e.chunk_id, e.tokens, e.reason)
                     for e in await store.events("default", "cold")])
    assert bodies[0] == bodies[1]
    assert logs[0] == logs[1] and logs[0]


_OWNER = """
import asyncio, sys
from proxy.coldpool import ColdPool
async def main():
    pool = ColdPool(1)
    pool.start()
    while not pool.ready:
        await asyncio.sleep(0.05)
    print(pool.processes()[0].pid, flush=True)
    await asyncio.sleep(60)
if __name__ == "__main__":
    asyncio.run(main())
"""


def test_a_worker_does_not_outlive_a_sigkilled_server() -> None:
    """An idle pool worker waits on its queue: orphaned by a SIGKILL it would wait forever
    (the crash tests left them behind before `_follow_parent`)."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    owner = subprocess.Popen([sys.executable, "-c", _OWNER], stdout=subprocess.PIPE,
                             text=True, cwd=Path(__file__).resolve().parents[1])
    try:
        assert owner.stdout is not None
        pid = int(owner.stdout.readline())
    finally:
        owner.kill()
        owner.wait()
        if owner.stdout is not None:
            owner.stdout.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    raise AssertionError(f"the pool's worker {pid} outlived its SIGKILLed server by 10 s")
