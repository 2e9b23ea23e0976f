"""The upstream boundary: send a fitted request to the route's provider, bring back OpenAI bytes.

Two transports behind one class, chosen once per route (`route.upstream.transport`):

- `direct`: providers that take OpenAI's chat-completions request as is (`openai`,
  `custom_openai`, `openai_like`, `lm_studio`, `hosted_vllm`). One aiohttp POST, the
  client's fields untouched, the reply relayed as bytes. LiteLLM still resolves the
  provider, base URL and key, and its provider config maps the few fields a server needs
  changed (vLLM's tool schemas, LM Studio's response_format), which costs microseconds.
- `litellm`: everything else, and any route with `mock_response` (the offline demo).

`auto` picks `direct` for the providers above because LiteLLM's own OpenAI path spends most
of its time in the openai SDK's parameter transform (15 ms at 50 messages, 195 ms at 1,000
here), which a request that is already OpenAI's does not need. Errors from both leave as
`proxy.errors` types through `map_upstream_error` (see `proxy.upstream_errors`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit
from urllib.request import (  # type: ignore[attr-defined]  # not in typeshed, in the stdlib
    getproxies_environment,
    proxy_bypass_environment,
)

import aiohttp
import litellm
import orjson
from litellm.llms.openai.chat.gpt_transformation import OpenAIGPTConfig
from litellm.types.utils import LlmProviders
from litellm.utils import ProviderConfigManager

from proxy import upstream_direct, upstream_litellm
from proxy.config import RouteSettings
from proxy.errors import UpstreamError
from proxy.upstream_base import Target, UpstreamReply
from proxy.upstream_errors import map_upstream_error

__all__ = ["DIRECT_PROVIDERS", "Upstream", "UpstreamReply", "map_upstream_error"]

# Providers whose LiteLLM config sends OpenAI's request unchanged for a valid OpenAI body
# (checked in litellm 1.106.2: OpenAIGPTConfig or a subclass that only resolves base/key,
# or maps the fields in _MAPPED_FIELDS). Others in litellm.openai_compatible_providers
# rewrite params (groq, fireworks, together…) and keep the LiteLLM transport under `auto`.
DIRECT_PROVIDERS = frozenset({"openai", "custom_openai", "openai_like", "lm_studio",
                              "hosted_vllm"})
_MAPPED_FIELDS: dict[str, tuple[str, ...]] = {
    "hosted_vllm": ("tools", "thinking"),  # drops strict/additionalProperties, custom tools
    "lm_studio": ("response_format",),  # wraps a bare json_schema
}


class Upstream:
    """Forwards to the route's provider. One per app; holds the shared aiohttp session."""

    def __init__(self, session: aiohttp.ClientSession | None = None) -> None:
        self._session = session
        self._owns_session = session is None
        self._targets: dict[int, tuple[RouteSettings, Target]] = {}

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
                       api_key: str | None = None) -> UpstreamReply:
        """A non-streamed chat completion; raises a ProxyError on any upstream failure.
        `api_key` (auth passthrough) replaces the route's key for this call."""
        target = self.target(route, api_key)
        if target.transport == "direct":
            return await upstream_direct.complete(self._client(), target, body)
        return await upstream_litellm.complete(target, body)

    async def open_stream(self, route: RouteSettings, body: dict[str, Any],
                          api_key: str | None = None) -> AsyncIterator[bytes]:
        """SSE bytes; an error status raises here, before anything is sent to the client.

        The iterator's `aclose()` closes the upstream response at once (the client left).
        """
        target = self.target(route, api_key)
        if target.transport == "direct":
            return await upstream_direct.open_stream(self._client(), target, body)
        return await upstream_litellm.open_stream(target, body)

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


def with_key(target: Target, key: str) -> Target:
    """`target` sending `key` upstream; errors scrub it like the route's own key."""
    headers = target.headers
    if target.transport == "direct":
        headers = {**headers, "Authorization": f"Bearer {key}"}
    return dataclasses.replace(target, api_key=key, headers=headers)


def resolve(route: RouteSettings) -> Target:
    up = route.upstream
    key = up.api_key
    if key is None and up.api_key_env:
        key = os.environ.get(up.api_key_env)
        if not key:
            raise UpstreamError(f"Route {route.name!r}: the environment variable "
                                f"{up.api_key_env} (upstream.api_key_env) is not set.",
                                code="upstream_misconfigured")
    common: dict[str, Any] = {"timeout": up.timeout, "api_key": key,
                              "extra_headers": dict(up.extra_headers)}
    if up.mock_response is not None:
        return Target("litellm", None, up.model, up.api_base, mock_response=up.mock_response,
                      **common)
    try:
        model, provider, dyn_key, dyn_base = litellm.get_llm_provider(up.model,
                                                                       api_base=up.api_base)
    except Exception:
        raise UpstreamError(f"Route {route.name!r}: LiteLLM cannot tell the provider of "
                            f"{up.model!r}; prefix it, e.g. 'openai/{up.model}'.",
                            code="upstream_misconfigured") from None
    transport = up.transport
    if transport == "auto":
        transport = "direct" if provider in DIRECT_PROVIDERS else "litellm"
    if transport == "litellm":
        return Target("litellm", provider, up.model, up.api_base, **common)
    return _direct(route, model, provider, key or dyn_key, up.api_base or dyn_base, common)


def _direct(route: RouteSettings, model: str, provider: str, key: str | None,
            base: str | None, common: dict[str, Any]) -> Target:
    try:
        cfg = ProviderConfigManager.get_provider_chat_config(model=model,
                                                             provider=LlmProviders(provider))
    except ValueError:
        cfg = None
    if not isinstance(cfg, OpenAIGPTConfig):
        raise UpstreamError(f"Route {route.name!r}: transport 'direct' needs a provider that "
                            f"speaks OpenAI's wire format, and {provider!r} does not; use "
                            "transport 'litellm'.", code="upstream_misconfigured")
    if provider == "openai":
        base, key = OpenAIGPTConfig.get_api_base(base), OpenAIGPTConfig.get_api_key(key)
    else:
        info = getattr(cfg, "get_openai_compatible_provider_info", None)
        if info is not None:
            base, key = info(base, key)
    if not base:
        raise UpstreamError(f"Route {route.name!r}: provider {provider!r} needs "
                            "upstream.api_base.", code="upstream_misconfigured")
    base = base.rstrip("/")
    url = base if base.endswith("/chat/completions") else base + "/chat/completions"
    headers = {"Content-Type": "application/json", **common.pop("extra_headers")}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    common["api_key"] = key
    prepare = _mapper(cfg, model, _MAPPED_FIELDS[provider]) if provider in _MAPPED_FIELDS else None
    return Target("direct", provider, model, base, url=url, headers=headers, prepare=prepare,
                  proxy=env_proxy(url), **common)


def env_proxy(url: str) -> str | None:
    """HTTP(S)_PROXY / NO_PROXY as httpx (so LiteLLM) honours them, looked up once per route.

    aiohttp's `trust_env=True` would do it per request, at ~0.7 ms each (measured here).
    """
    parts = urlsplit(url)
    proxies = getproxies_environment()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or proxy_bypass_environment(parts.hostname or "", proxies):
        return None
    return proxy


def _mapper(cfg: OpenAIGPTConfig, model: str,
            fields: tuple[str, ...]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """LiteLLM's param mapping for the few fields a provider needs changed; the rest as is."""

    def prepare(body: dict[str, Any]) -> dict[str, Any]:
        present = {k: body[k] for k in fields if k in body}
        if not present:
            return body
        mapped = cfg.map_openai_params(orjson.loads(orjson.dumps(present)), {}, model, False)
        out = {k: v for k, v in body.items() if k not in present}
        out.update(mapped)
        return out

    return prepare
