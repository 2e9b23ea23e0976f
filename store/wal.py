"""The write-ahead log: an offload is durable once its record is fsynced here.

Why: a LanceDB commit writes a data file, a manifest and a transaction file per table
and costs 10-20 ms with the table's writer queue in front of it; a request that evicts
must not wait for that. Appending one record to a local file and fsyncing it is one
`write` and one `fdatasync`; LanceDB gets the rows later, from the background replayer
(store/journal.py), and on start from whatever a crash left here.

Layout: a directory of segment files `<ms>-<pid>-<rand>-<n>.wal`. Each process writes
only its own segments and holds an exclusive `flock` on each while it is open, so two
processes on one store never interleave bytes, and a segment nobody holds is an orphan
(its writer died) that the next writer to open the log claims and replays. A segment is
deleted once every record in it is in LanceDB; when the log is fully applied the open
segment is closed and deleted too, so an idle store has no open segment and its next
append creates one (that is also where a read-only or vanished directory shows).

Segment files (created, read, cut back, deleted): store/walfiles.py. Format
(store/walformat.py): a header line, then length- and checksum-framed records.
Reading stops at the first record that does not check out: a torn tail (its append never
returned) is ignored, a checksum mismatch is corruption (logged; the segment is kept as
`*.corrupt` rather than deleted).

Group commit: appends that arrive while a write is in flight are written together with
one `write` and one `fdatasync`, so 200 concurrent requests cost a handful of syncs, not
200; `append` returns only once its bytes are synced. A failed write or sync fails every
append in its group (nothing of theirs is acknowledged), truncates the segment back to
its last good record and retires it; the next append starts a new segment.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from store import walfiles
from store.schema import hkey
from store.walfiles import SUFFIX, Segment
from store.walformat import frame

log = structlog.get_logger("ctxwarden.store")

SEGMENT_BYTES = 64 << 20  # start a new segment past this (old ones go once applied)
Durable = Callable[[int], None]


@dataclass(slots=True)
class Loaded:
    """What `WriteAheadLog.load` found: records in order, and how each segment ended."""

    records: list[tuple[int, bytes]] = field(default_factory=list)  # (seq, payload)
    segments: int = 0
    claimed: int = 0
    torn: int = 0
    corrupt: int = 0


class WriteAheadLog:
    """One store's log directory. `writer=False`: read it only (`load`), never claim,
    write or delete (`ctxwarden log`, a second reader)."""

    def __init__(self, directory: str | Path, *, writer: bool = True,
                 segment_bytes: int = SEGMENT_BYTES) -> None:
        self.dir = Path(directory)
        self.writer = writer
        self.segment_bytes = segment_bytes
        self._lock = threading.Lock()  # segment state: the write thread vs. `release`
        self._segments: list[Segment] = []  # oldest first; the last may be `_current`
        self._current: Segment | None = None
        self._seq = 0
        self._queue: list[tuple[bytes, Durable | None, asyncio.Future[int]]] = []
        self._writer_task: asyncio.Task[None] | None = None
        self._prefix = f"{os.getpid()}-{secrets.token_hex(3)}"
        self._n = 0
        self.appends = 0  # records written (tests, benchmarks)
        self.syncs = 0  # write+fdatasync groups that carried them

    # -- reading at start ------------------------------------------------------------------
    def load(self) -> Loaded:
        """Read every segment (blocking: call it in a thread). A writer claims the orphans
        (segments no live process holds): they are deleted once `release` says their
        records are applied. Records get sequence numbers in segment order."""
        out = Loaded()
        if not self.dir.is_dir():
            return out
        mine = {s.path for s in self._segments}
        for path in sorted(self.dir.glob(f"*{SUFFIX}")):
            if path in mine:
                continue
            found = walfiles.read(path, self.writer)
            if found is None:  # its writer applied and deleted it just now
                continue
            seg, payloads, how = found
            out.segments += 1
            out.corrupt += how == "corrupt"
            out.torn += how == "torn"
            for p in payloads:
                self._seq += 1
                out.records.append((self._seq, p))
            seg.last_seq = self._seq
            if seg.owned:
                out.claimed += 1
                with self._lock:
                    self._segments.append(seg)
        return out

    # -- appending -------------------------------------------------------------------------
    async def append(self, payload: bytes, durable: Durable | None = None) -> int:
        """Durable (fsynced) when it returns; its sequence number. Raises the OSError of a
        write or sync that failed (nothing of this append is acknowledged then).

        `durable(seq)` runs once the record is synced, before `append` returns and in
        sequence order across appends (callers may resume in any order), so whoever
        tracks what is applied never sees a later record before an earlier one."""
        if not self.writer:
            raise PermissionError(errno.EROFS, "this log was opened read-only")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[int] = loop.create_future()
        fut.add_done_callback(_retrieve)  # a caller that left never reads its outcome
        self._queue.append((frame(payload), durable, fut))
        if self._writer_task is None or self._writer_task.done():
            self._writer_task = loop.create_task(self._write_queued(), name="wal-writer")
        return await asyncio.shield(fut)  # a caller that leaves does not cancel the group

    async def _write_queued(self) -> None:
        while self._queue:
            batch = self._queue[:]
            del self._queue[:]
            first = self._seq + 1
            self._seq += len(batch)
            try:
                await asyncio.to_thread(self._write, b"".join(d for d, _, _ in batch),
                                        self._seq)
            except Exception as exc:
                for _, _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            self.appends += len(batch)
            for i, (_, durable, fut) in enumerate(batch):
                if durable is not None:
                    try:
                        durable(first + i)
                    except Exception:  # the record is synced all the same
                        log.exception("wal_durable_callback_failed", seq=first + i)
                if not fut.done():
                    fut.set_result(first + i)

    def _write(self, data: bytes, last_seq: int) -> None:
        with self._lock:
            seg = self._current
            if seg is None or seg.size >= self.segment_bytes:
                seg = self._open_segment()
            try:
                walfiles.write(seg, data)
            except BaseException:
                self._retire(seg)
                raise
            seg.size += len(data)
            seg.last_seq = last_seq
            self.syncs += 1

    def _open_segment(self) -> Segment:
        """A new segment, created, locked, headed and synced with its directory entry."""
        if self._current is not None:  # full: keep it (locked) until it is applied
            self._current = None
        self._n += 1
        seg = walfiles.create(
            self.dir, f"{int(time.time() * 1000):013d}-{self._prefix}-{self._n:06d}{SUFFIX}")
        self._segments.append(seg)
        self._current = seg
        return seg

    def _retire(self, seg: Segment) -> None:
        """After a failed write: cut the segment back to its last good record, close it.
        Its good records stay (deleted once applied); the next append opens a new one."""
        if self._current is seg:
            self._current = None
        walfiles.cut_back(seg)
        if seg.last_seq == 0:  # nothing acknowledged in it
            self._drop(seg)

    # -- after replay ----------------------------------------------------------------------
    async def release(self, applied_seq: int) -> None:
        """Every record up to `applied_seq` is in LanceDB: delete the segments that hold
        nothing newer; close the open one too if it is fully applied."""
        await asyncio.to_thread(self._release, applied_seq)

    def _release(self, applied_seq: int) -> None:
        with self._lock:
            for seg in list(self._segments):
                if seg.last_seq <= applied_seq and (seg is not self._current
                                                    or seg.last_seq == self._seq):
                    if seg is self._current:
                        self._current = None
                    self._drop(seg)

    def _drop(self, seg: Segment) -> None:
        walfiles.remove(seg)
        if seg in self._segments:
            self._segments.remove(seg)

    @property
    def open_segments(self) -> int:
        return len(self._segments)

    def files(self) -> Iterator[Path]:
        return iter(sorted(self.dir.glob(f"*{SUFFIX}"))) if self.dir.is_dir() else iter(())

    async def close(self) -> None:
        """Wait for appends in flight; close (and unlock) every segment, deleting none:
        what is not applied yet is replayed by the next writer to open this log."""
        task = self._writer_task
        if task is not None and not task.done():
            with contextlib.suppress(Exception):
                await task
        with self._lock:
            for seg in self._segments:
                if seg.fd is not None:
                    with contextlib.suppress(OSError):
                        os.close(seg.fd)
                    seg.fd = None
            self._segments.clear()
            self._current = None


def _retrieve(fut: asyncio.Future[int]) -> None:
    if not fut.cancelled():
        fut.exception()


def default_wal_dir(uri: str) -> Path:
    """Where a store's log lives (store/lance.py): `<store>/_wal` for a local store;
    `./data/wal/<digest of the URI>` for an object-store URI."""
    if "://" not in uri or uri.startswith("file://"):
        return Path(uri.removeprefix("file://")) / "_wal"
    return Path("data") / "wal" / hkey("wal", uri)[:16]
