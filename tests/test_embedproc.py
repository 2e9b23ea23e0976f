"""The local embedder in its own process: killing it fails no request and embedding
resumes; a query's vector is scheduled ahead of background passages, returned only if in
time, and lands in the parent's cache either way; the queue is bounded; the lag shows in
/metrics and /admin/store."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from proxy.keys import PIPELINE
from store import schema as S
from store.embed import SentenceTransformerEmbedder, get_embedder
from store.lance import LanceStore
from tests.support.app import CHAT, ClientFactory, chat, config, make
from tests.support.messages import long_session
from tests.support.openai_server import UpstreamServer
from tests.support.waiting import until


@pytest.fixture(scope="module")
def own() -> Iterator[SentenceTransformerEmbedder]:
    """An embedder with a child of its own: killing it leaves the shared one alone."""
    emb = SentenceTransformerEmbedder(max_queued=64)
    yield emb
    emb.close()


def child_pid(emb: SentenceTransformerEmbedder) -> int:
    assert emb.process.pid is not None and emb.process.pid != os.getpid()
    return emb.process.pid


async def test_a_killed_embedder_fails_no_request_and_embedding_resumes(
        aiohttp_client: ClientFactory, upstream: UpstreamServer, tmp_path: Path,
        own: SentenceTransformerEmbedder) -> None:
    db = tmp_path / "db"
    lance = LanceStore(db, own)
    client = await make(aiohttp_client, config(upstream.url, str(db)), lance)
    await own.load()
    first = child_pid(own)
    restarts = own.process.restarts
    os.kill(first, signal.SIGKILL)  # dies just before the request
    resp = await client.post(CHAT, json={"model": "t-1", "messages": long_session(14)},
                             headers={"X-Session-ID": "s-kill"})
    assert resp.status == 200 and int(resp.headers["X-Ctxwarden-Evicted"]) > 0
    # and again in the middle of a batch: the batch is resent to the next child
    stamp = time.time()
    bulk = asyncio.ensure_future(own.embed([f"backlog {i} {stamp} " + "words " * 40
                                            for i in range(40)]))
    await until(lambda: own.process.pid not in (None, first) and own.queued() > 0, 180)
    second = child_pid(own)
    os.kill(second, signal.SIGKILL)
    again = await client.post(CHAT, json=chat(text="still there?"),
                              headers={"X-Session-ID": "s-kill"})
    assert again.status == 200
    assert (await bulk).shape == (40, 384)
    await lance.flush(300)  # every evicted chunk embedded all the same
    assert own.process.restarts >= restarts + 2 and child_pid(own) not in (first, second)
    stats = await lance.stats()
    assert stats["passages"] >= stats["chunks"] > 0 and stats["backlog"] == 0
    assert stats["embed_lag_s"] == 0.0
    passages = await lance._tables[S.PASSAGES].query().select(["chunk_id"]).to_list()
    evicted = {e.chunk_id for e in await lance.events("default", "s-kill")
               if e.action == "evict"}
    assert evicted <= {p["chunk_id"] for p in passages}


async def test_embed_within_and_nowait_fill_the_parents_cache() -> None:
    emb = get_embedder("sentence-transformers", "all-MiniLM-L6-v2")
    await emb.embed(["warm the model up"])
    assert emb.answers_now()  # loaded and idle: a query would start at once
    text = f"a query never seen before {time.time()}"
    assert emb.cached(text) is None
    assert await emb.embed_within([text], 0.0) is None  # not in time: None, work goes on
    await until(lambda: emb.cached(text) is not None, 60)
    later, hit = await emb.embed_within([text], 0.0), emb.cached(text)  # from the cache
    assert later is not None and hit is not None and np.array_equal(later[0], hit)
    other = f"scheduled and forgotten {time.time()}"
    assert emb.embed_nowait([other]) is True
    await until(lambda: emb.cached(other) is not None, 60)
    both = await emb.embed_within([other, text], 30.0)
    assert both is not None and both.shape == (2, 384)
    assert np.allclose(both, await emb.embed([other, text]))


async def test_the_vectors_agree_with_float32s_whatever_the_precision_chosen() -> None:
    """"auto" computes in bfloat16 where the CPU does natively (this machine: AVX512-BF16)
    and only if its vectors agree with float32's; the shared embedder computes float32
    (the default), and both give the same vectors to within that agreement."""
    from store.embedchild import BF16_AGREEMENT

    exact = get_embedder("local", "all-MiniLM-L6-v2")
    assert isinstance(exact, SentenceTransformerEmbedder)
    auto = SentenceTransformerEmbedder(precision="auto")
    try:
        await asyncio.gather(auto.load(), exact.load())
        assert exact.process.computes == "float32"
        assert auto.process.computes in ("float32", "bfloat16")
        texts = ["The staging database runs on pg-stg-7741.internal, port 5433.",
                 "Which check went red in the earlier test run?",
                 '{"flight_number": "HAT017", "status": "delayed", "gate": "B12"}']
        a, b = await exact.embed(texts), await auto.embed(texts)
        assert float(np.sum(a * b, axis=1).min()) >= BF16_AGREEMENT
    finally:
        auto.close()


async def test_a_question_alone_goes_through_onnx_runtime_with_encodes_vector(
        own: SentenceTransformerEmbedder) -> None:
    """A single text (what a request waits for) is computed by ONNX Runtime
    (store/embedonnx.py) and its vector is the one a batch computes through `encode`,
    for a short question and for a text past the model's 256 tokens alike (the batch in
    another embedder: each caches what it computed)."""
    emb = get_embedder("local", "all-MiniLM-L6-v2")
    assert isinstance(emb, SentenceTransformerEmbedder)
    await asyncio.gather(emb.load(), own.load())
    assert emb.process.queries in ("onnx", "onnx-only")  # torch-free once cached
    stamp = time.time()
    texts = [f"Which purchase order brings in the restock from the Vietnamese factory {stamp}?",
             " ".join(f"row {i}: sku=GLV-{i:03d} qty={i * 7} {stamp}" for i in range(150))]
    alone = [await emb.embed_within([t], 60.0) for t in texts]  # one text a job
    batch = await own.embed([*texts, f"a third text makes a padded batch {stamp}"])
    for k, got in enumerate(alone):
        assert got is not None and got.shape == (1, 384)
        assert float(np.dot(got[0], batch[k])) >= 0.9999


async def test_the_onnx_export_is_kept_for_the_next_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The child exports the model to ONNX once and keeps it in `CTXWARDEN_CACHE_DIR`
    (store/embedonnx.py) with the vectors `encode` gave for its reference texts; a child
    started later runs from those files without torch (store/embedlean.py), exporting
    nothing, and one that finds the export spoiled goes the torch way and exports it
    again."""
    monkeypatch.setenv("CTXWARDEN_CACHE_DIR", str(tmp_path / "cache"))
    for start, way in enumerate(("onnx", "onnx-only", "onnx")):
        cache = tmp_path / "cache"
        if start == 2:
            (spoiled,) = cache.glob("*.onnx")
            spoiled.write_bytes(b"not a model")
        emb = SentenceTransformerEmbedder("all-MiniLM-L6-v2")  # a child of its own
        try:
            await emb.load()
            assert emb.process.queries == way
        finally:
            emb.close()
        (model,) = cache.glob("query-*.onnx")
        assert sorted(p.name for p in cache.iterdir()) == [model.name,
                                                           model.stem + ".ref.npz"]
        if start == 0:
            first = model.stat().st_mtime_ns
        elif start == 1:
            assert model.stat().st_mtime_ns == first
        else:
            assert model.read_bytes() != b"not a model"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/maps")
async def test_a_child_started_from_the_cache_runs_without_torch_and_gives_its_vectors(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Torch and sentence-transformers are ~360 MB of the child. Once the export and its
    reference vectors are cached, a child loads neither (no libtorch among its mapped
    files) and gives the torch child's vectors: a question alone, and a batch of texts
    of every length (empty, blank-edged, past the model's 256 tokens)."""
    monkeypatch.setenv("CTXWARDEN_CACHE_DIR", str(tmp_path / "cache"))
    texts = ["Which purchase order brings in the restock from the Vietnamese factory?", "",
             "  blank at both ends  ", "ünïcödé テキスト текст",
             " ".join(f"row {i}: sku=GLV-{i:03d} qty={i * 7}" for i in range(150)),
             *(f"passage {i}: " + "word " * (9 * i) for i in range(12))]
    got = {}
    for way in ("onnx", "onnx-only"):
        emb = SentenceTransformerEmbedder("all-MiniLM-L6-v2")
        try:
            await emb.load()
            assert emb.process.queries == way
            maps = Path(f"/proc/{child_pid(emb)}/maps").read_text()
            assert ("libtorch" in maps) == (way == "onnx")
            alone = await emb.embed_within([texts[0]], 60.0)
            assert alone is not None
            got[way] = (alone, await emb.embed(texts))
        finally:
            emb.close()
    (a1, b1), (a2, b2) = got["onnx"], got["onnx-only"]
    assert float(np.dot(a1[0], a2[0])) >= 0.9999
    assert float(np.sum(b1 * b2, axis=1).min()) >= 0.9999


def test_an_unknown_precision_is_refused() -> None:
    with pytest.raises(ValueError) as err:
        SentenceTransformerEmbedder(precision="fp8")
    assert str(err.value) == "Unknown precision: fp8 (one of auto, float32, bfloat16)"


async def test_a_model_still_loading_does_not_answer_now() -> None:
    """A request must not wait for an embedder whose model is not loaded yet."""
    own = SentenceTransformerEmbedder("all-MiniLM-L6-v2")  # its own child, not the shared
    try:
        assert not own.answers_now()
        await own.load()
        assert own.answers_now()
    finally:
        own.close()


async def test_a_query_goes_ahead_of_background_passages(
        own: SentenceTransformerEmbedder) -> None:
    await own.load()
    stamp = time.time()
    bulk = asyncio.ensure_future(own.embed([f"passage {i} of a long backlog {stamp} "
                                            + "words " * 60 for i in range(48)]))
    await until(lambda: own.queued() > 0, 30)
    query = await own.embed_within([f"what was in the backlog {stamp}?"], 60.0)
    assert query is not None and not bulk.done()  # it did not wait for the backlog
    assert own.process.oldest_age() > 0
    rows = await bulk
    assert rows.shape == (48, 384)


async def test_the_queue_is_bounded(own: SentenceTransformerEmbedder) -> None:
    await own.load()
    stamp = time.time()  # a backlog bigger than the bound is taken when the queue is empty
    bulk = asyncio.ensure_future(own.embed([f"filler {i} {stamp} " + "words " * 30
                                            for i in range(160)]))
    await until(lambda: own.queued() > 0, 30)
    assert own.embed_nowait([f"overflow {i} {stamp}" for i in range(10)]) is False
    assert await own.embed_within([f"overflow {stamp}"], 1.0) is None
    await bulk
    assert own.embed_nowait([f"room again {stamp}"]) is True


async def test_the_embedding_lag_is_in_metrics_and_admin_store(
        aiohttp_client: ClientFactory, upstream: UpstreamServer, tmp_path: Path) -> None:
    db = tmp_path / "db"
    lance = LanceStore(db, get_embedder("sentence-transformers", "all-MiniLM-L6-v2"))
    client = await make(aiohttp_client, config(upstream.url, str(db)), lance)
    assert (await client.post(CHAT, json=chat())).status == 200
    original = lance.worker._handle
    gate = asyncio.Event()

    async def stalled(rows: list[Any]) -> None:  # the embedder is far behind
        await gate.wait()
        await original(rows)

    lance.worker._handle = stalled
    resp = await client.post(CHAT, json={"model": "t-1", "messages": long_session(14)},
                             headers={"X-Session-ID": "s-lag"})
    assert resp.status == 200
    await asyncio.sleep(0.2)
    text = await (await client.get("/metrics")).text()
    gauges = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
              if line.startswith("ctxwarden_embed_")}
    assert gauges["ctxwarden_embed_backlog"] > 0 and gauges["ctxwarden_embed_lag_seconds"] > 0
    store = await (await client.get("/admin/store")).json()
    assert store["backlog"] > 0 and store["rows"]["embed_lag_s"] > 0
    assert {"embed_queue", "wal_pending", "wal_lag_s"} <= set(store["rows"])
    gate.set()
    await lance.flush(300)
    text = await (await client.get("/metrics")).text()
    assert "ctxwarden_embed_backlog 0.0" in text and "ctxwarden_embed_lag_seconds 0.0" in text


async def test_passages_waiting_for_relevance_vectors_show_in_metrics_and_admin_store(
        aiohttp_client: ClientFactory, upstream: UpstreamServer, tmp_path: Path) -> None:
    """Every new passage is handed to the embedder for the vectors that refine relevance
    (proxy/feeder.py); that queue is the embedder's work too, so it is shown, not hidden
    behind a store backlog of 0."""
    db = tmp_path / "db"
    lance = LanceStore(db, get_embedder("sentence-transformers", "all-MiniLM-L6-v2"))
    client = await make(aiohttp_client, config(upstream.url, str(db)), lance)
    relater = client.app[PIPELINE].relater
    feeder = relater.feeder
    assert feeder is not None
    gate = asyncio.Event()
    original = feeder.embedder.embed

    async def stalled(texts: list[str]) -> Any:  # the embedder is busy elsewhere
        await gate.wait()
        return await original(texts)

    feeder.embedder = _Stalled(feeder.embedder, stalled)
    stamp = time.time()  # passages no earlier test has embedded
    messages = [{"role": "user", "content": f"passage {i} written at {stamp}: " + "words " * 40}
                for i in range(40)]
    resp = await client.post(CHAT, json={"model": "t-1", "messages": messages},
                             headers={"X-Session-ID": "s-vectors"})
    assert resp.status == 200
    store = await (await client.get("/admin/store")).json()
    pending = store["rows"]["vectors_pending"]
    assert pending == relater.backlog and pending > 0
    text = await (await client.get("/metrics")).text()
    assert f"ctxwarden_vectors_pending {float(pending)}" in text
    gate.set()
    await relater.flush(300)
    store = await (await client.get("/admin/store")).json()
    assert store["rows"]["vectors_pending"] == 0
    assert "ctxwarden_vectors_pending 0.0" in await (await client.get("/metrics")).text()


class _Stalled:
    """The embedder with its `embed` replaced; everything else as it was."""

    def __init__(self, inner: Any, embed: Callable[[list[str]], Awaitable[Any]]) -> None:
        self._inner, self.embed = inner, embed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_closing_leaves_no_semaphore_behind(tmp_path: Path) -> None:
    """The child is killed, not asked to stop; nothing it made may outlive it. tqdm's
    process-shared lock (built by `encode`) did: Python warned of a leaked semaphore at
    every exit of a process that had embedded (the end of `make bench`)."""
    code = ("import asyncio\n"
            "from store.embed import SentenceTransformerEmbedder\n"
            "async def main():\n"
            "    emb = SentenceTransformerEmbedder()\n"
            "    vecs = await emb.embed(['a passage'])\n"
            "    assert len(vecs) == 1\n"
            "    emb.close()\n"
            "asyncio.run(main())\n")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "leaked semaphore" not in done.stderr


def test_a_process_that_exits_while_the_model_loads_logs_no_failure(tmp_path: Path) -> None:
    """Shared embedders are closed at exit, before multiprocessing's own handler kills
    their children: a child it killed while loading was logged as a failed load
    (`embedder_process_failed`, with an empty error) at the end of every such run."""
    script = tmp_path / "exit_while_loading.py"
    script.write_text(
        "import time\n"
        "import proxy  # noqa: F401\n"
        "from store.embed import get_embedder\n"
        "if __name__ == '__main__':\n"
        "    get_embedder('local', 'all-MiniLM-L6-v2').process.start()\n"
        "    time.sleep(1.0)  # the model takes seconds to load: exit while it does\n")
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr
    assert "embedder_process_failed" not in done.stdout + done.stderr
