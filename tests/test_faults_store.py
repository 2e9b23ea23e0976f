"""Store faults through the real app: a LanceDB store that is read-only, full or raising.
The request that would drop chunks the store cannot take is refused with a 503 and nothing
evicted is lost; what was held back lands once the store recovers. Concurrent offloads
share commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from structlog.testing import capture_logs

from store import schema as S
from store.base import EvictedChunk
from store.embed import get_embedder
from store.lance import LanceStore
from tests.support.app import CHAT, STUB, ClientFactory, chat, config, make, refused_whole
from tests.support.fakes import read_only
from tests.support.messages import long_session
from tests.support.openai_server import UpstreamServer


@contextlib.contextmanager
def failing(store: LanceStore, table: str, exc: BaseException) -> Iterator[None]:
    """LanceDB itself fails on this table's writes (disk full, an I/O error)."""
    tbl = store._tables[table]

    def refuse(*_args: Any, **_kw: Any) -> Any:
        raise exc

    tbl.merge_insert = refuse
    try:
        yield
    finally:
        del tbl.merge_insert


def fault(kind: str, store: LanceStore, db: Path) -> contextlib.AbstractContextManager[None]:
    if kind == "read_only":
        return read_only(db)
    if kind == "full":
        return failing(store, S.CHUNKS, OSError(errno.ENOSPC, "No space left on device"))
    return failing(store, S.EVENTS, RuntimeError("lance error: simulated I/O failure"))


@pytest.mark.parametrize("kind", ["read_only", "full", "raising"])
async def test_store_faults_lose_nothing_and_what_was_held_back_lands(
        aiohttp_client: ClientFactory, upstream: UpstreamServer, tmp_path: Path,
        kind: str) -> None:
    db = tmp_path / "db"
    # No embedding worker: what is at stake is the raw chunks and the events (MiniLM would
    # only add seconds of model loading; the worker's own faults are in test_store.py).
    store = LanceStore(db, get_embedder("sentence-transformers", "all-MiniLM-L6-v2"),
                       background=False)
    client = await make(aiohttp_client, config(upstream.url, str(db)), store)
    assert (await client.post(CHAT, json=chat())).status == 200  # the store is open
    sid = {"X-Session-ID": "s-fault"}
    msgs = {"model": "t-1", "messages": long_session(14)}
    with fault(kind, store, db):
        if kind == "raising":  # the chunks are stored, only the decision log fails
            with capture_logs() as logs:
                answered = await client.post(CHAT, json=msgs, headers=sid)
            assert answered.status == 200  # nothing evicted is lost: the request goes on
            line = next(e for e in logs if e["event"] == "events_unrecorded")
            assert line["retry"] is True and line["events"][0].startswith("evict ")
        else:
            await refused_whole(client, msgs, sid, upstream)
        small = await client.post(CHAT, json=chat(text="no eviction needed"))
        assert small.status == 200  # what needs no offload still goes through
        assert await store.events("default", "s-fault") == []  # no eviction it did not store
    if kind == "raising":  # the turn log retries the unrecorded events (0.25 s linger)
        for _ in range(200):  # on a loaded machine it takes longer than the linger
            if await store.events("default", "s-fault"):
                break
            await asyncio.sleep(0.05)
    retried = await client.post(CHAT, json=msgs, headers=sid)  # after recovery
    assert retried.status == 200 and int(retried.headers["X-Ctxwarden-Evicted"]) > 0
    sent = orjson.dumps(upstream.history[-1].body).decode()
    stubs = STUB.findall(sent)
    evicted = [e.chunk_id for e in await store.events("default", "s-fault")
               if e.action == "evict"]
    assert len(evicted) == len(set(evicted)) == int(retried.headers["X-Ctxwarden-Evicted"])
    assert stubs and set(stubs) <= set(evicted)  # each logged once, every stub among them
    stored = await store.fetch("default", "s-fault", evicted)
    assert [c.chunk_id for c in stored] == evicted and all(c.text for c in stored)



async def test_concurrent_writes_share_commits(tmp_path: Path) -> None:
    """200 requests offloading at once: LanceDB alone refused with "Too many concurrent
    writers" under `make bench-load`; grouped, every write lands, in far fewer commits."""
    store = LanceStore(tmp_path / "db", get_embedder("sentence-transformers",
                                                     "all-MiniLM-L6-v2"), background=False)
    try:
        await store.offload([EvictedChunk("t", "s0", "c-0", 1, "tool", "TRANSIENT", 3, "x")])
        before = await store._tables[S.CHUNKS].version()
        await asyncio.gather(*(store.offload([EvictedChunk(
            "t", f"s{i}", f"c-{i}", 1, "tool", "TRANSIENT", 3, f"text {i}")])
            for i in range(1, 201)))
        commits = await store._tables[S.CHUNKS].version() - before
        assert (await store.stats())["chunks"] == 201
        assert 1 <= commits <= 20
    finally:
        await store.close()
