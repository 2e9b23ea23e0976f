"""A route resolved once, at start: provider, URL, key, transport (`Target`).

Everything that can be wrong with a route's upstream is found here, before the first
request: an `api_key_env` naming an unset variable, a model LiteLLM cannot place, transport
`direct` for a provider that does not speak OpenAI's wire format, a provider without a
base URL. Each raises `ConfigError` naming the route, so `ctxwarden serve` stops with a
message instead of answering the route's first request 502.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit
from urllib.request import (  # type: ignore[attr-defined]  # not in typeshed, in the stdlib
    getproxies_environment,
    proxy_bypass_environment,
)

import litellm
import orjson
from litellm.llms.openai.chat.gpt_transformation import OpenAIGPTConfig
from litellm.types.utils import LlmProviders
from litellm.utils import ProviderConfigManager

from proxy.config import ConfigError, RouteSettings
from proxy.upstream.headers import merged
from proxy.upstream.transport import Target

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


class _Misconfigured(Exception):
    """What is wrong with one route's upstream; `resolve` prefixes the route's name."""


def resolve_routes(routes: Iterable[RouteSettings]) -> list[tuple[RouteSettings, Target]]:
    """Every route resolved; one ConfigError listing each route that cannot run."""
    out: list[tuple[RouteSettings, Target]] = []
    problems: list[str] = []
    for i, route in enumerate(routes):
        try:
            out.append((route, _resolve(route)))
        except _Misconfigured as exc:
            problems.append(f"routes[{i}] ({route.name!r}): {exc}")
    if problems:
        raise ConfigError("\n".join(problems))
    return out


def resolve(route: RouteSettings) -> Target:
    """One route's target; raises ConfigError naming the route."""
    try:
        return _resolve(route)
    except _Misconfigured as exc:
        raise ConfigError(f"route {route.name!r}: {exc}") from None


def with_key(target: Target, key: str) -> Target:
    """`target` sending `key` upstream; errors scrub it like the route's own key."""
    headers = target.headers
    if target.transport == "direct":
        headers = {**headers, "Authorization": f"Bearer {key}"}
    return dataclasses.replace(target, api_key=key, headers=headers)


def with_client_headers(target: Target, client: Mapping[str, str]) -> Target:
    """`target` also sending the client's `client` headers (`headers.from_client`), less
    those the route's `upstream.extra_headers` set: the route's win."""
    if not client:
        return target
    if target.transport == "direct":
        return dataclasses.replace(
            target, headers=merged(target.headers, target.extra_headers, client))
    return dataclasses.replace(
        target, extra_headers=merged(target.extra_headers, target.extra_headers, client))


def _resolve(route: RouteSettings) -> Target:
    up = route.upstream
    key = up.api_key
    if key is None and up.api_key_env:
        key = os.environ.get(up.api_key_env) or None
    common: dict[str, Any] = {"timeout": up.timeout, "api_key": key,
                              "extra_headers": dict(up.extra_headers),
                              "drop_params": up.drop_params}
    if up.mock_response is not None:  # LiteLLM's mock answers: no provider, no key needed
        return Target("litellm", None, up.model, up.api_base, mock_response=up.mock_response,
                      **common)
    if key is None and up.api_key_env:
        state = "is not set" if up.api_key_env not in os.environ else "is empty"
        raise _Misconfigured(f"upstream.api_key_env: the environment variable "
                             f"{up.api_key_env} {state}")
    try:
        model, provider, dyn_key, dyn_base = litellm.get_llm_provider(up.model,
                                                                       api_base=up.api_base)
    except Exception:
        raise _Misconfigured(f"upstream.model: LiteLLM cannot tell the provider of "
                             f"{up.model!r}; prefix it, e.g. 'openai/{up.model}'") from None
    transport = up.transport
    if transport == "auto":
        transport = "direct" if provider in DIRECT_PROVIDERS else "litellm"
    if transport == "litellm":
        limit = route.max_output_tokens if needs_max_tokens(provider, up.model) else None
        return Target("litellm", provider, up.model, up.api_base, default_max_tokens=limit,
                      **common)
    return _direct(model, provider, key or dyn_key, up.api_base or dyn_base, common)


def needs_max_tokens(provider: str, model: str) -> bool:
    """Whether a request without an output limit must get the route's `max_output_tokens`.

    Anthropic's Messages API requires `max_tokens` (directly, on Bedrock, on Vertex AI), so
    when the client sends none LiteLLM fills in the model's maximum output: 64,000 for
    claude-sonnet-4-5. The proxy fitted the prompt to `window - route.max_output_tokens`,
    and Anthropic refuses a request whose prompt plus `max_tokens` exceeds the window, so a
    prompt fitted near the window would come back 400 "input length and `max_tokens`
    exceed context limit". Sending the output the proxy reserved keeps the request inside
    the window it was fitted to. Other providers take no limit as "up to the model's", do
    not refuse for it, and keep the body as the client sent it (the direct transport
    always does).
    """
    name = model.lower()
    return provider == "anthropic" or "claude" in name or "anthropic" in name


def _direct(model: str, provider: str, key: str | None, base: str | None,
            common: dict[str, Any]) -> Target:
    try:
        cfg = ProviderConfigManager.get_provider_chat_config(model=model,
                                                             provider=LlmProviders(provider))
    except ValueError:
        cfg = None
    if not isinstance(cfg, OpenAIGPTConfig):
        raise _Misconfigured(f"upstream.transport: 'direct' needs a provider that speaks "
                             f"OpenAI's wire format, and {provider!r} does not; use "
                             "transport 'litellm'")
    if provider == "openai":
        base, key = OpenAIGPTConfig.get_api_base(base), OpenAIGPTConfig.get_api_key(key)
    else:
        info = getattr(cfg, "get_openai_compatible_provider_info", None)
        if info is not None:
            base, key = info(base, key)
    if not base:
        raise _Misconfigured(f"upstream.api_base: provider {provider!r} needs one")
    base = base.rstrip("/")
    url = base if base.endswith("/chat/completions") else base + "/chat/completions"
    headers = {"Content-Type": "application/json", **common["extra_headers"]}
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
