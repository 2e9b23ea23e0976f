"""The operator's side of the proxy: the admin API (`api.py`: evictions, sessions;
`chunks.py`: an evicted message with its images, audio and files) and the inspector
(`inspector.py`: turns, chunks, store backlog, and the static UI in `ui/`).

Everything here reads through the app's `Store` and `Pipeline`; nothing here is on the
request path. `proxy.auth` guards every route registered here with the admin key.
"""

from __future__ import annotations

from aiohttp import web

from proxy.admin.api import event_view, setup_admin, tenant_of
from proxy.admin.chunks import setup_chunks
from proxy.admin.inspector import setup_inspector

__all__ = ["event_view", "setup", "setup_admin", "setup_chunks", "setup_inspector", "tenant_of"]


def setup(app: web.Application) -> None:
    """Register the admin API and the inspector on `app`."""
    setup_admin(app)  # /admin/evictions, /admin/sessions
    setup_chunks(app)  # /admin/sessions/{id}/chunks/{chunk}[/attachments/{index}]
    setup_inspector(app)  # /ui, /admin/turns, /admin/chunk, /admin/store
