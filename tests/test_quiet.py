"""Background work yields to requests (store/quiet.py)."""

from __future__ import annotations

import asyncio

from store.quiet import Quiet


async def test_background_work_runs_at_once_when_no_request_is_prepared() -> None:
    quiet = Quiet(max_wait_s=5.0)
    async with asyncio.timeout(0.5):
        await quiet.wait()


async def test_background_work_waits_for_the_request_being_prepared() -> None:
    quiet = Quiet(max_wait_s=5.0)
    order: list[str] = []

    async def job() -> None:
        await quiet.wait()
        order.append("job")

    with quiet.busy():
        task = asyncio.ensure_future(job())
        await asyncio.sleep(0.05)
        order.append("request done")
    await task
    assert order == ["request done", "job"]
    assert quiet.busy_count == 0


async def test_a_steady_stream_of_requests_does_not_starve_it() -> None:
    quiet = Quiet(max_wait_s=0.1)
    with quiet.busy():
        loop = asyncio.get_running_loop()
        started = loop.time()
        await quiet.wait()
        assert 0.09 <= loop.time() - started < 1.0
        assert quiet.busy_count == 1
