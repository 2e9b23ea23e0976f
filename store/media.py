"""The non-text parts of an evicted message: images, audio and files, kept whole.

Why: never forget used to mean the text only; an image or a PDF in an evicted message
was gone for good once the message left the prompt. `Media.of(message)` splits a message
into its skeleton (the message as JSON, every inline payload cut down to a placeholder)
and its `Attachment`s (the decoded bytes, or the URL or file id a part only refers to);
`Media.restore()` puts the payloads back, so the original message comes back as sent
(base64 re-encoded in its canonical form, the bytes identical).

Parts understood (OpenAI's chat and responses shapes): `image_url` (`{"url": ...}` or a
string), `input_image` (`image_url` or `file_id`), `input_audio` (`{"data", "format"}`),
`file` (`{"file_data" | "file_id", "filename"}`) and `input_file` (`file_data`,
`file_url` or `file_id`, `filename`). A payload is inline when it is a data URL (or, for
audio and `file_data`, bare base64 that decodes); anything else is a reference, kept as
given. Text parts stay in the skeleton; a text-only message has no media at all.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import mimetypes
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_to_bytes

import orjson

Where = tuple[str, dict[str, Any], str, str, str]  # kind, holder, key, mime hint, filename
AUDIO = {"mp3": "audio/mpeg", "wav": "audio/wav"}
_MIME = re.compile(r"[A-Za-z0-9][\w.+-]*/[A-Za-z0-9][\w.+-]*\Z", re.ASCII)  # type/subtype


@dataclass(frozen=True, slots=True)
class Attachment:
    index: int  # position in the message's content list
    kind: str  # image | audio | file
    mime: str  # "" when a reference does not say
    data: bytes  # b"" for a reference
    url: str  # the URL or file id of a reference; "" when the bytes are here
    filename: str
    sha256: str  # of the bytes (of the URL for a reference)

    def view(self) -> dict[str, Any]:
        """What the admin API shows of it (not the bytes)."""
        return {"index": self.index, "kind": self.kind, "mime": self.mime,
                "filename": self.filename, "bytes": len(self.data), "url": self.url or None,
                "sha256": self.sha256}


@dataclass(frozen=True, slots=True)
class Media:
    message: str = ""  # the skeleton as JSON; "" for a text-only message
    attachments: tuple[Attachment, ...] = ()

    @classmethod
    def of(cls, message: dict[str, Any]) -> Media:
        content = message.get("content")
        if not isinstance(content, list) or all(
                isinstance(p, dict) and p.get("type") == "text" for p in content):
            return NO_MEDIA
        skeleton: dict[str, Any] = orjson.loads(orjson.dumps(message))  # a deep copy
        found: list[Attachment] = []
        for i, part in enumerate(skeleton["content"]):
            where = _where(part) if isinstance(part, dict) else None
            if where is not None:
                found.append(_take(i, *where))
        if not found:
            return NO_MEDIA
        return cls(orjson.dumps(skeleton).decode(), tuple(found))

    def restore(self) -> dict[str, Any] | None:
        """The original message, payloads back in place (None for a text-only one)."""
        if not self.message:
            return None
        msg: dict[str, Any] = orjson.loads(self.message)
        for a in self.attachments:
            where = None if a.url else _where(msg["content"][a.index])
            if where is not None and isinstance(where[1].get(where[2]), str):
                _, holder, key, _, _ = where  # the placeholder: a data URL's head, or ""
                b64 = base64.b64encode(a.data).decode()
                holder[key] = holder[key] + b64 if holder[key].startswith("data:") else b64
        return msg

    def summary(self) -> str:
        """What an eviction event says was in it: "1 image (image/png), 1 file (…)"."""
        counts = Counter(a.kind for a in self.attachments)
        out = []
        for kind, n in counts.items():
            mimes = dict.fromkeys(a.mime or "remote" for a in self.attachments if a.kind == kind)
            noun = kind if n == 1 or kind == "audio" else kind + "s"
            out.append(f"{n} {noun} ({', '.join(mimes)})")
        return ", ".join(out)


NO_MEDIA = Media()


def _where(part: dict[str, Any]) -> Where | None:
    """Which field of a part holds its payload (and the hints around it)."""
    ptype = part.get("type")
    if ptype == "image_url":
        inner = part.get("image_url")
        if isinstance(inner, dict):
            return "image", inner, "url", "", ""
        return "image", part, "image_url", "", ""
    if ptype == "input_image":
        return "image", part, "image_url" if "image_url" in part else "file_id", "", ""
    if ptype == "input_audio" and isinstance(part.get("input_audio"), dict):
        inner = part["input_audio"]
        fmt = str(inner.get("format", ""))
        mime = AUDIO.get(fmt, f"audio/{fmt}")
        return "audio", inner, "data", mime if _MIME.match(mime) else "", ""
    holder = part.get("file") if ptype == "file" else part if ptype == "input_file" else None
    if isinstance(holder, dict):
        name = str(holder.get("filename") or "")
        key = next((k for k in ("file_data", "file_url", "file_id") if k in holder), "file_id")
        return "file", holder, key, mimetypes.guess_type(name)[0] or "", name
    return None


def _take(index: int, kind: str, holder: dict[str, Any], key: str, mime: str,
          filename: str) -> Attachment:
    """The attachment at `holder[key]`; an inline payload there becomes its placeholder
    (the data URL's head, or "" for bare base64)."""
    value = holder.get(key)
    text = value if isinstance(value, str) else ""
    inline = _inline(text, bare=key in ("data", "file_data"))
    if inline is None:  # a reference: the URL or id stays in the skeleton too
        if not mime and kind != "file":
            mime = mimetypes.guess_type(text.split("?", 1)[0])[0] or ""
        return Attachment(index, kind, mime, b"", text, filename, _sha(text.encode()))
    data, head, said = inline
    holder[key] = head
    return Attachment(index, kind, said or mime, data, "", filename, _sha(data))


def _inline(text: str, *, bare: bool) -> tuple[bytes, str, str] | None:
    """(bytes, placeholder, mime) of a data URL, or of bare base64 where that is allowed."""
    if text.startswith("data:") and "," in text:
        head, payload = text[5:].split(",", 1)
        mime, _, rest = head.partition(";")
        mime = mime if _MIME.match(mime) else ""
        if rest.endswith("base64") or ";base64" in head:
            data = _b64(payload)
            if data is None:
                return None
        else:
            data = unquote_to_bytes(payload)
        return data, f"data:{mime or 'application/octet-stream'};base64,", mime
    if bare and text:
        data = _b64(text)
        if data is not None:
            return data, "", ""
    return None


def _b64(text: str) -> bytes | None:
    try:  # strict, but line breaks and spaces (some encoders wrap) are allowed
        return base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        return None


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
