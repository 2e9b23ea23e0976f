"""Typed application (and request) keys shared by the edge, the admin API and the
pipeline."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from proxy.config import Settings
    from proxy.health import StoreHealth
    from proxy.pipeline import Pipeline
    from proxy.upstream import Upstream
    from store.base import Store

SETTINGS: web.AppKey[Settings] = web.AppKey("settings")
STORE: web.AppKey[Store] = web.AppKey("store")
UPSTREAM: web.AppKey[Upstream] = web.AppKey("upstream")
PIPELINE: web.AppKey[Pipeline] = web.AppKey("pipeline")
HEALTH: web.AppKey[StoreHealth] = web.AppKey("health")
REQUEST_ID: web.RequestKey[str] = web.RequestKey("request_id", str)  # set by the boundary
