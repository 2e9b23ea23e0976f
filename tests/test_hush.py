"""The embedder's child is stopped while a cold history is prepared (proxy/hush.py): it
holds its work while stopped, a query resumes it (a step asked for ahead does not), it
dies with a SIGKILLed server even while stopped, and a cold history (not an ordinary turn)
holds it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.keys import PIPELINE
from store.embed import SentenceTransformerEmbedder
from store.embedproc import AHEAD, CAN_PAUSE
from store.lance import LanceStore
from tests.support.app import CHAT, ClientFactory, chat, config, make
from tests.support.openai_server import UpstreamServer
from tests.support.waiting import until

pytestmark = pytest.mark.skipif(not CAN_PAUSE, reason="the child is held on Linux only")
STOPPED = ("t", "T")


def state(pid: int) -> str:
    """The process's state letter from /proc (T: stopped); "" once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return ""
    return stat.rsplit(")", 1)[1].split()[0]


def settles(pid: int, states: tuple[str, ...], within: float = 2.0) -> str:
    """The state once it is one of `states` (or `within` seconds on): a signal is
    delivered asynchronously, so a child busy on the other core reads "R" at first."""
    deadline = time.monotonic() + within
    while (now := state(pid)) not in states and time.monotonic() < deadline:
        time.sleep(0.01)
    return now


@pytest.fixture(scope="module")
def own() -> Iterator[SentenceTransformerEmbedder]:
    emb = SentenceTransformerEmbedder(max_queued=64)
    yield emb
    emb.close()


async def test_a_stopped_embedder_holds_its_work_and_a_query_resumes_it(
        own: SentenceTransformerEmbedder) -> None:
    await own.load()
    pid = own.process.pid
    assert pid is not None
    assert own.process.pause() is True and own.process.paused
    assert settles(pid, STOPPED) in STOPPED
    stamp = time.time()
    bulk = asyncio.ensure_future(own.embed([f"held {i} {stamp}" for i in range(8)]))
    await asyncio.sleep(0.5)
    assert not bulk.done()  # a stopped child answers nothing
    query = await own.embed_within([f"a question while held {stamp}"], 60.0)
    assert query is not None and query.shape == (1, 384)  # the query resumed it
    assert not own.process.paused and state(pid) not in (*STOPPED, "")
    assert (await bulk).shape == (8, 384)
    own.process.resume()  # not stopped: nothing happens
    assert not own.process.paused


async def test_a_step_asked_for_ahead_neither_wakes_nor_keeps_awake_a_held_child(
        own: SentenceTransformerEmbedder) -> None:
    """A step's vector for a later turn (`embed_nowait(urgent=False)`): nobody waits on
    it, so unlike a query it does not resume a stopped child, nor refuse a stop; the
    newest `AHEAD` of them are kept, the older dropped; urgent work goes first."""
    await own.load()
    pid = own.process.pid
    assert pid is not None
    assert own.process.pause() is True and settles(pid, STOPPED) in STOPPED
    stamp = time.time()
    steps = [f"step {i} of a busy loop {stamp}" for i in range(AHEAD + 3)]
    for step in steps:
        assert own.embed_nowait([step], urgent=False) is True
    await asyncio.sleep(0.3)
    assert own.process.paused and state(pid) in STOPPED  # none of them woke it
    own.process.resume()
    assert own.process.pause() is True  # queued ahead: no reason to refuse a stop
    own.process.resume()
    await until(lambda: all(own.cached(t) is not None for t in steps[-AHEAD:]), 60)
    assert [own.cached(t) is None for t in steps[:3]] == [True] * 3  # dropped
    assert own.embed_nowait([steps[0]], urgent=False) is True  # asked again: embedded
    await until(lambda: own.cached(steps[0]) is not None, 60)


def test_a_child_stopped_by_a_server_that_is_sigkilled_dies_with_it(tmp_path: Path) -> None:
    script, said = tmp_path / "server.py", tmp_path / "child.pid"
    script.write_text(textwrap.dedent(f"""
        import time
        from pathlib import Path
        from store.embed import resolve_model
        from store.embedproc import EmbedProcess

        if __name__ == "__main__":
            proc = EmbedProcess("all-MiniLM-L6-v2", resolve=resolve_model)
            proc.start().result(300)
            assert proc.pause()
            Path({str(said)!r}).write_text(str(proc.pid))
            time.sleep(600)
    """))
    root = Path(__file__).parent.parent
    server = subprocess.Popen([sys.executable, str(script)], cwd=root,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "PYTHONPATH": str(root)})
    try:
        deadline = time.monotonic() + 300  # the model loads first
        while not said.exists() or not said.read_text():
            assert server.poll() is None, "the server exited"
            assert time.monotonic() < deadline, "no child"
            time.sleep(0.05)
        child = int(said.read_text())
        assert settles(child, STOPPED) in STOPPED
    finally:
        server.kill()
        server.wait()
    deadline = time.monotonic() + 10
    while state(child) not in ("", "Z"):  # killed by the kernel (PR_SET_PDEATHSIG)
        assert time.monotonic() < deadline, f"child {child} left behind: {state(child)}"
        time.sleep(0.05)


async def test_a_cold_history_is_prepared_with_the_embedder_stopped(
        aiohttp_client: ClientFactory, upstream: UpstreamServer, tmp_path: Path,
        own: SentenceTransformerEmbedder) -> None:
    db = tmp_path / "db"
    client = await make(aiohttp_client, config(upstream.url, str(db)), LanceStore(db, own))
    await own.load()
    hush = client.app[PIPELINE].hush
    assert hush.process is own.process and hush.holds == 0
    stamp = time.time()  # 80 KB the proxy has never seen, sent whole
    history = [{"role": "user" if i % 2 == 0 else "assistant",
                "content": f"note {i} of {stamp}: " + "a long line of earlier work " * 36}
               for i in range(80)]
    history.append({"role": "user", "content": "what did we settle on?"})
    resp = await client.post(CHAT, json={"model": "t-1", "messages": history},
                             headers={"X-Session-ID": "s-cold"})
    assert resp.status == 200
    assert hush.holds == 1 and 0 < hush.seconds < hush.max_hold_s
    pid = own.process.pid
    assert pid is not None and not own.process.paused and state(pid) not in (*STOPPED, "")
    metrics = await (await client.get("/metrics")).text()
    assert "ctxwarden_embedder_holds_total 1.0" in metrics
    assert "ctxwarden_embedder_holds_refused_total 0.0" in metrics
    again = await client.post(CHAT, json=chat(text="and the next step?"),
                              headers={"X-Session-ID": "s-small"})
    assert again.status == 200 and hush.holds == 1  # an ordinary turn is not held
