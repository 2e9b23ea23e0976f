"""The write-ahead log alone (format, group commit, torn and corrupt segments, ownership),
and the crash it exists for: a store SIGKILLed after `record` returned and before (or
while) LanceDB got the rows loses nothing on restart, the evicted messages' images included."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from store import schema as S
from store.lance import LanceStore
from store.wal import WriteAheadLog
from store.walformat import MAGIC, frame, parse
from tests.support.attachments import png
from tests.support.fakes import FakeEmbedder

ROOT = Path(__file__).resolve().parents[1]


def payloads(n: int) -> list[bytes]:
    return [f'{{"n": {i}, "text": "{"x" * (i % 7)}"}}'.encode() for i in range(n)]


async def test_concurrent_appends_share_syncs_and_read_back_in_order(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path / "wal")
    await wal.append(b"first")  # creates the segment
    seen: list[int] = []
    seqs = await asyncio.gather(*(wal.append(p, seen.append) for p in payloads(200)))
    assert sorted(seqs) == list(range(2, 202)) and seen == sorted(seen)  # in order
    assert wal.appends == 201 and wal.syncs <= 21  # grouped: one sync per write group
    await wal.close()
    loaded = WriteAheadLog(tmp_path / "wal", writer=False).load()
    assert [p for _, p in loaded.records] == [b"first", *payloads(200)]
    assert (loaded.segments, loaded.claimed, loaded.torn, loaded.corrupt) == (1, 0, 0, 0)


def test_a_torn_tail_is_ignored() -> None:
    good = MAGIC + b"".join(frame(p) for p in payloads(3))
    for tail in (frame(b"half written")[:-5], frame(b"x")[:3], b"\0" * 4096):
        found, offset, how = parse(good + tail)
        assert (found, offset, how) == (payloads(3), len(good), "torn")
    assert parse(MAGIC[:3]) == ([], 0, "torn") and parse(b"") == ([], 0, "torn")
    assert parse(good) == (payloads(3), len(good), "ok")


async def test_a_checksum_mismatch_stops_there_and_the_segment_is_kept(
        tmp_path: Path) -> None:
    first = WriteAheadLog(tmp_path / "wal")
    for p in payloads(3):
        await first.append(p)
    await first.close()
    [seg] = list((tmp_path / "wal").iterdir())
    data = bytearray(seg.read_bytes())
    data[len(MAGIC) + len(frame(payloads(1)[0])) + 9] ^= 0xFF  # inside the 2nd payload
    seg.write_bytes(bytes(data))
    again = WriteAheadLog(tmp_path / "wal")
    loaded = again.load()
    assert [p for _, p in loaded.records] == payloads(1) and loaded.corrupt == 1
    await again.release(loaded.records[-1][0])  # applied: kept for a human, not replayed
    assert [p.name for p in (tmp_path / "wal").iterdir()] == [seg.name + ".corrupt"]
    assert again.load().records == []


async def test_applied_segments_are_deleted_and_the_next_append_starts_a_new_one(
        tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path / "wal")
    seq = await wal.append(b"one")
    [seg] = list(wal.files())
    await wal.release(seq - 1)
    assert list(wal.files()) == [seg]  # not applied yet: kept
    await wal.release(seq)
    assert list(wal.files()) == [] and wal.open_segments == 0
    await wal.append(b"two")
    [new] = list(wal.files())
    assert new != seg
    await wal.close()
    assert list(wal.files()) == [new]  # closing deletes nothing unapplied


async def test_a_live_writers_segment_is_read_but_never_claimed(tmp_path: Path) -> None:
    live = WriteAheadLog(tmp_path / "wal")
    await live.append(b"live")
    other = WriteAheadLog(tmp_path / "wal")
    loaded = other.load()
    assert [p for _, p in loaded.records] == [b"live"] and loaded.claimed == 0
    await other.release(10**9)
    assert len(list(live.files())) == 1  # the other process may not delete it
    await live.close()
    orphan = WriteAheadLog(tmp_path / "wal")  # its writer is gone: now it is an orphan
    loaded = orphan.load()
    assert loaded.claimed == 1
    await orphan.release(loaded.records[-1][0])
    assert list(orphan.files()) == []


async def test_segments_roll_over_past_their_size(tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path / "wal", segment_bytes=256)
    seqs = [await wal.append(p * 20) for p in payloads(6)]
    assert len(list(wal.files())) >= 3
    await wal.release(seqs[2])
    left = WriteAheadLog(tmp_path / "wal", writer=False).load()
    assert {p for _, p in left.records} >= {p * 20 for p in payloads(6)[3:]}
    await wal.close()


# --- the crash: SIGKILL after `record` returned ---------------------------------------------
CHILD = textwrap.dedent("""
    import asyncio, sys
    from store.base import Event, EvictedChunk
    from store.lance import LanceStore
    from store.media import Media
    from tests.support.attachments import image_part, png, with_media
    from tests.support.fakes import FakeEmbedder

    async def main(path: str, replay: bool) -> None:
        store = LanceStore(path, FakeEmbedder(), replay=replay)
        await store._ready()
        print("ready", flush=True)
        i = 0
        while True:  # request after request, a few at a time, until killed
            batch = range(i, i + 4)
            await asyncio.gather(*(store.record(
                [EvictedChunk("acme", f"s{n % 3}", f"c{n}", n, "tool", "TRANSIENT", 50,
                              f"chunk {n} " + "words " * 300,
                              Media.of(with_media("see", image_part(png(seed=n)))))],
                [Event("acme", f"s{n % 3}", n, f"c{n}", "TRANSIENT", 50, 0.1, "evict",
                       "lowest EFV", "rwoe")]) for n in batch))
            print(*batch, flush=True)  # acknowledged: durable from here on
            i += 4

    asyncio.run(main(sys.argv[1], sys.argv[2] == "replay"))
""")


@pytest.mark.parametrize("replay", ["paused", "replay"])
async def test_sigkill_after_record_returned_loses_nothing(tmp_path: Path, replay: str) -> None:
    db = tmp_path / "db"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(db), replay], cwd=ROOT,
                             stdout=subprocess.PIPE, text=True)
    acked: set[int] = set()
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        while len(acked) < 120:
            line = child.stdout.readline()
            assert line, "the child died"
            acked.update(int(n) for n in line.split())
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    assert list(Path(db, "_wal").glob("*.wal"))  # something was left for the restart

    store = LanceStore(db, FakeEmbedder())
    try:
        for s in range(3):  # visible at once, from the log, before any replay
            mine = {n for n in acked if n % 3 == s}
            got = await store.fetch("acme", f"s{s}", [f"c{n}" for n in sorted(mine)])
            assert {c.chunk_id for c in got} == {f"c{n}" for n in mine}
            assert all(c.text.startswith(f"chunk {c.chunk_id[1:]} ") for c in got)
            assert {f"c{n}" for n in mine} <= await store.evicted_ids("acme", f"s{s}")
        assert await images(store, acked) == {n: png(seed=n) for n in acked}  # the log's
        await store.flush(60)  # replayed into LanceDB and embedded
        assert await images(store, acked) == {n: png(seed=n) for n in acked}  # LanceDB's
        chunks = await store._tables[S.CHUNKS].query().select(["chunk_id"]).to_list()
        events = await store._tables[S.EVENTS].query().select(["chunk_id"]).to_list()
        assert {f"c{n}" for n in acked} <= {r["chunk_id"] for r in chunks}
        assert {f"c{n}" for n in acked} <= {r["chunk_id"] for r in events}
        assert len(chunks) == len({r["chunk_id"] for r in chunks})  # nothing twice
        stats = await store.stats()
        assert stats["wal_pending"] == 0 and stats["backlog"] == 0
        assert stats["passages"] >= len(acked)
        assert list(Path(db, "_wal").glob("*.wal")) == []  # applied, then deleted
    finally:
        await store.close()


async def images(store: LanceStore, acked: set[int]) -> dict[int, bytes]:
    """Each acknowledged chunk's image, as the store gives it back."""
    out = {}
    for n in sorted(acked):
        [image] = (await store.media("acme", f"s{n % 3}", f"c{n}")).attachments
        out[n] = image.data
    return out
