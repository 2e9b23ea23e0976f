"""Real media for tests: images, PDFs and audio made by Pillow, `wave` and by hand, and the
content parts that carry them (OpenAI's chat-completions shapes)."""

from __future__ import annotations

import base64
import io
import random
import wave
import zlib
from typing import Any

from PIL import Image


def image(width: int, height: int, fmt: str = "PNG", noise: bool = False) -> bytes:
    if noise:
        pixels = random.Random(width * height).randbytes(width * height * 3)
        img = Image.frombytes("RGB", (width, height), pixels)
    else:
        img = Image.new("RGB", (width, height), (40, 90, 160))
    out = io.BytesIO()
    img.save(out, fmt)
    return out.getvalue()


def pdf(pages: int, side: int = 16) -> bytes:
    """A PDF of `pages` pages (Pillow's writer: one /Type /Page object per page); noisy
    pages of `side` pixels make it big (256 → ~75 KB a page)."""
    imgs = [Image.frombytes("RGB", (side, side), random.Random(i).randbytes(side * side * 3))
            for i in range(pages)]
    out = io.BytesIO()
    imgs[0].save(out, "PDF", save_all=True, append_images=imgs[1:])
    return out.getvalue()


def pdf_object_streams(pages: int) -> bytes:
    """A PDF 1.5 whose page objects live only in a Flate-compressed object stream, as
    modern writers (and `qpdf --object-streams=generate`) emit them."""
    objs = [b"<< /Type /Pages /Kids [" + b" ".join(b"%d 0 R" % (3 + i) for i in range(pages))
            + b"] /Count %d >>" % pages]
    objs += [b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] >>"] * pages
    body = b" ".join(objs)
    offsets = b" ".join(b"%d 0" % (2 + i) for i in range(len(objs)))
    packed = zlib.compress(offsets + b" " + body)
    return (b"%PDF-1.5\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n"
            b"9 0 obj\n<< /Type /ObjStm /N " + str(len(objs)).encode()
            + b" /First " + str(len(offsets) + 1).encode() + b" /Filter /FlateDecode /Length "
            + str(len(packed)).encode() + b" >>\nstream\n" + packed
            + b"\nendstream\nendobj\ntrailer\n<< /Root 1 0 R >>\n%%EOF\n")


def wav(seconds: float, rate: int = 16_000) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"\0\0" * int(rate * seconds))
    return out.getvalue()


MP3_FRAME = bytes.fromhex("FFFB9064") + b"\0" * 413  # MPEG-1 layer III, 128 kbps, 44.1 kHz


def mp3(frames: int) -> bytes:
    """`frames` frames of 1,152 samples at 44.1 kHz behind an ID3v2 tag."""
    return b"ID3\x03\x00\x00\x00\x00\x00\x0a" + b"\0" * 10 + MP3_FRAME * frames


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def image_part(data: bytes | str, detail: str | None = None, mime: str = "image/png",
               ) -> dict[str, Any]:
    url = data if isinstance(data, str) else f"data:{mime};base64,{b64(data)}"
    spec: dict[str, Any] = {"url": url}
    if detail is not None:
        spec["detail"] = detail
    return {"type": "image_url", "image_url": spec}


def file_part(data: bytes | None = None, file_id: str = "file-abc123") -> dict[str, Any]:
    if data is None:
        return {"type": "file", "file": {"file_id": file_id}}
    return {"type": "file", "file": {"filename": "doc.pdf",
                                     "file_data": f"data:application/pdf;base64,{b64(data)}"}}


def audio_part(data: bytes, fmt: str = "wav") -> dict[str, Any]:
    return {"type": "input_audio", "input_audio": {"data": b64(data), "format": fmt}}


def text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}
