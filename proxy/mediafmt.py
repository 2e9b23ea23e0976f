"""Just enough of the media formats to price them: image sizes, PDF pages, audio length.

Parsed by hand from the bytes' headers (no imaging or PDF library on the request path).
Every function answers None when it cannot tell; the caller then counts the worst case.
"""

from __future__ import annotations

import binascii
import itertools
import re
import struct
import zlib

HEAD_BYTES = 65_536  # decoded first; a JPEG's size can sit behind its EXIF and ICC segments


def split_data_url(value: str) -> tuple[str, str]:
    """(mime type, base64 payload) of a `data:` URL; ("", value) for bare base64."""
    if not value.startswith("data:"):
        return "", value
    head, _, payload = value.partition(",")
    return head[5:].split(";", 1)[0].lower(), payload


def b64(payload: str, limit: int | None = None) -> bytes:
    """Decoded bytes (the first ~`limit` of them), b"" when it is not base64."""
    if limit is not None:
        payload = payload[: (limit // 3 + 1) * 4]
    try:
        return binascii.a2b_base64(payload.encode("ascii", "ignore"))
    except (binascii.Error, ValueError):
        return b""


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG, GIF, WebP or JPEG header."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        w, h = struct.unpack(">II", data[16:24])
    elif data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        w, h = struct.unpack("<HH", data[6:10])
    elif data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp(data)
    elif data[:2] == b"\xff\xd8":
        return _jpeg(data)
    else:
        return None
    return (w, h) if w > 0 and h > 0 else None


def _webp(data: bytes) -> tuple[int, int] | None:
    kind = data[12:16]
    if kind == b"VP8 " and len(data) >= 30:
        w, h = struct.unpack("<HH", data[26:30])
        w, h = w & 0x3FFF, h & 0x3FFF
    elif kind == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        w, h = (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    elif kind == b"VP8X" and len(data) >= 30:
        w = int.from_bytes(data[24:27], "little") + 1
        h = int.from_bytes(data[27:30], "little") + 1
    else:
        return None
    return (w, h) if w > 0 and h > 0 else None


_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # start-of-frame markers
MAX_SEGMENTS = 10_000  # a real JPEG reaches its frame header within a few dozen


def _jpeg(data: bytes) -> tuple[int, int] | None:
    i, n = 2, len(data)
    for _ in range(MAX_SEGMENTS):
        if i + 9 > n:
            return None
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0x01, *range(0xD0, 0xDA)):  # standalone markers carry no length
            i += 2
            continue
        if marker in _SOF:
            h, w = struct.unpack(">HH", data[i + 5:i + 9])
            return (w, h) if w > 0 and h > 0 else None
        i += 2 + int.from_bytes(data[i + 2:i + 4], "big")
    return None


_PAGE = re.compile(rb"/Type\s*/Page(?![A-Za-z])")  # a page object, not the /Pages tree
_PAGES = re.compile(rb"/Type\s*/Pages\b")
_COUNT = re.compile(rb"/Count\s+(\d+)")
_OBJSTM = re.compile(rb"\bobj\b(.{0,400}?)\bstream\r?\n", re.S)
MAX_INFLATE = 16 * 1024 * 1024  # per object stream: a deflate bomb stops here
MAX_SCAN = 1_000  # object streams inflated, /Pages nodes read: a real file has far fewer


def pdf_pages(data: bytes) -> int | None:
    """Page objects, in the file and in its compressed object streams (PDF 1.5+ keeps
    them there); else the page tree's /Count; None when neither is readable."""
    if not data.startswith(b"%PDF"):
        return None
    texts = [data]
    view = memoryview(data)
    for m in itertools.islice((m for m in _OBJSTM.finditer(data) if b"/ObjStm" in m.group(1)
                               and b"/FlateDecode" in m.group(1)), MAX_SCAN):
        try:
            texts.append(zlib.decompressobj().decompress(view[m.end():], MAX_INFLATE))
        except zlib.error:
            continue
    pages = sum(len(_PAGE.findall(t)) for t in texts)
    if pages:
        return pages
    counts = [int(c) for t in texts for m in itertools.islice(_PAGES.finditer(t), MAX_SCAN)
              for c in _COUNT.findall(t, max(0, m.start() - 300), m.end() + 300)]
    return max(counts) if counts and max(counts) > 0 else None


def wav_seconds(data: bytes) -> float | None:
    """Length of a RIFF/WAVE file: the data chunk's bytes over the format's byte rate."""
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return None
    i, rate = 12, 0
    while i + 8 <= len(data):
        cid, size = data[i:i + 4], int.from_bytes(data[i + 4:i + 8], "little")
        if cid == b"fmt " and i + 20 <= len(data):
            rate = int.from_bytes(data[i + 16:i + 20], "little")
        elif cid == b"data":
            if rate <= 0:
                return None
            left = len(data) - i - 8  # streamed WAVs declare 0 or 0xFFFFFFFF
            return (min(size, left) if 0 < size < 0xFFFFFFFF else left) / rate
        i += 8 + size + (size & 1)
    return None


_MP3_KBPS = {1: (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
             2: (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160)}
_MP3_RATES = {3: (44100, 48000, 32000), 2: (22050, 24000, 16000), 0: (11025, 12000, 8000)}
MAX_FRAMES = 50_000  # ~22 minutes at 44.1 kHz; the rest is extrapolated


def mp3_seconds(data: bytes) -> float | None:
    """Length of an MPEG layer III stream: its frames walked one by one (exact for CBR and
    VBR); past MAX_FRAMES the rest counts at the rate walked, and bytes left where the walk
    loses sync at the first frame's bitrate."""
    i = 0
    if data[:3] == b"ID3" and len(data) >= 10:
        size = sum((b & 0x7F) << (7 * (3 - k)) for k, b in enumerate(data[6:10]))
        i = 10 + size + (10 if data[5] & 0x10 else 0)
    seconds, first_kbps, start, walked = 0.0, 0, i, 0
    while walked < MAX_FRAMES:
        if i + 4 > len(data):
            break
        head = int.from_bytes(data[i:i + 4], "big")
        version, layer = (head >> 19) & 3, (head >> 17) & 3
        kbps_i, rate_i = (head >> 12) & 15, (head >> 10) & 3
        if head >> 21 != 0x7FF or version == 1 or layer != 1 or kbps_i in (0, 15) or rate_i == 3:
            break
        kbps = _MP3_KBPS[1 if version == 3 else 2][kbps_i]
        rate = _MP3_RATES[version][rate_i]
        samples = 1152 if version == 3 else 576
        first_kbps = first_kbps or kbps
        seconds += samples / rate
        walked += 1
        i += samples // 8 * kbps * 1000 // rate + ((head >> 9) & 1)
    if not first_kbps:
        return None
    rest = max(0, len(data) - i)
    if walked == MAX_FRAMES:  # walked far enough: the rest at the rate walked
        return seconds + rest * seconds / (i - start)
    return seconds + rest * 8 / (first_kbps * 1000)
