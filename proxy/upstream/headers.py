"""The OpenAI headers a chat completion carries across the proxy, both ways.

Going up: the client's `OpenAI-Organization`, `OpenAI-Project` and `OpenAI-Beta` (which
org, project and beta features a multi-org key's request is for), unless the route's own
`upstream.extra_headers` set the same header: what the operator configured wins, as on the
pass-through paths. Nothing else of the client's goes up with a chat request.

Coming back: the provider's rate-limit state (`x-ratelimit-*`), `openai-processing-ms`,
`openai-organization` and `openai-version` as it sent them, and its request id as
`X-Upstream-Request-ID` (`X-Request-ID` stays the proxy's own).
"""

from __future__ import annotations

from collections.abc import Mapping

FROM_CLIENT = ("OpenAI-Organization", "OpenAI-Project", "OpenAI-Beta")
_TO_CLIENT = frozenset({"openai-processing-ms", "openai-organization", "openai-version"})
UPSTREAM_REQUEST_ID = "X-Upstream-Request-ID"
# LiteLLM's `_hidden_params["additional_headers"]`: the provider's raw headers under this
# prefix, OpenAI's rate-limit names unprefixed (translated from Anthropic's own), and the
# provider's request id, whatever it called it, as `request-id`.
_LITELLM_RAW = "llm_provider-"


def from_client(headers: Mapping[str, str]) -> dict[str, str]:
    """The client's OpenAI headers that go upstream with its chat request."""
    return {name: headers[name] for name in FROM_CLIENT if name in headers}


def merged(own: Mapping[str, str], route: Mapping[str, str],
           client: Mapping[str, str]) -> dict[str, str]:
    """`own` plus the `client` headers the `route` (its configured headers) does not set."""
    taken = {k.lower() for k in route}
    out = dict(own)
    out.update((k, v) for k, v in client.items() if k.lower() not in taken)
    return out


def to_client(headers: Mapping[str, str]) -> dict[str, str]:
    """The provider's response headers the client gets with a chat completion."""
    out: dict[str, str] = {}
    for name, value in headers.items():
        low = name.lower()
        if low.startswith("x-ratelimit-") or low in _TO_CLIENT:
            out[low] = value
        elif low == "x-request-id":
            out[UPSTREAM_REQUEST_ID] = value
    return out


def _litellm_kept(response: object) -> dict[str, object]:
    hidden = getattr(response, "_hidden_params", None)
    extra = hidden.get("additional_headers") if isinstance(hidden, dict) else None
    return extra if isinstance(extra, dict) else {}


def provider_header(response: object, name: str) -> str | None:
    """One of the provider's own response headers, as LiteLLM kept it (None if it did not)."""
    value = _litellm_kept(response).get(_LITELLM_RAW + name.lower())
    return str(value) if value is not None else None


def from_litellm(response: object) -> dict[str, str]:
    """`to_client` of the provider headers LiteLLM kept on a response or a stream."""
    extra = _litellm_kept(response)
    if not extra:
        return {}
    raw = {k.removeprefix(_LITELLM_RAW): str(v) for k, v in extra.items()
           if isinstance(k, str) and k.startswith(_LITELLM_RAW)}
    out = to_client(raw)
    out.update(to_client({k: str(v) for k, v in extra.items()
                          if isinstance(k, str) and k.startswith("x-ratelimit-")}))
    request_id = extra.get("request-id")
    if request_id and UPSTREAM_REQUEST_ID not in out:
        out[UPSTREAM_REQUEST_ID] = str(request_id)
    return out
