"""Images, PDFs and audio cost what the provider charges, through the real app.

Each expected figure is worked out here from the provider's published rule (see
proxy/media.py), never read back from the proxy: a PDF used to count as its base64 JSON
(~270k tokens for 300 KB) and every image as a flat 765.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import tiktoken
from aiohttp.test_utils import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.mediafmt import image_size, mp3_seconds, pdf_pages, wav_seconds
from tests.support.app import CHAT, ClientFactory, make, one_route, settings_for
from tests.support.media import (
    audio_part,
    file_part,
    image,
    image_part,
    mp3,
    pdf,
    pdf_object_streams,
    text_part,
    wav,
)
from tests.support.openai_server import UpstreamServer

O200K = tiktoken.get_encoding("o200k_base")
FRAME = 3 + 4  # reply priming + one message's framing
PAGE_OPENAI = 3000 + 85 + 6 * 170  # text + an A4 page at 150 dpi: 768×1086 → 2×3 tiles


def n(text: str) -> int:
    return len(O200K.encode_ordinary(text))


async def ask(client: TestClient[Any, Any], parts: list[dict[str, Any]],
              **fields: Any) -> tuple[int, dict[str, Any]]:
    resp = await client.post(CHAT, json={"model": "test-1", "messages": [
        {"role": "user", "content": parts}], **fields})
    body = await resp.json()
    assert resp.status == 200, body
    return int(resp.headers["X-Ctxwarden-Tokens-In"]), body


async def test_a_300_kb_pdf_costs_its_pages(aiohttp_client: ClientFactory,
                                            upstream: UpstreamServer) -> None:
    doc = pdf(4, side=350)
    assert len(doc) > 290_000
    client = await make(aiohttp_client, settings_for(upstream, context_window=32_000))
    parts = [text_part("Summarise this."), file_part(doc)]
    tokens, _ = await ask(client, parts)
    assert tokens == FRAME + n("Summarise this.") + 4 * PAGE_OPENAI
    assert upstream.history[-1].body["messages"] == [{"role": "user", "content": parts}]


async def test_a_file_id_counts_a_flat_five_pages(aiohttp_client: ClientFactory,
                                                  upstream: UpstreamServer) -> None:
    client = await make(aiohttp_client, settings_for(upstream, context_window=32_000))
    tokens, _ = await ask(client, [text_part("Read it."), file_part(None)])
    assert tokens == FRAME + n("Read it.") + 5 * PAGE_OPENAI


async def test_images_cost_by_size_and_detail(aiohttp_client: ClientFactory,
                                              upstream: UpstreamServer) -> None:
    client = await make(aiohttp_client, settings_for(upstream, context_window=32_000))
    cases = [  # (part, OpenAI's cost worked out by hand)
        (image_part(image(4000, 3000), "high"), 85 + 4 * 170),  # → 2048×1536 → 1024×768
        (image_part(image(1000, 3000, "JPEG"), mime="image/jpeg"),  # auto: as high
         85 + 8 * 170),  # → 683×2048 (shortest side under 768): 2×4 tiles
        (image_part(image(300, 200, "GIF"), "low", "image/gif"), 85),
        (image_part(image(600, 400, "WEBP"), "high", "image/webp"), 85 + 2 * 170),
        (image_part("https://example.com/cat.png"), 85 + 8 * 170),  # unknown: 768×2048
        (image_part("https://example.com/cat.png", "low"), 85),
    ]
    for part, cost in cases:
        tokens, _ = await ask(client, [text_part("What is this?"), part])
        assert tokens == FRAME + n("What is this?") + cost, part["image_url"].get("detail")


async def test_audio_costs_ten_tokens_a_second(aiohttp_client: ClientFactory,
                                               upstream: UpstreamServer) -> None:
    client = await make(aiohttp_client, settings_for(upstream, context_window=32_000))
    tokens, _ = await ask(client, [audio_part(wav(12.0))])
    assert tokens == FRAME + 120
    frames = 383  # 10.005 s of MPEG-1 layer III at 44.1 kHz
    tokens, _ = await ask(client, [audio_part(mp3(frames), "mp3")])
    assert tokens == FRAME + math.ceil(frames * 1152 / 44100 * 10)


async def test_claude_counts_pixels_and_its_own_text(aiohttp_client: ClientFactory,
                                                     upstream: UpstreamServer) -> None:
    """An Anthropic route: w·h/750 a picture, text at 1.3 × o200k; refused before forwarding
    with the count in the message."""
    settings = one_route(upstream.url, name="c", model="c-*", context_window=3000,
                         upstream={"model": "anthropic/claude-3-5-sonnet-latest",
                                   "api_base": upstream.url, "api_key": "sk-x"})
    client = await make(aiohttp_client, settings)
    question = "Which of these two photographs was taken first, and how can you tell?"
    picture = image_part(image(1000, 1000))
    resp = await client.post(CHAT, json={"model": "c-1", "messages": [
        {"role": "user", "content": [text_part(question), picture, picture]}]})
    must_stay = FRAME + math.ceil(n(question) * 1.3) + 2 * 1334  # 1000·1000/750
    assert resp.status == 400
    assert await resp.json() == {"error": {
        "message": "This request cannot fit the context window of route 'c': what must stay "
                   "(system and developer messages, the first user message, the latest turn) "
                   f"is {must_stay} tokens, and {must_stay} after evicting everything "
                   "evictable, but only 2650 fit (window 3000 - reserved output 200 - tools 0 "
                   "- safety margin and recall budget). Shorten the latest message or the "
                   "system prompt, lower max_tokens, or use a route with a larger window.",
        "type": "invalid_request_error", "param": "messages",
        "code": "context_length_exceeded"}}
    assert upstream.history == []


@pytest.mark.parametrize(("fmt", "extra"), [("PNG", {}), ("JPEG", {}), ("GIF", {}),
                                            ("WEBP", {}), ("WEBP", {"lossless": True})])
def test_image_headers(fmt: str, extra: dict[str, Any]) -> None:
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGBA" if extra else "RGB", (1234, 567)).save(out, fmt, **extra)
    assert image_size(out.getvalue()) == (1234, 567)


def test_a_jpeg_size_behind_64_kb_of_exif_and_a_pdf_with_object_streams() -> None:
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (300, 200)).save(out, "JPEG", exif=b"Exif\0\0" + b"x" * 60_000,
                                      icc_profile=b"y" * 30_000)
    assert image_size(out.getvalue()) == (300, 200)
    assert pdf_pages(pdf_object_streams(6)) == 6  # the pages only in a compressed stream
    assert pdf_pages(pdf(3)) == 3
    assert wav_seconds(wav(2.5)) == 2.5 and mp3_seconds(b"not audio") is None


HEADS = [b"\x89PNG\r\n\x1a\n", b"GIF89a", b"RIFF\0\0\0\0WEBPVP8 ", b"RIFF\0\0\0\0WEBPVP8X",
         b"\xff\xd8", b"%PDF-1.7\n1 0 obj\n<< /Type /ObjStm /FlateDecode >>\nstream\n",
         b"RIFF\0\0\0\0WAVEfmt ", b"ID3\x03\0\0\0\0\0\x0a", b"\xff\xfb\x90\x64", b""]


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(head=st.sampled_from(HEADS), tail=st.binary(max_size=300))
def test_hostile_bytes_never_raise(head: bytes, tail: bytes) -> None:
    """Whatever follows a known header, each parser answers a value or None (the counter
    then takes the worst case); it never raises, never returns a negative."""
    data = head + tail
    size = image_size(data)
    assert size is None or min(size) > 0
    pages = pdf_pages(data)
    assert pages is None or pages > 0
    for seconds in (wav_seconds(data), mp3_seconds(data)):
        assert seconds is None or seconds >= 0
