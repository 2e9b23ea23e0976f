"""The write-ahead log's bytes (store/wal.py): one segment file's format.

`CTXWAL1\\n`, then records `<u32 length><u32 crc32(payload)><payload>\\n`
(little-endian; the payload is the caller's bytes, JSON for the store). A record ends on
a line of its own. `parse` reads the good records and says how the segment ended: "ok",
"torn" (a short record or a run of zero bytes at the end: an append that never returned)
or "corrupt" (a checksum mismatch, or not a segment at all).
"""

from __future__ import annotations

import struct
import zlib

MAGIC = b"CTXWAL1\n"
HEADER = struct.Struct("<II")  # payload length, crc32(payload)
END = 0x0A  # b"\n" after each payload: a record ends on a line of its own


def frame(payload: bytes) -> bytes:
    return HEADER.pack(len(payload), zlib.crc32(payload)) + payload + b"\n"


def parse(data: bytes) -> tuple[list[bytes], int, str]:
    """Payloads of the good records, the offset after the last one, and how it ended:
    "ok", "torn" (an unfinished append at the end) or "corrupt" (a checksum mismatch)."""
    if len(data) < len(MAGIC):
        return [], 0, ("torn" if MAGIC.startswith(data) or not any(data) else "corrupt")
    if not data.startswith(MAGIC):
        return [], 0, "corrupt"
    out: list[bytes] = []
    pos, n = len(MAGIC), len(data)
    while pos < n:
        if not any(memoryview(data)[pos:]):  # zeros past the end of the last sync
            return out, pos, "torn"
        if n - pos < HEADER.size + 1:
            return out, pos, "torn"
        length, crc = HEADER.unpack_from(data, pos)
        end = pos + HEADER.size + length
        if end + 1 > n:
            return out, pos, "torn"
        payload = data[pos + HEADER.size:end]
        if zlib.crc32(payload) != crc or data[end] != END:
            return out, pos, "corrupt"
        out.append(payload)
        pos = end + 1
    return out, pos, "ok"
