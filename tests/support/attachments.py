"""Real media for tests: a valid PNG, a one-page PDF, a WAV header, and the OpenAI content
parts that carry them (data URLs and bare base64, as clients send them)."""

from __future__ import annotations

import base64
import struct
import zlib
from typing import Any


def png(width: int = 2, height: int = 2, seed: int = 0) -> bytes:
    """A valid RGB PNG; `seed` changes its pixels (and so its bytes)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))
    rows = b"".join(b"\0" + bytes((seed + x * 40 + y * 80) % 256 for x in range(width * 3))
                    for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))


PDF = (b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n"
       b"2 0 obj << /Type /Pages /Kids [3 0 R] /Count 1 >> endobj\n"
       b"3 0 obj << /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >> endobj\n"
       b"trailer << /Root 1 0 R >>\n%%EOF\n")
WAV = b"RIFF$\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x40\x1f\x00\x00" + bytes(12)


def data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def image_part(data: bytes, mime: str = "image/png") -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": data_url(mime, data), "detail": "low"}}


def pdf_part(data: bytes = PDF, filename: str = "invoice.pdf") -> dict[str, Any]:
    return {"type": "file", "file": {"filename": filename,
                                     "file_data": data_url("application/pdf", data)}}


def with_media(text: str, *parts: dict[str, Any]) -> dict[str, Any]:
    """A user message: its text first, then the parts."""
    return {"role": "user", "content": [{"type": "text", "text": text}, *parts]}
