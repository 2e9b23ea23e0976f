"""An evicted chunk's original message, with its images, audio and files, back from the store.

    GET /admin/sessions/{session}/chunks/{chunk_id}
        → {"chunk": {chunk_id, turn, role, class, tokens, text},
           "message": {the message as the client sent it, payloads back in place} | null,
           "attachments": [{index, kind, mime, filename, bytes, url, sha256, download}]}
        `message` is null for a text-only chunk (its text is `chunk.text`); `url` is the
        URL (or file id) of a part that only referred to one, and null when the bytes are
        stored; `download` is the path of the raw bytes, null for a reference.
    GET /admin/sessions/{session}/chunks/{chunk_id}/attachments/{index}
        → the bytes, as stored (`Content-Type` the part's mime type)

Errors (OpenAI's shape): 404 `chunk_not_found`, 404 `attachment_not_found`, and 404
`attachment_not_stored` for a part that was a reference (its URL is in the chunk view).
Why downloads are always `attachment` with a sandboxing CSP: the bytes and their mime type
come from a client, and must never run as a page on the inspector's origin.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import orjson
from aiohttp import web

from proxy.admin.api import tenant_of
from proxy.errors import ProxyError, RouteNotFound
from proxy.keys import STORE
from store.base import EvictedChunk
from store.media import Media

CHUNK = "/admin/sessions/{session}/chunks/{chunk_id}"


async def offloaded(request: web.Request, session: str, chunk_id: str) -> EvictedChunk:
    """The caller's tenant's offloaded chunk, else a 404 `chunk_not_found`."""
    found = await request.app[STORE].fetch(tenant_of(request), session, [chunk_id])
    if not found:
        raise RouteNotFound(f"No offloaded chunk {chunk_id!r} in session {session!r}.",
                            code="chunk_not_found", param="chunk_id")
    return found[0]


async def _find(request: web.Request) -> tuple[str, EvictedChunk, Media]:
    session, chunk_id = request.match_info["session"], request.match_info["chunk_id"]
    c = await offloaded(request, session, chunk_id)
    return session, c, await request.app[STORE].media(tenant_of(request), session, chunk_id)


async def chunk_message(request: web.Request) -> web.Response:
    try:
        session, c, media = await _find(request)
    except ProxyError as exc:  # answered here: these routes may sit outside the boundary
        return exc.response()
    base = f"/admin/sessions/{quote(session, safe='')}/chunks/{quote(c.chunk_id, safe='')}"
    parts: list[dict[str, Any]] = [
        {**a.view(), "download": None if a.url else f"{base}/attachments/{a.index}"}
        for a in media.attachments]
    body = {"chunk": {"chunk_id": c.chunk_id, "turn": c.turn, "role": c.role,
                      "class": c.klass, "tokens": c.tokens, "text": c.text},
            "message": media.restore(), "attachments": parts}
    return web.Response(body=orjson.dumps(body), content_type="application/json")


async def attachment(request: web.Request) -> web.Response:
    try:
        _, c, media = await _find(request)
    except ProxyError as exc:
        return exc.response()
    index = request.match_info["index"]
    part = next((a for a in media.attachments if str(a.index) == index), None)
    if part is None:
        return RouteNotFound(f"Chunk {c.chunk_id!r} has no attachment at index {index}.",
                             code="attachment_not_found", param="index").response()
    if part.url:
        return RouteNotFound(f"Attachment {part.index} of chunk {c.chunk_id!r} is a reference "
                             f"({part.kind}), not stored bytes: {part.url}",
                             code="attachment_not_stored", param="index").response()
    name = part.filename or f"{c.chunk_id}-{part.index}"
    return web.Response(body=part.data, headers={
        "Content-Type": part.mime or "application/octet-stream",
        "Content-Disposition": f"attachment; filename*=UTF-8''{quote(name, safe='')}",
        "Content-Security-Policy": "default-src 'none'; sandbox",
        "X-Content-Type-Options": "nosniff", "ETag": f'"{part.sha256}"'})


def setup_chunks(app: web.Application) -> None:
    app.router.add_get(CHUNK, chunk_message)
    app.router.add_get(CHUNK + "/attachments/{index}", attachment)
