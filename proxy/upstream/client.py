"""`Upstream`: one per app; holds the shared aiohttp session and every route's `Target`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import aiohttp

from proxy.config import RouteSettings
from proxy.upstream.direct import DirectTransport
from proxy.upstream.resolve import resolve, resolve_routes, with_client_headers, with_key
from proxy.upstream.transport import ClosingStream, Target, Transport, UpstreamReply
from proxy.upstream.via_litellm import LiteLLMTransport, refuse_unsupported, warm


class Upstream:
    """Forwards to the route's provider.

    `routes` are resolved here, once: a misconfigured one raises `ConfigError` naming it,
    so `init_app` (and `ctxwarden serve`) stop before the first request rather than
    answering it 502. A route not given here is resolved on first use (library callers).
    """

    def __init__(self, routes: Iterable[RouteSettings] = (),
                 session: aiohttp.ClientSession | None = None) -> None:
        self._session = session
        self._owns_session = session is None
        self._transports: dict[str, Transport] = {
            "direct": DirectTransport(self._client), "litellm": LiteLLMTransport()}
        self._targets: dict[int, tuple[RouteSettings, Target]] = {}
        self.add_routes(routes)

    def add_routes(self, routes: Iterable[RouteSettings]) -> None:
        """Resolve `routes` now; raises ConfigError listing every route that cannot run."""
        for route, target in resolve_routes(routes):
            self._targets[id(route)] = (route, target)

    def http(self) -> aiohttp.ClientSession:
        """The pooled session (proxy/passthrough.py sends the rest of the API through it)."""
        return self._client()

    def _client(self) -> aiohttp.ClientSession:
        # Created on first use, inside the running loop (aiohttp binds a session to it).
        if self._session is None or (self._owns_session and self._session.closed):
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300),
                auto_decompress=True)
        return self._session

    async def close(self) -> None:
        if self._owns_session and self._session is not None and not self._session.closed:
            await self._session.close()

    async def complete(self, route: RouteSettings, body: dict[str, Any],
                       api_key: str | None = None,
                       headers: Mapping[str, str] | None = None) -> UpstreamReply:
        """A non-streamed chat completion; raises a ProxyError on any upstream failure.
        `api_key` (auth passthrough) replaces the route's key for this call; `headers`
        (the client's, `headers.from_client`) go too where the route sets none of them."""
        target = self._for_call(route, api_key, headers)
        return await self._transports[target.transport].complete(target, body)

    async def open_stream(self, route: RouteSettings, body: dict[str, Any],
                          api_key: str | None = None,
                          headers: Mapping[str, str] | None = None) -> ClosingStream:
        """SSE bytes; an error status raises here, before anything is sent to the client.

        The iterator's `aclose()` closes the upstream response at once (the client left);
        its `headers` are the provider's that the client gets too.
        """
        target = self._for_call(route, api_key, headers)
        return await self._transports[target.transport].open_stream(target, body)

    def _for_call(self, route: RouteSettings, api_key: str | None,
                  headers: Mapping[str, str] | None) -> Target:
        target = self.target(route, api_key)
        return with_client_headers(target, headers) if headers else target

    async def warm(self) -> None:
        """Load at start-up what the first call through LiteLLM would (`via_litellm.warm`)."""
        await warm(t for _, t in self._targets.values())

    def check(self, route: RouteSettings, body: dict[str, Any]) -> None:
        """Refuse (InvalidRequest) what the route's transport cannot send, before the
        pipeline fits anything."""
        target = self.target(route)
        if target.transport == "litellm":
            refuse_unsupported(target, body)

    def target(self, route: RouteSettings, api_key: str | None = None) -> Target:
        """The route resolved to a provider, URL, key and transport (cached per route);
        with `api_key`, the same target carrying that key instead (never cached)."""
        hit = self._targets.get(id(route))
        if hit is not None and hit[0] is route:
            target = hit[1]
        else:
            target = resolve(route)
            self._targets[id(route)] = (route, target)
        return target if api_key is None else with_key(target, api_key)
