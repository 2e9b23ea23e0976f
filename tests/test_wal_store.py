"""LanceStore over its write-ahead log: logged rows are read before LanceDB has them, a log
that cannot be written refuses (503 through the app, nothing forwarded, nothing stored),
and a failing LanceDB only delays the replay (200 through the app, lands later)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

import store.walfiles
from store import schema as S
from store.base import Event, EvictedChunk, MemoryStore, Store, Turn
from store.errors import StoreUnavailable
from store.lance import LanceStore
from tests.support.app import CHAT, STUB, ClientFactory, chat, config, make, refused_whole
from tests.support.fakes import FakeEmbedder, read_only
from tests.support.messages import long_session
from tests.support.openai_server import UpstreamServer


def chunk(cid: str, session: str = "s1", tenant: str = "acme") -> EvictedChunk:
    return EvictedChunk(tenant, session, cid, 3, "tool", "TRANSIENT", 20, f"text of {cid}")


def event(cid: str, turn: int = 3, action: str = "evict", session: str = "s1") -> Event:
    return Event("acme", session, turn, cid, "TRANSIENT", 20, 0.2, action, "lowest EFV", "rwoe")


async def lance_rows(store: LanceStore, table: str) -> int:
    return int(await store._tables[table].count_rows())


@contextlib.contextmanager
def failing_sync(exc: OSError) -> Iterator[None]:
    """The disk refuses the log's fdatasync (full, an I/O error)."""
    def refuse(_fd: int) -> None:
        raise exc

    real = store.walfiles.sync
    store.walfiles.sync = refuse
    try:
        yield
    finally:
        store.walfiles.sync = real


@contextlib.contextmanager
def failing_lancedb(lance: LanceStore, table: str) -> Iterator[None]:
    tbl = lance._tables[table]

    def refuse(*_args: Any, **_kw: Any) -> Any:
        raise RuntimeError("lance error: simulated I/O failure")

    tbl.merge_insert = refuse
    try:
        yield
    finally:
        del tbl.merge_insert


async def test_logged_rows_are_read_before_lancedb_has_them(tmp_path: Path) -> None:
    first = LanceStore(tmp_path / "db", FakeEmbedder(), replay=False)
    await first.record([chunk("c1"), chunk("c2"), chunk("c9", session="s2")],
                       [event("c1"), event("c2"), event("c9", session="s2")])
    await first.log([event("c2", 5, "restore")])
    assert await lance_rows(first, S.CHUNKS) == await lance_rows(first, S.EVENTS) == 0
    assert await first.evicted_ids("acme", "s1") == {"c1"}
    assert [(e.chunk_id, e.action) for e in await first.events("acme", "s1")] == [
        ("c1", "evict"), ("c2", "evict"), ("c2", "restore")]
    assert [c.text for c in await first.fetch("acme", "s1", ["c2", "nope", "c1"])] == [
        "text of c2", "text of c1"]
    assert {s["session"]: s["events"] for s in await first.sessions("acme")} == {"s1": 3,
                                                                                 "s2": 1}
    stats = await first.stats()
    assert (stats["chunks"], stats["events"], stats["wal_pending"]) == (3, 4, 2)
    events = await first.events("acme", "s1")
    await first.close()

    again = LanceStore(tmp_path / "db", FakeEmbedder())  # replays what the first left
    assert await again.events("acme", "s1") == events  # at once, replayed or not
    await again.flush(30)
    assert await lance_rows(again, S.CHUNKS) == 3 and await lance_rows(again, S.EVENTS) == 4
    assert await again.events("acme", "s1") == events
    stats = await again.stats()
    assert (stats["chunks"], stats["events"], stats["wal_pending"]) == (3, 4, 0)
    assert list(again.journal.wal.files()) == []
    await again.close()


async def test_a_log_that_cannot_be_synced_refuses_and_keeps_nothing(tmp_path: Path) -> None:
    first = LanceStore(tmp_path / "db", FakeEmbedder(), replay=False)
    await first.record([chunk("c1")], [event("c1")])
    with failing_sync(OSError(errno.ENOSPC, "No space left on device")):
        with pytest.raises(StoreUnavailable) as err:
            await first.record([chunk("c2")], [event("c2")])
        assert "cannot store evicted chunks" in err.value.message
        with pytest.raises(StoreUnavailable):
            await first.log([event("c3")])
    assert await first.evicted_ids("acme", "s1") == {"c1"}  # nothing of the refused calls
    assert await first.fetch("acme", "s1", ["c2"]) == []
    await first.record([chunk("c4")], [event("c4")])  # the disk is back: a new segment
    await first.close()
    again = LanceStore(tmp_path / "db", FakeEmbedder())
    assert await again.evicted_ids("acme", "s1") == {"c1", "c4"}
    await again.flush(30)
    assert await lance_rows(again, S.CHUNKS) == 2 and await lance_rows(again, S.EVENTS) == 2
    await again.close()


async def test_a_failing_lancedb_only_delays_the_replay(tmp_path: Path) -> None:
    lance = LanceStore(tmp_path / "db", FakeEmbedder())
    await lance.record([chunk("c0")], [event("c0")])
    await lance.flush(30)
    with failing_lancedb(lance, S.CHUNKS):
        await lance.record([chunk("c1")], [event("c1")])  # durable in the log: no error
        assert await lance.evicted_ids("acme", "s1") == {"c0", "c1"}
        for _ in range(200):  # the replayer tries, fails, backs off
            if lance.journal.failures:
                break
            await asyncio.sleep(0.02)
        assert lance.journal.failures >= 1 and (await lance.stats())["wal_pending"] == 1
    await lance.flush(30)  # the retry lands it
    assert await lance_rows(lance, S.CHUNKS) == 2 and await lance_rows(lance, S.EVENTS) == 2
    assert [c.chunk_id for c in await lance.fetch("acme", "s1", ["c1"])] == ["c1"]
    await lance.close()


# --- through the app --------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["read_only", "full"])
async def test_an_unwritable_log_answers_503_and_forwards_nothing(
        aiohttp_client: ClientFactory, upstream: UpstreamServer, tmp_path: Path,
        kind: str) -> None:
    db = tmp_path / "db"
    lance = LanceStore(db, FakeEmbedder())
    client = await make(aiohttp_client, config(upstream.url, str(db)), lance)
    assert (await client.post(CHAT, json=chat())).status == 200  # the store is open
    sid = {"X-Session-ID": "s-fault"}
    msgs = {"model": "t-1", "messages": long_session(14)}
    fault = (read_only(db) if kind == "read_only"
             else failing_sync(OSError(errno.ENOSPC, "No space left on device")))
    with fault:
        await refused_whole(client, msgs, sid, upstream)
        assert (await client.post(CHAT, json=chat(text="no eviction needed"))).status == 200
    assert await lance.events("default", "s-fault") == []
    retried = await client.post(CHAT, json=msgs, headers=sid)
    assert retried.status == 200 and int(retried.headers["X-Ctxwarden-Evicted"]) > 0
    await held_back_landed(lance, upstream, retried.headers["X-Ctxwarden-Evicted"])


async def test_a_failing_lancedb_behind_the_log_answers_200_and_lands_later(
        aiohttp_client: ClientFactory, upstream: UpstreamServer, tmp_path: Path) -> None:
    db = tmp_path / "db"
    lance = LanceStore(db, FakeEmbedder())
    client = await make(aiohttp_client, config(upstream.url, str(db)), lance)
    assert (await client.post(CHAT, json=chat())).status == 200
    msgs = {"model": "t-1", "messages": long_session(14)}
    with failing_lancedb(lance, S.CHUNKS), failing_lancedb(lance, S.EVENTS):
        resp = await client.post(CHAT, json=msgs, headers={"X-Session-ID": "s-fault"})
        assert resp.status == 200 and int(resp.headers["X-Ctxwarden-Evicted"]) > 0
        assert await lance_rows(lance, S.CHUNKS) == 0  # LanceDB has none of it yet
        await held_back_landed(lance, upstream, resp.headers["X-Ctxwarden-Evicted"])
    await lance.flush(30)
    assert await lance_rows(lance, S.CHUNKS) > 0 and (await lance.stats())["wal_pending"] == 0
    await held_back_landed(lance, upstream, resp.headers["X-Ctxwarden-Evicted"])


async def held_back_landed(lance: LanceStore, upstream: UpstreamServer, count: str) -> None:
    """Every stub the upstream saw is an evict event of the session and a stored chunk."""
    sent = orjson.dumps(upstream.history[-1].body).decode()
    stubs = STUB.findall(sent)
    evicted = [e.chunk_id for e in await lance.events("default", "s-fault")
               if e.action == "evict"]
    assert len(evicted) == len(set(evicted)) == int(count)
    assert stubs and set(stubs) <= set(evicted)
    stored = await lance.fetch("default", "s-fault", evicted)
    assert [c.chunk_id for c in stored] == evicted and all(c.text for c in stored)


# --- turn summaries: their own table ----------------------------------------------------------
def summary(turn: int, session: str = "s1", **data: Any) -> Turn:
    return Turn("acme", session, turn, "rwoe", {"budget": 3600, "kept": {"TOOL": turn}, **data})


async def test_a_turn_summarised_again_shows_the_latest_from_the_log_and_from_lancedb(
        tmp_path: Path) -> None:
    """A client that edits or regenerates its last turn sends that turn again: its row
    shows what was sent last, whether the first row is already in LanceDB, the second
    still in the log, or both replayed (a merge that updates)."""
    store = LanceStore(tmp_path / "db", FakeEmbedder())
    await store.log_turns([summary(1, query="first try"), summary(2)])
    await store.flush()  # in LanceDB
    await store.log_turns([summary(1, query="edited")])
    assert [t.data.get("query") for t in await store.turns("acme", "s1")] == ["edited", None]
    await store.flush()
    assert [t.data.get("query") for t in await store.turns("acme", "s1")] == ["edited", None]
    assert (await store.stats())["turns"] == 2
    await store.log_turns([summary(1, query="third"), summary(1, query="fourth")])
    await store.close()
    again = LanceStore(tmp_path / "db", FakeEmbedder())
    assert [t.data.get("query") for t in await again.turns("acme", "s1")] == ["fourth", None]
    await again.close()


@pytest.mark.parametrize("kind", ["memory", "lance"])
async def test_turn_summaries_have_their_own_table(tmp_path: Path, kind: str) -> None:
    def open_store() -> Store:
        return MemoryStore() if kind == "memory" else LanceStore(tmp_path / "db", FakeEmbedder())

    first = open_store()
    await first.log_turns([summary(2), summary(1, query="where is the key?"),
                           summary(1, query="a retry of turn 1"), summary(1, session="s2")])
    await first.log_turns([])
    turns = await first.turns("acme", "s1")
    assert [(t.turn, t.data.get("query")) for t in turns] == [(1, "a retry of turn 1"),
                                                              (2, None)]
    assert turns[0].data["kept"] == {"TOOL": 1} and turns[0].policy == "rwoe"
    assert await first.events("acme", "s1") == []  # summaries are not decisions
    # but they list their sessions (the inspector finds one that never evicted)
    listed = {r["session"]: (r["events"], r["evicted"], r["last_turn"])
              for r in await first.sessions("acme")}
    assert listed == {"s1": (0, 0, 2), "s2": (0, 0, 1)}
    assert await first.turns("globex", "s1") == []
    if not isinstance(first, LanceStore):
        return
    assert (await first.stats())["turns"] == 3  # logged, maybe not replayed yet
    await first.close()
    again = LanceStore(tmp_path / "db", FakeEmbedder())
    assert await again.turns("acme", "s1") == turns  # from the log or LanceDB, the same
    await again.flush(30)
    assert await lance_rows(again, S.TURNS) == 3 and await again.turns("acme", "s1") == turns
    await again.close()


async def test_the_replay_waits_for_a_pause_unless_the_backlog_grows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Back to back, LanceDB commits wait for a pause in requests (store/quiet.py); a
    backlog past REST_BACKLOG records is replayed without one, so it cannot grow unbounded
    under a steady stream."""
    import store.journal
    from store.quiet import QUIET
    monkeypatch.setattr(store.journal, "WRITE_REST_S", 30.0)
    monkeypatch.setattr(store.journal, "REST_BACKLOG", 3)
    monkeypatch.setattr(QUIET, "max_wait_s", 30.0)
    lance = LanceStore(tmp_path / "db", FakeEmbedder())
    try:
        with QUIET.busy():  # a request was just prepared: no pause for the next 30 s
            pass
        await lance.record([chunk("c0")], [event("c0")])
        await lance.record([chunk("c1")], [event("c1")])
        await asyncio.sleep(0.6)  # past the replay's linger
        assert lance.journal.replayed == 0 and (await lance.stats())["wal_pending"] == 2
        await lance.record([chunk("c2")], [event("c2")])  # the third: no more waiting
        for _ in range(300):
            if not lance.journal.backlog:
                break
            await asyncio.sleep(0.02)
        assert lance.journal.backlog == 0 and await lance_rows(lance, S.CHUNKS) == 3
    finally:
        await lance.close()


async def test_two_upkeeps_at_once_compact_each_table_once(tmp_path: Path) -> None:
    """The log's replay and the embed worker each run the writer's upkeep; one that began
    before the other's compaction compacted that table again, concurrently (a soak run:
    LanceDB's "Rewrite preempted by concurrent Rewrite", `store_optimize_failed`)."""
    from store.writes import OPTIMIZE_EVERY

    store = LanceStore(tmp_path / "db", FakeEmbedder(), background=False)
    await store.record([chunk("c1")], [event("c1")])
    writer, handles = store._writer, store._tables
    calls: dict[str, int] = {}
    inside = asyncio.Event()
    for name in (S.CHUNKS, S.EVENTS):
        real = handles[name].optimize

        async def counted(*args: Any, _name: str = name, _real: Any = real,
                          **kwargs: Any) -> Any:
            calls[_name] = calls.get(_name, 0) + 1
            inside.set()
            await asyncio.sleep(0.05)  # a compaction takes a while: the other upkeep runs
            return await _real(*args, **kwargs)

        handles[name].optimize = counted
    try:
        writer._commits = {S.CHUNKS: OPTIMIZE_EVERY, S.EVENTS: OPTIMIZE_EVERY}
        first = asyncio.create_task(writer.maintain())
        await inside.wait()  # the first is compacting its first table
        await writer.maintain()
        await first
        assert calls == {S.CHUNKS: 1, S.EVENTS: 1}
    finally:
        for name in (S.CHUNKS, S.EVENTS):
            del handles[name].optimize
        await store.close()
