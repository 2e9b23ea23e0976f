"""LanceStore against a real LanceDB in tmp_path and the real MiniLM embedder."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from store.base import Event, EvictedChunk, MemoryStore, RecallQuery, Store, Turn
from store.embed import CachedEmbedder, get_embedder
from store.errors import StoreUnavailable
from store.lance import LanceStore
from store.schema import hkey
from tests.support.fakes import FakeEmbedder, read_only

NEEDLE = "Customer note: she is travelling with her cat Whiskers in a soft carrier under the seat."
ASK = "Does the passenger bring an animal on board?"  # a paraphrase: no word in common
FLOOR = 0.25  # MiniLM: a paraphrase vs. a JSON passage ≈ 0.3, unrelated ≤ 0.2 (bench/store.py)


def reservations(n: int = 300, needle_at: int = 217) -> str:
    rnd = random.Random(11)
    rows: list[dict[str, object]] = [
        {"reservation_id": f"{rnd.choice('ABCDEFGH')}{rnd.randrange(10**5):05d}",
         "user_id": f"user_{i}", "origin": rnd.choice(["JFK", "LAX", "SFO", "BOS"]),
         "destination": rnd.choice(["MIA", "SEA", "DEN"]), "cabin": rnd.choice(["economy",
                                                                               "business"]),
         "status": "confirmed"} for i in range(n)]
    rows[min(needle_at, n - 1)]["notes"] = NEEDLE
    return json.dumps(rows, indent=2)


def chunk(cid: str, text: str, turn: int = 3, tenant: str = "acme",
          session: str = "s1") -> EvictedChunk:
    return EvictedChunk(tenant, session, cid, turn, "tool", "TRANSIENT", len(text) // 4, text)


def event(cid: str, turn: int, action: str = "evict", session: str = "s1") -> Event:
    return Event("acme", session, turn, cid, "TRANSIENT", 100, 0.25, action, "lowest EFV", "rwoe",
                 preview=f"preview of {cid}")


def query(text: str, tenant: str = "acme", session: str = "s1", **kw: object) -> RecallQuery:
    args: dict[str, object] = {"exclude_chunk_ids": frozenset(), "budget_tokens": 1000,
                               "min_similarity": FLOOR, **kw}
    return RecallQuery(tenant=tenant, session=session, text=text, **args)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def embedder() -> CachedEmbedder:
    return get_embedder("sentence-transformers", "all-MiniLM-L6-v2")


@pytest.fixture
async def store(tmp_path: Path, embedder: CachedEmbedder) -> AsyncIterator[LanceStore]:
    s = LanceStore(tmp_path / "db", embedder)
    yield s
    await s.close()


def test_row_keys_stay_the_digests_stores_already_hold() -> None:
    """Row ids are content keys in stores written by earlier versions: how `hkey` computes
    them may change, the digests may not (blake2b-128 of each part and a unit separator)."""
    assert hkey("scope", "acme", "s1") == "36fd977f068e3e8449f23da388ecb1ed"
    assert hkey("event", "acme", "s\udc80", "7", "c1", "evict") == (
        "233d0877eacf8d7ebd2795f14be7cf86")  # a lone surrogate from a client's JSON
    assert hkey() == "cae66941d9efbd404e4d88758ea67670"


async def test_needle_deep_in_a_json_tool_output_is_recalled(store: LanceStore) -> None:
    big = reservations()
    await store.offload([chunk("c-res", big), chunk("c-weather", "Forecast for Paris: rain, "
                                                    "12 degrees, wind from the west.", turn=4)])
    assert [c.text for c in await store.fetch("acme", "s1", ["c-res"])] == [big]  # durable
    await store.flush()
    found = await store.recall(query(ASK))
    assert found and NEEDLE in found[0].text
    top = found[0]
    assert top.chunk_id == "c-res" and top.passage_id.startswith("c-res#")
    assert (top.turn, top.role, top.klass) == (3, "tool", "TRANSIENT") and top.tokens <= 96
    assert top.similarity >= FLOOR
    assert sum(p.tokens for p in found) <= 1000
    assert await store.recall(query("How do I bake sourdough bread at home?")) == []
    # what is in context is skipped; a tiny budget takes what fits
    assert await store.recall(query(ASK,
                                    exclude_chunk_ids=frozenset({"c-res"}))) == []
    small = await store.recall(query(ASK,
                                     budget_tokens=top.tokens))
    assert [p.passage_id for p in small] == [top.passage_id]


async def test_identifier_in_the_query_finds_its_passage(store: LanceStore) -> None:
    big = reservations()
    rid = json.loads(big)[123]["reservation_id"]
    await store.offload([chunk("c-res", big)])
    await store.flush()
    found = await store.recall(query(f"Please cancel reservation {rid} for me", top_k=2))
    assert found and rid in found[0].text


async def test_no_recall_across_tenants(store: LanceStore) -> None:
    await store.offload([chunk("c-a", reservations(), tenant="acme", session="s1"),
                         chunk("c-a2", NEEDLE, tenant="acme", session="s2")])
    await store.flush()
    q = ASK
    assert await store.recall(query(q, tenant="globex", session="s1")) == []
    assert await store.recall(query(q, tenant="globex", session="s1", cross_session=True)) == []
    mine = await store.recall(query(q, session="s2"))
    assert {p.chunk_id for p in mine} == {"c-a2"}
    both = await store.recall(query(q, session="s2", cross_session=True))
    assert {p.chunk_id for p in both} == {"c-a", "c-a2"}


async def test_hostile_ids_are_data_not_sql(store: LanceStore) -> None:
    evil = "x' OR '1'='1"
    await store.offload([chunk("c1", NEEDLE, tenant=evil, session=evil)])
    await store.log([Event(evil, evil, 1, "c1", "TRANSIENT", 5, 0.1, "evict", "r", "rwoe")])
    await store.flush()
    assert await store.recall(query(ASK, tenant="acme",
                                    cross_session=True)) == []
    assert await store.evicted_ids(evil, evil) == {"c1"}
    assert await store.evicted_ids("acme", evil) == set()
    assert [s["session"] for s in await store.sessions(evil)] == [evil]


async def test_resending_writes_nothing_twice(store: LanceStore) -> None:
    chunks = [chunk("c1", reservations(60)), chunk("c2", "short text", turn=4)]
    events = [event("c1", 5), event("c2", 5)]
    await store.offload(chunks)
    await store.log(events)
    await store.flush()
    before = await store.stats()
    await store.offload(chunks)
    await store.offload(chunks[:1] * 3)
    await store.log(events + events)
    await store.flush()
    assert await store.stats() == before
    assert before["chunks"] == 2 and before["events"] == 2 and before["passages"] > 2


async def test_sticky_evictions_and_events_survive_a_restart(
        tmp_path: Path, embedder: CachedEmbedder) -> None:
    first = LanceStore(tmp_path / "db", embedder)
    await first.offload([chunk("c1", reservations(80)), chunk("c2", "notes"),
                         chunk("c3", "more notes")])
    await first.log([event("c1", 3), event("c2", 3), event("c3", 4), event("c2", 6, "restore"),
                     event("c3", 8, "restore"), event("c3", 9)])
    await first.flush()
    stats = await first.stats()
    events = await first.events("acme", "s1")
    await first.close()

    again = LanceStore(tmp_path / "db", embedder)
    assert await again.evicted_ids("acme", "s1") == {"c1", "c3"}
    assert await again.events("acme", "s1") == events
    assert [e.turn for e in events] == sorted(e.turn for e in events)
    assert await again.stats() == stats
    assert await again.recall(query(ASK))
    await again.close()


async def test_chunks_left_unembedded_are_found_by_the_scan(
        tmp_path: Path, embedder: CachedEmbedder) -> None:
    # A store without its worker commits chunks and never embeds them: what a crash between
    # the commit and the embedding leaves behind.
    crashed = LanceStore(tmp_path / "db", embedder, background=False)
    await crashed.offload([chunk("c-late", reservations(250, needle_at=200))])
    assert (await crashed.stats())["passages"] == 0
    await crashed.close()
    # A queue of one overflows at once; the rest is left to the scan, never dropped.
    again = LanceStore(tmp_path / "db", embedder, max_pending=1)
    await again.offload([chunk(f"c{i}", f"note number {i} about gate B{i}") for i in range(4)])
    await again.flush()
    stats = await again.stats()
    assert stats["chunks"] == 5 and stats["backlog"] == 0
    assert stats["passages"] > 5  # the big one split into many
    found = await again.recall(query(ASK))
    assert found and NEEDLE in found[0].text
    assert len(await again.recall(query("which gate is note number 2 about?", top_k=8))) >= 1
    await again.close()


async def test_a_read_only_store_refuses_offload_and_loses_nothing(
        tmp_path: Path, embedder: CachedEmbedder) -> None:
    store = LanceStore(tmp_path / "db", embedder)
    await store.offload([chunk("c1", reservations(40, needle_at=30))])
    await store.log([event("c1", 3)])
    await store.flush()
    before = await store.stats()
    with read_only(tmp_path / "db"):
        with pytest.raises(StoreUnavailable) as err:
            await store.offload([chunk("c2", "a chunk that cannot be stored now")])
        assert err.value.message.endswith("nothing was dropped from the conversation.")
        with pytest.raises(StoreUnavailable):
            await store.log([event("c2", 4)])
        # reads still work while writes fail
        assert await store.evicted_ids("acme", "s1") == {"c1"}
        assert await store.recall(query(ASK))
    assert await store.stats() == before
    await store.close()
    again = LanceStore(tmp_path / "db", embedder)
    assert await again.stats() == before
    assert await again.fetch("acme", "s1", ["c1", "c2"]) != []
    assert [c.chunk_id for c in await again.fetch("acme", "s1", ["c2", "c1"])] == ["c1"]
    await again.offload([chunk("c2", "a chunk that cannot be stored now")])  # writable again
    assert (await again.stats())["chunks"] == before["chunks"] + 1
    await again.close()


async def test_an_unopenable_store_is_unavailable_not_a_crash(
        tmp_path: Path, embedder: CachedEmbedder) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    store = LanceStore(blocker / "db", embedder)
    with pytest.raises(StoreUnavailable):
        await store.offload([chunk("c1", "text")])
    assert await store.recall(query("anything at all")) == []  # recall degrades, never fails
    await store.close()


async def test_sessions_summary(store: LanceStore) -> None:
    await store.log([event("c1", 3), event("c2", 4), event("c1", 6, "recall"),
                     event("c9", 2, session="s2")])
    rows = await store.sessions("acme")
    assert [r["session"] for r in rows][0] in ("s1", "s2") and len(rows) == 2
    s1 = next(r for r in rows if r["session"] == "s1")
    assert {k: s1[k] for k in ("events", "evicted", "recalled", "evicted_tokens",
                               "last_turn")} == {"events": 3, "evicted": 2, "recalled": 1,
                                                 "evicted_tokens": 200, "last_turn": 6}
    assert await store.sessions("nobody") == []


@pytest.mark.parametrize("replayed", [False, True])
async def test_a_session_that_evicted_nothing_is_listed_by_its_turns(
        store: LanceStore, replayed: bool) -> None:
    """Its turn summaries are all the store holds of it: the inspector still lists it,
    once, whether they are in the log or replayed into LanceDB."""
    await store.log([event("c1", 3)])
    await store.log_turns([Turn("acme", "quiet", t, "rwoe", {"budget": 900}, time=100.0 + t)
                           for t in (1, 2, 3)] + [Turn("other", "quiet", 1, "rwoe", {})])
    if replayed:
        await store.flush()
    rows = await store.sessions("acme")
    quiet = next(r for r in rows if r["session"] == "quiet")
    assert quiet == {"tenant": "acme", "session": "quiet", "events": 0, "evicted": 0,
                     "recalled": 0, "evicted_tokens": 0, "last_turn": 3, "last_time": 103.0}
    assert [r["session"] for r in rows].count("quiet") == 1
    assert {(r["tenant"], r["session"]) for r in await store.sessions()} == {
        ("acme", "s1"), ("acme", "quiet"), ("other", "quiet")}


async def test_a_relative_path_starting_with_db_is_a_local_directory(
        tmp_path: Path, embedder: CachedEmbedder, monkeypatch: pytest.MonkeyPatch) -> None:
    """`store.path: db` (or `dbx`): LanceDB takes a relative path starting with "db" for
    its cloud service and failed with "An api_key or oauth_config is required"."""
    monkeypatch.chdir(tmp_path)
    s = LanceStore("db", embedder, background=False)
    try:
        await s.offload([chunk("c1", "kept on this disk")])
    finally:
        await s.close()
    again = LanceStore("db", embedder, background=False)
    try:
        assert [c.text for c in await again.fetch("acme", "s1", ["c1"])] == ["kept on this disk"]
    finally:
        await again.close()
    assert (tmp_path / "db" / "chunks.lance").is_dir()


async def test_an_eviction_taken_back_and_made_again_in_one_turn_stays_an_eviction(
        tmp_path: Path) -> None:
    """evict, restore, evict of one chunk at one turn (parallel sub-calls of a session, a
    retry with another max_tokens): the second evict has the first's id. Its latest copy
    must count, in the log and once replayed into LanceDB (where the first already is)."""
    store = LanceStore(tmp_path / "db", FakeEmbedder())
    try:
        await store.record([chunk("c1", "a passage")], [replace(event("c1", 5), time=1.0)])
        await store.log([replace(event("c1", 5, "restore"), time=2.0)])
        await store.flush()  # both in LanceDB
        await store.record([chunk("c1", "a passage")], [replace(event("c1", 5), time=3.0)])
        for _ in range(2):  # from the log over LanceDB's older copy, then replayed
            assert await store.evicted_ids("acme", "s1") == {"c1"}
            assert [e.action for e in await store.events("acme", "s1")] == ["restore", "evict"]
            await store.flush()
    finally:
        await store.close()


@pytest.mark.parametrize("kind", ["memory", "lance"])
async def test_of_two_events_with_one_id_in_a_batch_the_later_is_kept(
        tmp_path: Path, kind: str) -> None:
    """As `Store.log` says: the LanceDB store kept the first of a batch where the
    MemoryStore kept the last, so the same turn read differently in each."""
    store: Store = (MemoryStore() if kind == "memory"
                    else LanceStore(tmp_path / "db", FakeEmbedder()))
    try:
        first, later = event("c1", 5, "recall"), replace(event("c1", 5, "recall"), tokens=406)
        await store.record([chunk("c1", "a passage")], [first, later])
        await store.flush()
        assert [e.tokens for e in await store.events("acme", "s1")] == [406]
    finally:
        await store.close()
