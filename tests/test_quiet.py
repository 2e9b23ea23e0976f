"""Background work yields to requests (store/quiet.py)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from store.quiet import Quiet


def test_background_work_runs_at_once_when_no_request_is_prepared() -> None:
    quiet = Quiet(max_wait_s=5.0)
    waiting = quiet.wait()
    with pytest.raises(StopIteration):  # done on its first step: it never slept
        waiting.send(None)


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


async def test_a_forward_holds_background_work_until_released_or_its_time_is_up() -> None:
    quiet = Quiet(max_wait_s=5.0)
    release = quiet.hold(5.0)  # the upstream answers: released by the handler
    assert quiet.busy_count == 1
    release()
    release()  # a second call does nothing
    assert quiet.busy_count == 0
    loop = asyncio.get_running_loop()
    quiet.hold(0.05)  # a model that takes seconds: the background goes on after 0.05 s
    started = loop.time()
    await quiet.wait()
    assert 0.04 <= loop.time() - started < 1.0
    assert quiet.busy_count == 0


async def test_writes_wait_for_a_rest_between_requests() -> None:
    quiet = Quiet(max_wait_s=5.0)
    loop = asyncio.get_running_loop()
    with quiet.busy():
        pass  # a request was prepared just now
    started = loop.time()
    await quiet.wait(rest=0.1)
    assert 0.09 <= loop.time() - started < 1.0
    waiting = quiet.wait(rest=0.1)  # rested long enough already: done at its first step
    with pytest.raises(StopIteration):
        waiting.send(None)


async def test_a_request_within_the_rest_starts_it_again() -> None:
    quiet = Quiet(max_wait_s=5.0)
    loop = asyncio.get_running_loop()
    with quiet.busy():
        pass
    started = loop.time()
    task = asyncio.ensure_future(quiet.wait(rest=0.1))
    await asyncio.sleep(0.06)
    with quiet.busy():  # the next request, before the rest was over
        await asyncio.sleep(0.02)
    await task
    assert loop.time() - started >= 0.17  # 0.08 in requests, then a whole rest after
    assert quiet.busy_count == 0


async def test_a_steady_stream_does_not_starve_a_write_waiting_for_rest() -> None:
    quiet = Quiet(max_wait_s=0.1)
    loop = asyncio.get_running_loop()

    async def requests() -> None:
        for _ in range(40):
            with quiet.busy():
                await asyncio.sleep(0.005)

    stream = asyncio.ensure_future(requests())
    await asyncio.sleep(0.001)
    started = loop.time()
    await quiet.wait(rest=0.05)
    assert 0.09 <= loop.time() - started < 0.5
    assert not stream.done()
    await stream


def test_one_gate_serves_event_loops_in_several_threads() -> None:
    """The process has one gate; a bench or an embedding host may run more than one event
    loop (an asyncio.Event bound to one of them failed the others' jobs)."""
    quiet = Quiet(max_wait_s=2.0)
    errors: list[BaseException] = []
    done: list[float] = []

    def job() -> None:
        async def waits() -> None:
            for _ in range(20):
                await quiet.wait(rest=0.003)
                await asyncio.sleep(0.001)
        try:
            asyncio.run(waits())
            done.append(time.monotonic())
        except BaseException as exc:  # noqa: B036 - reported below, with the others
            errors.append(exc)

    threads = [threading.Thread(target=job) for _ in range(3)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):  # requests prepared meanwhile, on and off
        with quiet.busy():
            time.sleep(0.004)
        time.sleep(0.005)
    for t in threads:
        t.join(10)
    assert errors == []
    assert len(done) == 3


async def test_a_rest_function_is_asked_again_while_waiting() -> None:
    quiet = Quiet(max_wait_s=5.0)
    loop = asyncio.get_running_loop()
    needed = [30.0]
    with quiet.busy():
        pass
    started = loop.time()
    task = asyncio.ensure_future(quiet.wait(lambda: needed[0]))
    await asyncio.sleep(0.1)
    assert not task.done()
    needed[0] = 0.0  # say, the backlog outgrew its limit
    await task
    assert loop.time() - started < 1.0


async def test_through_the_app_background_work_waits_from_the_first_byte_of_a_body(
        aiohttp_client: Any, upstream: Any) -> None:
    """A cold history's body takes a while to arrive and parse: background work (a
    previous history's indexing) must not run in between (measured: the bench's cold
    1,000-message requests back to back, server overhead 102-164 ms with it, 86-102
    without). Busy from the body's first byte until the request is prepared, and while
    it goes out to the upstream (a forward of 1.5 ms took 9-27 ms after a cold history),
    but not for long while the upstream answers (`FORWARD_HOLD_S`): that time is the
    background's."""
    from store.quiet import FORWARD_HOLD_S, QUIET
    from tests.support.app import CHAT, make, settings_for

    client = await make(aiohttp_client, settings_for(upstream))
    half = asyncio.Event()
    seen: list[int] = []

    async def body() -> AsyncIterator[bytes]:
        yield b'{"model": "test-1", "messages": [{"role": "user", '
        half.set()
        await asyncio.sleep(0.1)
        seen.append(QUIET.busy_count)  # the handler is reading what came so far
        yield b'"content": "hi"}]}'

    async def answering() -> None:  # while the upstream takes its time to answer
        while not upstream.history:
            await asyncio.sleep(0.001)
        seen.append(QUIET.busy_count)  # the request has just gone out
        await asyncio.sleep(FORWARD_HOLD_S + 0.05)
        seen.append(QUIET.busy_count)

    upstream.enqueue("slow", delay=0.3)
    watch = asyncio.ensure_future(answering())
    resp = await client.post(CHAT, data=body(), headers={"Content-Type": "application/json"})
    assert resp.status == 200, await resp.text()
    await watch
    assert half.is_set() and seen == [1, 1, 0]
    assert QUIET.busy_count == 0


async def test_through_the_app_a_quick_answer_ends_the_hold_once_it_is_written(
        aiohttp_client: Any, upstream: Any) -> None:
    """An upstream that answers at once (back to back) ends the hold as its answer is
    written to the client, streamed or not: the time until the next request is the
    background's."""
    from store.quiet import QUIET
    from tests.support.app import CHAT, make, settings_for

    client = await make(aiohttp_client, settings_for(upstream))
    for stream in (False, True):
        upstream.enqueue("fast")
        resp = await client.post(CHAT, json={"model": "test-1", "stream": stream,
                                             "messages": [{"role": "user", "content": "hi"}]})
        assert resp.status == 200, await resp.text()
        assert "fast" in await resp.text()
        assert QUIET.busy_count == 0
