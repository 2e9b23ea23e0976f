"""Images, audio and files of evicted messages (store/media.py): split from the message,
kept whole by both stores (through the write-ahead log and into LanceDB's `attachments`
table), and put back into the message as it was sent."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path
from typing import Any

import lancedb
import pyarrow as pa
import pytest

from store import schema as S
from store.base import Event, EvictedChunk, MemoryStore
from store.lance import LanceStore
from store.media import NO_MEDIA, Attachment, Media
from tests.support.attachments import PDF, WAV, data_url, image_part, pdf_part, png, with_media
from tests.support.fakes import FakeEmbedder

ALL_SHAPES: dict[str, Any] = {"role": "user", "content": [
    {"type": "text", "text": "What is wrong in these?"},
    image_part(png()),
    {"type": "image_url", "image_url": {"url": "https://example.com/a/cat.jpg?size=2"}},
    {"type": "input_audio", "input_audio": {"data": base64.b64encode(WAV).decode(),
                                            "format": "wav"}},
    pdf_part(),
    {"type": "file", "file": {"file_id": "file-6F2ksmvXxt4VdoqmHRw6kL"}},
    {"type": "input_image", "image_url": data_url("image/png", png(seed=9))},
    {"type": "input_file", "filename": "notes.txt", "file_data": base64.b64encode(b"hi").decode()},
]}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_every_part_shape_is_split_and_put_back_as_sent() -> None:
    media = Media.of(ALL_SHAPES)
    assert media.restore() == ALL_SHAPES
    assert [(a.index, a.kind, a.mime, a.data, a.url, a.filename) for a in media.attachments] == [
        (1, "image", "image/png", png(), "", ""),
        (2, "image", "image/jpeg", b"", "https://example.com/a/cat.jpg?size=2", ""),
        (3, "audio", "audio/wav", WAV, "", ""),
        (4, "file", "application/pdf", PDF, "", "invoice.pdf"),
        (5, "file", "", b"", "file-6F2ksmvXxt4VdoqmHRw6kL", ""),
        (6, "image", "image/png", png(seed=9), "", ""),
        (7, "file", "text/plain", b"hi", "", "notes.txt"),
    ]
    assert media.attachments[0].sha256 == sha(png())
    assert media.summary() == ("3 images (image/png, image/jpeg), 1 audio (audio/wav), "
                               "3 files (application/pdf, remote, text/plain)")
    assert base64.b64encode(png()).decode() not in media.message  # the skeleton is small
    assert len(media.message) < 1000


def test_text_only_messages_have_no_media() -> None:
    for msg in ({"role": "user", "content": "plain"}, {"role": "assistant", "content": None},
                {"role": "user", "content": [{"type": "text", "text": "a"}]},
                {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}):
        assert Media.of(msg) is NO_MEDIA and NO_MEDIA.restore() is None


def test_hostile_payloads_stay_data() -> None:
    msg = with_media("x", {"type": "image_url", "image_url": {
        "url": "data:text/html\r\nX-Evil: 1;base64," + base64.b64encode(b"<p>").decode()}},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,@@not base64@@"}})
    media = Media.of(msg)
    assert [(a.mime, a.data, a.url) for a in media.attachments] == [
        ("", b"<p>", ""),  # a mime type that is not type/subtype is dropped
        ("image/png", b"", "data:image/png;base64,@@not base64@@")]  # kept as given
    restored = media.restore()
    assert restored is not None and restored["content"][1]["image_url"]["url"] == (
        "data:application/octet-stream;base64," + base64.b64encode(b"<p>").decode())


def evicted(cid: str, msg: dict[str, Any], session: str = "s1") -> EvictedChunk:
    return EvictedChunk("acme", session, cid, 2, "user", "STRUCTURAL", 900, "What is wrong?",
                        media=Media.of(msg))


def evict(cid: str, session: str = "s1") -> Event:
    return Event("acme", session, 5, cid, "STRUCTURAL", 900, 0.2, "evict", "oldest first",
                 "truncate", time=1_767_000_000.0)


async def test_memory_store_keeps_them_and_the_event_says_what() -> None:
    store = MemoryStore()
    msg = with_media("Is this invoice right?", image_part(png()), pdf_part())
    await store.record([evicted("c1", msg)], [evict("c1")])
    assert (await store.media("acme", "s1", "c1")).restore() == msg
    assert (await store.media("acme", "s2", "c1")) is NO_MEDIA
    [e] = await store.events("acme", "s1")
    assert e.media == "1 image (image/png), 1 file (application/pdf)"
    [c] = await store.fetch("acme", "s1", ["c1"])
    assert c.media is NO_MEDIA and c.text == "What is wrong?"  # fetch: the text


async def test_lance_store_keeps_the_bytes_from_the_log_and_from_lancedb(
        tmp_path: Path) -> None:
    msg = with_media("Is this invoice right?", image_part(png(64, 64)), pdf_part())
    logged = LanceStore(tmp_path / "db", FakeEmbedder(), replay=False)  # the log only
    try:
        await logged.record([evicted("c1", msg)], [evict("c1")])
        await logged.record([evicted("c1", msg)], [evict("c1")])  # a retried request
        got = await logged.media("acme", "s1", "c1")
        assert got.restore() == msg and got.attachments[0].data == png(64, 64)
        assert (await logged.events("acme", "s1"))[0].media == (
            "1 image (image/png), 1 file (application/pdf)")
    finally:
        await logged.close()
    store = LanceStore(tmp_path / "db", FakeEmbedder())  # replays the log into LanceDB
    try:
        await store.flush(60)
        assert store.journal.backlog == 0
        got = await store.media("acme", "s1", "c1")
        assert got.restore() == msg
        assert [(a.index, a.data) for a in got.attachments] == [(1, png(64, 64)), (2, PDF)]
        rows = await store._tables[S.ATTACHMENTS].query().to_list()
        assert sorted((r["index"], r["size"], r["sha256"], type(r["data"])) for r in rows) == [
            (1, len(png(64, 64)), sha(png(64, 64)), bytes), (2, len(PDF), sha(PDF), bytes)]
        assert (await store.events("acme", "s1"))[0].media.startswith("1 image")
        assert await store.media("acme", "s1", "nope") is NO_MEDIA
        assert await store.media("other", "s1", "c1") is NO_MEDIA  # another tenant's
    finally:
        await store.close()


@pytest.mark.parametrize("background", [True, False])  # through the log, or direct
async def test_a_store_made_before_media_is_upgraded(tmp_path: Path, background: bool) -> None:
    """An older store (chunks without `message`, events without `media`) opens, gets the
    columns from its first writer (not from a reader), and its old rows read as text-only."""
    db = await lancedb.connect_async(tmp_path / "db")
    old = {S.CHUNKS: pa.schema([f for f in S.CHUNK_SCHEMA if f.name != "message"]),
           S.EVENTS: pa.schema([f for f in S.EVENT_SCHEMA if f.name != "media"])}
    first = S.chunk_rows([EvictedChunk("acme", "s1", "old", 1, "tool", "TRANSIENT", 3, "t")])
    for name, sch in old.items():
        await db.create_table(name, schema=sch)
    tbl = await db.open_table(S.CHUNKS)
    await tbl.add(pa.Table.from_pylist([{k: v for k, v in r.items() if k != "message"}
                                        for r in first], schema=old[S.CHUNKS]))
    reader = LanceStore(tmp_path / "db", FakeEmbedder(), background=False)  # ctxwarden log
    try:
        assert [c.text for c in await reader.fetch("acme", "s1", ["old"])] == ["t"]
        assert await reader.media("acme", "s1", "old") is NO_MEDIA
    finally:
        await reader.close()
    assert "message" not in (await tbl.schema()).names  # a reader changes nothing
    store = LanceStore(tmp_path / "db", FakeEmbedder(), background=background)
    try:
        msg = with_media("see", image_part(png()))
        await store.record([evicted("c1", msg)], [evict("c1")])
        await store.flush(60)
        assert (await store.media("acme", "s1", "c1")).restore() == msg
        assert await store.media("acme", "s1", "old") is NO_MEDIA
        assert [c.text for c in await store.fetch("acme", "s1", ["old"])] == ["t"]
        names = (await store._tables[S.CHUNKS].schema()).names
        assert names == S.CHUNK_SCHEMA.names
    finally:
        await store.close()


def test_attachment_view_is_what_the_admin_api_shows() -> None:
    a = Attachment(4, "file", "application/pdf", PDF, "", "invoice.pdf", sha(PDF))
    assert a.view() == {"index": 4, "kind": "file", "mime": "application/pdf",
                        "filename": "invoice.pdf", "bytes": len(PDF), "url": None,
                        "sha256": sha(PDF)}
