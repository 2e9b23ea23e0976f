"""Who is calling: the tenant a request belongs to.

Until proxy keys exist every caller is the tenant "default"; sessions, events and recall
are already scoped by tenant everywhere, so keys only have to change this one function.
"""

from __future__ import annotations

from aiohttp import web

DEFAULT_TENANT = "default"


def tenant_of(request: web.Request) -> str:
    return DEFAULT_TENANT
