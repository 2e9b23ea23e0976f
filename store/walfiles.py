"""The write-ahead log's segment files on disk (store/wal.py keeps their bookkeeping).

A segment is created locked (an exclusive `flock` while its writer lives), headed and
synced together with its directory entry; read back, claimed if nobody holds it (an
orphan: its writer died); cut back to its last good record after a failed write; and
deleted once applied, or kept as `*.corrupt` when a record in it did not check out.
Every sync goes through `sync` (`fdatasync` where there is one: data and the size; macOS
has only `fsync`), which tests replace to play a disk that refuses.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

import structlog

from store.walformat import MAGIC, parse

log = structlog.get_logger("ctxwarden.store")

SUFFIX = ".wal"
sync = getattr(os, "fdatasync", os.fsync)


@dataclass(slots=True)
class Segment:
    path: Path
    fd: int | None  # open (and flocked) while this process holds it
    last_seq: int = 0  # the newest record in it (0: none)
    size: int = 0  # bytes known good
    owned: bool = True  # ours or a claimed orphan: delete once applied
    corrupt: bool = False  # keep as *.corrupt instead of deleting


def read(path: Path, claim: bool) -> tuple[Segment, list[bytes], str] | None:
    """A segment's records and how it ended ("ok", "torn", "corrupt"; see walformat.parse),
    claimed (kept open and locked) when `claim` and no live process holds it; None when
    it is gone (its writer applied and deleted it just now)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    claimed = claim and try_lock(fd)
    try:
        with open(fd, "rb", closefd=False) as f:
            data = f.read()
    except OSError:
        os.close(fd)
        raise
    payloads, good, how = parse(data)
    if how == "corrupt":
        log.error("wal_corrupt", segment=path.name, offset=good, kept=len(payloads),
                  size=len(data))
    elif how == "torn":
        log.warning("wal_torn_tail", segment=path.name, offset=good, size=len(data))
    seg = Segment(path, fd if claimed else None, size=good, owned=claimed,
                  corrupt=how == "corrupt")
    if not claimed:
        os.close(fd)
    return seg, payloads, how


def create(directory: Path, name: str) -> Segment:
    """A new segment `name` in `directory` (made if missing), created, locked, headed and
    synced with its directory entry."""
    made_dir = not directory.is_dir()
    if made_dir:
        directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
    seg = Segment(path, fd, last_seq=0, size=0)
    try:
        if not try_lock(fd):
            raise BlockingIOError(errno.EWOULDBLOCK, f"{path} is locked")
        os.write(fd, MAGIC)
        sync(fd)
        sync_dir(directory)
        if made_dir:
            sync_dir(directory.parent)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            path.unlink()
        raise
    seg.size = len(MAGIC)
    return seg


def write(seg: Segment, data: bytes) -> None:
    """Append `data` to the open segment and sync it."""
    assert seg.fd is not None
    view = memoryview(data)
    while view:
        view = view[os.write(seg.fd, view):]
    sync(seg.fd)


def cut_back(seg: Segment) -> None:
    """Truncate the segment to its last good record (after a failed write)."""
    if seg.fd is not None:
        with contextlib.suppress(OSError):
            os.ftruncate(seg.fd, seg.size)
            sync(seg.fd)


def remove(seg: Segment) -> None:
    """Close the segment and delete it (rename it `*.corrupt` if it is)."""
    if seg.fd is not None:
        with contextlib.suppress(OSError):
            os.close(seg.fd)
        seg.fd = None
    try:
        if seg.corrupt:
            seg.path.rename(seg.path.with_name(seg.path.name + ".corrupt"))
        else:
            seg.path.unlink(missing_ok=True)
    except OSError as exc:  # a read-only directory: replayed again (idempotent) later
        log.warning("wal_delete_failed", segment=seg.path.name, error=type(exc).__name__)


def try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
