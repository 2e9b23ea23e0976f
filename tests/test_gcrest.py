"""Full garbage collections wait for the proxy to rest (proxy/gcrest.py)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from proxy.gcrest import RestingCollector
from store.quiet import Quiet


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
