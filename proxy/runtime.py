"""A route's machinery, built once per route: its token counter, message analyzer,
chunker, fitter and policy; its context window (the route's, else LiteLLM's model info);
and the 400 a request gets when even everything evictable gone leaves it over budget."""

from __future__ import annotations

import math
from typing import Any

from policies import Policy, get_policy
from proxy.analysis import MessageAnalyzer
from proxy.chunking import Chunker, Conversation
from proxy.config import ConfigError, RouteSettings
from proxy.errors import ContextLengthExceeded
from proxy.fitting import Fit, Fitter
from proxy.recall import CLOSE, OPEN
from proxy.tokens import TokenCounter, encoding_for

# The window's share kept free when the route sets no safety_margin: where tiktoken has the
# model's own encoding, counts already err high (4 tokens of framing a message where OpenAI
# charges 3; calls and schemas as JSON), so 1 % covers a provider-side change; elsewhere
# the count is o200k times a family factor, an estimate, and 5 % comes on top.
EXACT_MARGIN = 0.01
MARGIN = 0.05


class RouteRuntime:
    """Everything a route needs per request, built once."""

    def __init__(self, route: RouteSettings, window: int) -> None:
        self.route = route
        self.window = window
        self.counter = TokenCounter(encoding_for(route.upstream.model),
                                    model=route.upstream.model)
        self.analyzer = MessageAnalyzer(self.counter)
        self.chunker = Chunker(self.analyzer, route.classification)
        self.fitter = Fitter(self.counter)
        self.policy: Policy = get_policy(route.policy, **route.policy_params)

        self.block_overhead = self.counter.text(OPEN + CLOSE) + 8
        margin = route.safety_margin
        if margin is None:
            margin = EXACT_MARGIN if self.counter.exact else MARGIN
        self.margin = math.ceil(margin * window)

    def room(self, body: dict[str, Any], tools_tokens: int) -> tuple[int, int]:
        """(room for messages, reserved output). Recall takes its share of the room only on
        the turns that recall (`proxy.recalling.recall`), so the rest of the time it all goes to
        the conversation."""
        r = self.route
        reserved = body.get("max_completion_tokens") or body.get("max_tokens")
        reserved = int(reserved) if reserved else r.max_output_tokens
        room = self.window - reserved - tools_tokens - self.margin
        return room, reserved


def resolve_window(route: RouteSettings, index: int) -> int:
    if route.context_window:
        return route.context_window
    import litellm

    try:
        info = litellm.get_model_info(route.upstream.model)
        window = info.get("max_input_tokens") or info.get("max_tokens")
    except Exception:
        window = None
    if not window:
        raise ConfigError(f"routes[{index}].context_window: LiteLLM does not know the window of "
                          f"{route.upstream.model!r}; set context_window for route {route.name!r}")
    return int(window)


def too_long(rt: RouteRuntime, conv: Conversation, fit: Fit, budget: int, reserved: int,
             tools: int, limit: str = "max_tokens") -> ContextLengthExceeded:
    if budget <= 0:  # the output asked for leaves the prompt nothing, whatever it holds
        return ContextLengthExceeded(
            f"{limit} {reserved} leaves no room for the prompt in the context window of "
            f"route {rt.route.name!r}: the window is {rt.window} tokens, of which the tools "
            f"take {tools} and the safety margin {rt.margin}. Ask for fewer than "
            f"{rt.window - tools - rt.margin} output tokens, or use a route with a larger "
            "window.", param=limit)
    return ContextLengthExceeded(
        f"This request cannot fit the context window of route {rt.route.name!r}: what must "
        f"stay (system and developer messages, the first user message, the latest turn) is "
        f"{fit.permanent_tokens} tokens, and {fit.tokens} after evicting everything evictable, "
        f"but only {budget} fit (window {rt.window} - reserved output {reserved} - tools "
        f"{tools} - safety margin and recall budget). Shorten the latest message or the "
        f"system prompt, lower max_tokens, or use a route with a larger window.",
        param="messages",
    )
