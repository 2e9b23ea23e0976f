"""What an image, a file or an audio clip costs in the prompt, by the provider's published rule.

Sizes come from the bytes (`mediafmt`); what cannot be read counts the worst case for its
kind, never its base64 (a 300 KB PDF is ~273k tokens of base64 and ~10 pages of prompt).

- OpenAI images (platform.openai.com/docs/guides/images-vision, "Calculating costs"):
  `detail: low` costs the base (85); `high` and `auto` (the model may choose high) scale
  the image to fit 2048×2048, then its shortest side down to 768, and cost the base plus
  170 per 512-px tile. gpt-4o-mini prices the same tiles at 2,833 + 5,667 each; the
  patch-priced minis (gpt-4.1-mini/nano, o4-mini, gpt-5-mini/nano) cost 32-px patches
  (at most 1,536, the image scaled down to fit) times 1.62 / 2.46 / 1.72. A remote URL
  (size unknown) costs the worst case: 768×2048 → 8 tiles → 1,445 with the default rates.
- Anthropic images (docs.anthropic.com, "Vision"): about w·h/750 tokens after scaling to
  a long edge ≤ 1,568 px and ≤ ~1.2 MP; 784×1568, the largest size Anthropic lists as
  not resized, is 1,640 tokens, which is the worst case. `detail` does not apply.
- PDFs: both providers put each page in the prompt as extracted text plus an image of the
  page. Anthropic ("PDF support") puts the text at 1,500-3,000 tokens a page; we take
  3,000 plus the page image of an A4 page at 150 dpi (1240×1754): 1,105 (OpenAI, high
  detail) or 1,640 (Anthropic). Pages are counted in the file (`mediafmt.pdf_pages`); a
  file whose pages cannot be read counts one page per 50 KB (at least one). A `file_id`
  with no data counts FILE_ID_PAGES pages: the content is unknown to the proxy, and a
  longer file is refused by the provider with its own context error, passed through.
- Audio (`input_audio`, wav or mp3): seconds from the WAV header or the MP3 frames, times
  10 tokens a second for OpenAI (gpt-4o audio input: 1 token per 100 ms, the figure of
  OpenAI's realtime/audio docs and usage reports) and 32 for everyone else (Gemini's
  documented rate, the highest published). Unreadable audio counts 1 s per 1,000 bytes
  (8 kbps, the lowest MP3 bitrate).

Models of other families (Llama, Gemini, …) count the larger of the OpenAI and Anthropic
rules for images and pages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from proxy.mediafmt import (
    HEAD_BYTES,
    b64,
    image_size,
    mp3_seconds,
    pdf_pages,
    split_data_url,
    wav_seconds,
)

PDF_TEXT_PER_PAGE = 3_000
A4_150DPI = (1240, 1754)
FILE_ID_PAGES = 5
BYTES_PER_UNKNOWN_PAGE = 50_000
UNKNOWN_AUDIO_BYTES_PER_SECOND = 1_000
# (model name contains, base, per tile): tile-priced OpenAI models whose rates differ
_TILE_RATES = (("gpt-4o-mini", 2833, 5667),)
# (model name contains, multiplier): patch-priced OpenAI models
_PATCH_RATES = (("gpt-4.1-mini", 1.62), ("gpt-4.1-nano", 2.46), ("o4-mini", 1.72),
                ("gpt-5-mini", 1.62), ("gpt-5-nano", 2.46))


def _ceil(x: float) -> int:
    return math.ceil(x - 1e-9)  # 2048.0000000001 is 2048 pixels


def openai_tiles(w: int, h: int, detail: str, base: int = 85, tile: int = 170) -> int:
    if detail == "low":
        return base
    s = min(1.0, 2048 / max(w, h))
    s *= min(1.0, 768 / (min(w, h) * s))
    return base + tile * _ceil(w * s / 512) * _ceil(h * s / 512)


def openai_patches(w: int, h: int, multiplier: float) -> int:
    patches = _ceil(w / 32) * _ceil(h / 32)
    if patches > 1536:
        s = math.sqrt(1536 / patches)
        patches = min(1536, _ceil(w * s / 32) * _ceil(h * s / 32))
    return _ceil(patches * multiplier)


def anthropic_image(w: int, h: int) -> int:
    s = min(1.0, 1568 / max(w, h), math.sqrt(784 * 1568 / (w * h)))
    return _ceil(w * s * h * s / 750)


@dataclass(frozen=True, slots=True)
class MediaRules:
    """The route's rules, chosen once from its model's family and name."""

    family: str  # "openai", "anthropic" or "other"
    model: str = ""

    def image(self, size: tuple[int, int] | None, detail: str) -> int:
        """Unknown size: each rule's worst case (768×2048 for tiles and patches, 784×1568
        for Anthropic's pixels)."""
        w, h = size or (784, 1568)
        claude = anthropic_image(w, h)
        if self.family == "anthropic":
            return claude
        w, h = size or (768, 2048)
        cost = self._openai_image(w, h, detail)
        return cost if self.family == "openai" else max(cost, claude)

    def _openai_image(self, w: int, h: int, detail: str) -> int:
        for name, mult in _PATCH_RATES:
            if name in self.model:
                return openai_patches(w, h, mult)
        for name, base, tile in _TILE_RATES:
            if name in self.model:
                return openai_tiles(w, h, detail, base, tile)
        return openai_tiles(w, h, detail)

    def page(self) -> int:
        w, h = A4_150DPI
        image = anthropic_image(w, h)
        if self.family != "anthropic":
            image = openai_tiles(w, h, "high") if self.family == "openai" else max(
                image, openai_tiles(w, h, "high"))
        return PDF_TEXT_PER_PAGE + image

    def audio_rate(self) -> int:
        return 10 if self.family == "openai" else 32

    # -- parts ------------------------------------------------------------------------
    def image_part(self, spec: Any) -> int:
        """`image_url` (an object with `url` and `detail`, or a bare URL string)."""
        url = spec.get("url") if isinstance(spec, dict) else spec
        detail = spec.get("detail") if isinstance(spec, dict) else None
        detail = detail if detail in ("low", "high") else "auto"
        size = None
        if isinstance(url, str) and url.startswith("data:"):
            payload = split_data_url(url)[1]
            size = image_size(b64(payload, HEAD_BYTES)) or image_size(b64(payload))
        return self.image(size, detail)

    def file_part(self, spec: Any) -> int:
        data = spec.get("file_data") if isinstance(spec, dict) else None
        if not isinstance(data, str) or not data:
            return FILE_ID_PAGES * self.page()
        raw = b64(split_data_url(data)[1])
        pages = pdf_pages(raw) or max(1, math.ceil(len(raw) / BYTES_PER_UNKNOWN_PAGE))
        return pages * self.page()

    def audio_part(self, spec: Any) -> int:
        data = spec.get("data") if isinstance(spec, dict) else None
        raw = b64(split_data_url(data)[1]) if isinstance(data, str) else b""
        seconds = wav_seconds(raw)
        if seconds is None:
            seconds = mp3_seconds(raw)
        if seconds is None:
            seconds = len(raw) / UNKNOWN_AUDIO_BYTES_PER_SECOND
        return max(1, _ceil(seconds * self.audio_rate()))
