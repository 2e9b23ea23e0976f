"""Replicas on one store in object storage (a real moto S3 server on loopback).

The promise: a session's turns may land on any replica, and what goes upstream is what
one replica would have sent. Each test checks it against a reference: the same turns
through one app on a local directory store. Vectors are a per-process, timing-dependent
refinement (one replica's own cache fills as it goes), so the byte-for-byte comparisons
run with `min_similarity` and `question_min_similarity` at 1.0, which leaves decisions
and recall lexical.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from proxy.app import init_app, make_store
from proxy.config import Settings
from proxy.recall import OPEN
from store import shared
from store.lance import LanceStore
from store.shared import SessionHeads
from tests.support.app import CHAT, ClientFactory
from tests.support.fakes import FakeEmbedder
from tests.support.messages import assistant, call, tool, user
from tests.support.openai_server import UpstreamServer
from tests.support.s3 import ENV_KEYS, MotoServer, moto  # noqa: F401  (the fixture)
from tests.support.trips import ASK, NEEDLE_ID, file_listing, session

SID = {"X-Session-ID": "agent-7"}


def settings(upstream: UpstreamServer, path: str, options: dict[str, str]) -> Settings:
    return Settings(store={"path": path, "storage_options": options}, routes=[{
        "name": "test", "model": "test-*", "context_window": 4000, "max_output_tokens": 256,
        "upstream": {"model": "openai/gpt-4o", "api_base": upstream.url, "api_key": "sk-up"},
        "recall": {"enabled": True, "budget_fraction": 0.15, "min_similarity": 1.0,
                   "question_min_similarity": 1.0}}])


def shared_store(uri: str, server: MotoServer) -> LanceStore:
    """What `make_store` builds for an object-store URI, with a hash embedder."""
    return LanceStore(uri, FakeEmbedder(), storage_options=server.storage_options(keys=False),
                      wal=False, read_consistency_interval=timedelta(0))


def turns() -> list[list[dict[str, Any]]]:
    """An agent loop that evicts from turn ~8, asks about an evicted fact, then goes on
    (the recall block rides on its message for the next turns)."""
    out = [session(t) for t in range(1, 17)]
    asked = session(16) + [user(ASK)]
    out.append(asked)
    more = asked
    for t in (1, 2):  # small tool turns: nothing to evict, the block stays on the question
        cid = f"call_q{t}"
        more = more + [assistant(None, call(cid, "get_reservation", f'{{"n": {t}}}')),
                       tool(cid, f"reservation {NEEDLE_ID}: confirmed ({t})")]
        out.append(more)
    more = more + [assistant(f"It is {NEEDLE_ID}."), user("Thanks. Check module 17.")]
    out.append(more)
    for t in (17, 18, 19):
        cid = f"call_x{t}"
        more = more + [assistant(None, call(cid, "list_files", f'{{"dir": "m{t}"}}')),
                       tool(cid, file_listing(t))]
        out.append(more)
    return out


async def send(client: TestClient[Any, Any], upstream: UpstreamServer,
               msgs: list[dict[str, Any]]) -> dict[str, Any]:
    resp = await client.post(CHAT, json={"model": "test-1", "messages": msgs}, headers=SID)
    assert resp.status == 200, await resp.text()
    body: dict[str, Any] = upstream.history[-1].body
    return body


async def reference(aiohttp_client: ClientFactory, upstream: UpstreamServer, tmp_path: Path,
                    plan: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The same turns through one replica on a local directory store."""
    local = settings(upstream, str(tmp_path / "local"), {})
    client = await aiohttp_client(init_app(local, store=LanceStore(tmp_path / "local",
                                                                   FakeEmbedder())))
    bodies = [await send(client, upstream, msgs) for msgs in plan]
    await client.close()
    return bodies


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys from the environment, as in production (never in the config)."""
    for k, v in ENV_KEYS.items():
        monkeypatch.setenv(k, v)


def test_an_object_store_uri_commits_before_forwarding_and_keeps_keys_secret(
        moto: MotoServer, aws_env: None, upstream: UpstreamServer) -> None:  # noqa: F811
    s = settings(upstream, moto.bucket(), {**moto.storage_options(keys=False),
                                           "aws_secret_access_key": "sk-never-shown"})
    assert s.store.shared
    assert "sk-never-shown" not in repr(s) and "sk-never-shown" not in s.model_dump_json()
    store = make_store(s)
    assert isinstance(store, LanceStore)
    assert not store._logged  # no local log: a replica's disk holds nothing others need
    local = settings(upstream, "./somewhere", {})
    assert not local.store.shared
    wal = Settings(store={"path": "s3://b/p", "wal_dir": "/var/lib/ctxwarden/wal"})
    assert not wal.store.shared  # a local log on an object store: one replica only


async def test_evictions_and_recall_survive_a_restart_on_s3(
        aiohttp_client: ClientFactory, upstream: UpstreamServer, moto: MotoServer,  # noqa: F811
        aws_env: None, tmp_path: Path) -> None:
    plan = [session(16), session(16), session(16) + [user(ASK)]]
    want = await reference(aiohttp_client, upstream, tmp_path, plan)
    uri = moto.bucket()
    s = settings(upstream, uri, moto.storage_options(keys=False))
    first = await aiohttp_client(init_app(s, store=shared_store(uri, moto)))
    got = [await send(first, upstream, plan[0])]
    await first.close()  # the process goes; only the object store remains
    again = await aiohttp_client(init_app(s, store=shared_store(uri, moto)))
    got += [await send(again, upstream, msgs) for msgs in plan[1:]]
    assert "offloaded as chunk" in str(got[0]["messages"])  # the first turn evicted
    assert got == want  # sticky evictions, then the same recall, after the restart
    assert NEEDLE_ID in str(got[2]["messages"][-1]["content"])
    events = await (await again.get("/admin/evictions?session=agent-7")).json()
    assert {"evict", "recall"} <= {e["action"] for e in events["events"]}
    assert not list(tmp_path.glob("**/_wal"))[1:]  # only the reference's local log


async def test_turns_alternating_between_two_replicas_forward_what_one_would(
        aiohttp_client: ClientFactory, upstream: UpstreamServer, moto: MotoServer,  # noqa: F811
        aws_env: None, tmp_path: Path) -> None:
    plan = turns()
    want = await reference(aiohttp_client, upstream, tmp_path, plan)
    uri = moto.bucket()
    s = settings(upstream, uri, moto.storage_options(keys=False))
    a = await aiohttp_client(init_app(s, store=shared_store(uri, moto)))
    b = await aiohttp_client(init_app(s, store=shared_store(uri, moto)))
    got = [await send((a, b)[i % 2], upstream, msgs) for i, msgs in enumerate(plan)]
    for i, (mine, theirs) in enumerate(zip(got, want, strict=True)):
        assert mine == theirs, f"turn {i + 1} differs from one replica's"
    on_ask = [i for i, body in enumerate(got) if any(  # the block rides on the question
        ASK in str(m["content"]) and OPEN in str(m["content"]) for m in body["messages"])]
    assert len(on_ask) >= 3  # recalled on one replica, carried on by the other
    assert {i % 2 for i in on_ask} == {0, 1}
    for client in (a, b):  # each replica's decision log holds both replicas' decisions
        events = await (await client.get("/admin/evictions?session=agent-7")).json()
        turns_logged = {e["turn"] for e in events["events"] if e["action"] == "evict"}
        assert len(turns_logged) >= 2


def twin(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Another conversation that opens with the same words (system prompt and first user
    message) and parts at the model's first reply: other calls, other tool outputs."""
    rest = json.dumps(msgs[2:]).replace("module", "package").replace('"call_', '"call_b')
    parted: list[dict[str, Any]] = json.loads(rest)
    return msgs[:2] + parted


async def test_a_derived_session_is_claimed_once_for_every_replica(
        aiohttp_client: ClientFactory, upstream: UpstreamServer, moto: MotoServer,  # noqa: F811
        aws_env: None, tmp_path: Path) -> None:
    # Two conversations with no session id and the same opening, interleaved. Replica a
    # sees the first one's reply first and claims the opening for it; replica b sees the
    # other's reply before it has seen the first's, and must still fork it, as one
    # replica would (with the claim kept per process, b claimed the opening too and the
    # two conversations overwrote each other's evictions in the shared head).
    plan = [(conv, msgs) for t in range(1, 15)
            for conv, msgs in ((0, session(t)), (1, twin(session(t))))]
    local = settings(upstream, str(tmp_path / "local"), {})
    ref = await aiohttp_client(init_app(local, store=LanceStore(tmp_path / "local",
                                                                FakeEmbedder())))
    want = [await derived(ref, upstream, msgs) for _, msgs in plan]
    await ref.close()
    uri = moto.bucket()
    s = settings(upstream, uri, moto.storage_options(keys=False))
    a = await aiohttp_client(init_app(s, store=shared_store(uri, moto)))
    b = await aiohttp_client(init_app(s, store=shared_store(uri, moto)))
    got = [await derived((a, b)[(k // 2 + conv) % 2], upstream, msgs)
           for k, (conv, msgs) in enumerate(plan)]
    assert "offloaded as chunk" in str(got[-1][1]["messages"])  # both evict by the end
    assert {sid for sid, _ in got[2:]} == {sid for sid, _ in want[2:]}
    opening = want[0][0]
    assert {sid for sid, _ in got[2::2]} == {opening}  # the first reply seen keeps it
    assert {sid for sid, _ in got[3::2]} == {f"{opening}-{want[3][0].split('-')[-1]}"}
    for i, (mine, theirs) in enumerate(zip(got, want, strict=True)):
        assert mine == theirs, f"request {i + 1} differs from one replica's"


async def derived(client: TestClient[Any, Any], upstream: UpstreamServer,
                  msgs: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """Send with no session id; the session the proxy chose, and what it forwarded."""
    resp = await client.post(CHAT, json={"model": "test-1", "messages": msgs})
    assert resp.status == 200, await resp.text()
    return resp.headers["X-Ctxwarden-Session"], upstream.history[-1].body


async def test_superseded_heads_are_pruned_and_the_newest_still_wins(
        moto: MotoServer, aws_env: None, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """Every publish appends a row; a session's older rows are deleted every
    COMPACT_EVERY writes, so a head read does not grow with the session's turns. A newer
    head another replica wrote meanwhile is kept."""
    monkeypatch.setattr(shared, "COMPACT_EVERY", 4)
    uri = moto.bucket()
    opts = moto.storage_options(keys=False)
    mine, other = SessionHeads(uri, opts), SessionHeads(uri, opts)
    try:
        for v in (1, 2, 3):
            await mine.put("t", "a", v, {"evicted": [f"c{v}"]})
        await other.put("t", "a", 4, {"evicted": ["c4"]})  # another replica moved it on
        await mine.put("t", "b", 1, {"evicted": ["x"]})  # the 4th write: pruned, compacted
        assert mine._compacting is not None
        await mine._compacting
        tbl = await mine._open()
        rows = await tbl.query().select(["session", "version"]).to_list()
        assert sorted((r["session"], r["version"]) for r in rows) == [
            ("a", 3), ("a", 4), ("b", 1)]
        assert await mine.get("t", "a") == (4, {"evicted": ["c4"]})
        assert await other.get("t", "b") == (1, {"evicted": ["x"]})
    finally:
        await mine.close()
        await other.close()
