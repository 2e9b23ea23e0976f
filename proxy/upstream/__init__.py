"""The upstream boundary: send a fitted request to the route's provider, bring back OpenAI bytes.

Two transports behind one protocol (`transport.Transport`), chosen once per route
(`route.upstream.transport`) when the app starts (`resolve.resolve_routes`):

- `direct` (`direct.py`): providers that take OpenAI's chat-completions request as is
  (`openai`, `custom_openai`, `openai_like`, `lm_studio`, `hosted_vllm`). One aiohttp POST,
  the client's fields untouched, the reply relayed as bytes. LiteLLM still resolves the
  provider, base URL and key, and its provider config maps the few fields a server needs
  changed (vLLM's tool schemas, LM Studio's response_format), which costs microseconds.
- `litellm` (`via_litellm.py`): everything else, and any route with `mock_response` (the
  offline demo).

`auto` picks `direct` for the providers above because LiteLLM's own OpenAI path spends most
of its time in the openai SDK's parameter transform (15 ms at 50 messages, 195 ms at 1,000
here), which a request that is already OpenAI's does not need. Errors from both leave as
`proxy.errors` types through `map_upstream_error` (`errors.py`). A route that cannot be
resolved (unset key variable, unknown provider, `direct` for a non-OpenAI provider) stops
start-up with a `ConfigError` naming it, instead of failing its first request.
"""

from proxy.errors import UpstreamUnavailable
from proxy.upstream.client import Upstream
from proxy.upstream.errors import map_upstream_error
from proxy.upstream.resolve import DIRECT_PROVIDERS, resolve, resolve_routes
from proxy.upstream.transport import Target, Transport, UpstreamReply

__all__ = ["DIRECT_PROVIDERS", "Target", "Transport", "Upstream", "UpstreamReply",
           "UpstreamUnavailable", "map_upstream_error", "resolve", "resolve_routes"]
