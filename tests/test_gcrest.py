"""Full garbage collections wait for the proxy to rest, and none runs while a cold history
is prepared (proxy/gcrest.py)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import pytest

from proxy.gcrest import COLD, Pause, RestingCollector
from store.base import Event, EvictedChunk, MemoryStore
from store.quiet import Quiet
from tests.support.app import CHAT, ClientFactory, config, make
from tests.support.messages import cold_history, long_session
from tests.support.openai_server import UpstreamServer


@pytest.fixture
def full_collections() -> Iterator[list[int]]:
    """The number of objects each full collection found, as it happens."""
    seen: list[int] = []

    def callback(phase: str, info: dict[str, Any]) -> None:
        if phase == "stop" and info["generation"] == 2:
            seen.append(info["collected"])

    gc.callbacks.append(callback)
    yield seen
    gc.callbacks.remove(callback)


@pytest.fixture
async def quiet() -> AsyncIterator[Quiet]:
    yield Quiet()


def survivors(n: int = 60_000) -> list[list[int]]:
    """What a cold request makes: many containers that outlive young collections, so
    generation 1 is collected again and again (CPython's cue for a full collection)."""
    return [[i] for i in range(n)]


async def test_no_full_collection_while_a_request_is_prepared(
        full_collections: list[int], quiet: Quiet) -> None:
    before = gc.get_threshold()
    collector = RestingCollector(quiet, rest_s=0.05, poll_s=0.01, every=2)
    collector.start()
    try:
        with quiet.busy():
            kept = survivors()
            assert gc.get_count()[2] > 2  # CPython would have run one by now
            await asyncio.sleep(0.2)  # the collector looks, and waits
            assert full_collections == [] and collector.at_rest == 0
        del kept
        async with asyncio.timeout(5):
            while not full_collections:
                await asyncio.sleep(0.01)
        assert collector.at_rest == 1 and collector.forced == 0
        assert gc.get_count()[2] == 0
    finally:
        await collector.stop()
    assert gc.get_threshold() == before  # the automatic collection is back


async def test_a_steady_stream_of_requests_still_gets_its_full_collection(
        full_collections: list[int], quiet: Quiet) -> None:
    collector = RestingCollector(quiet, rest_s=0.05, max_defer_s=0.1, poll_s=0.01, every=2)
    collector.start()
    try:
        with quiet.busy():  # never at rest
            kept = survivors()
            async with asyncio.timeout(5):
                while not full_collections:
                    await asyncio.sleep(0.01)
            assert collector.forced == 1 and collector.at_rest == 0
            del kept
    finally:
        await collector.stop()


async def test_a_large_heap_is_walked_rarely(full_collections: list[int], quiet: Quiet
                                             ) -> None:
    """After a full collection, the next waits `duty` times as long as it took (here so
    long that none may follow within the test)."""
    collector = RestingCollector(quiet, rest_s=0.0, poll_s=0.01, every=0, duty=1e6)
    collector.start()
    try:
        async with asyncio.timeout(5):
            while not full_collections:
                survivors(2_000)  # generation 1 is collected now and then
                await asyncio.sleep(0.01)
        seen = len(full_collections)
        async with asyncio.timeout(5):
            while gc.get_count()[2] == 0:  # until the next one is due
                survivors(2_000)
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # the collector looks, and waits
        assert len(full_collections) == seen and collector.at_rest == seen
    finally:
        await collector.stop()


def test_a_pause_holds_collection_off_until_the_last_hold_ends() -> None:
    pause = Pause()
    assert gc.isenabled()
    with pause.held():
        assert not gc.isenabled()
        with pause.held():  # nested (or a concurrent request's)
            assert not gc.isenabled()
        assert not gc.isenabled() and pause.depth == 1
    assert gc.isenabled() and pause.depth == 0


def test_a_pause_puts_the_collector_back_as_it_was() -> None:
    pause = Pause()
    with pytest.raises(RuntimeError):
        with pause.held():
            raise RuntimeError("the request failed")
    assert gc.isenabled()
    gc.disable()  # an embedding application's choice is kept
    try:
        with pause.held():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


class Recording(MemoryStore):
    """Whether automatic collection was on when each durable write was made (a cold
    history's write is inside its preparation's hold)."""

    def __init__(self) -> None:
        super().__init__()
        self.history: list[tuple[int, bool]] = []

    async def record(self, chunks: Sequence[EvictedChunk], events: Sequence[Event]) -> None:
        self.history.append((len(chunks), gc.isenabled()))
        await super().record(chunks, events)


async def test_a_cold_history_is_prepared_with_collection_off_ordinary_turns_not(
        aiohttp_client: ClientFactory, upstream: UpstreamServer) -> None:
    store = Recording()
    client = await make(aiohttp_client, config(upstream.url, ":memory:", context_window=2000),
                        store)
    history = cold_history(10)  # ~100 KB the proxy has never seen, sent whole
    resp = await client.post(CHAT, json={"model": "t-1", "messages": history},
                             headers={"X-Session-ID": "s-cold"})
    assert resp.status == 200
    ordinary = long_session(12)  # ~14 KB: over the window, not a cold history
    for k in (len(ordinary) - 4, len(ordinary)):  # a turn, then the next
        again = await client.post(CHAT, json={"model": "t-1", "messages": ordinary[:k]},
                                  headers={"X-Session-ID": "s-warm"})
        assert again.status == 200
    assert [on for _, on in store.history] == [False, True, True]  # cold, then ordinary
    assert all(n for n, _ in store.history)  # each evicted: each had a durable write
    assert gc.isenabled() and COLD.depth == 0
