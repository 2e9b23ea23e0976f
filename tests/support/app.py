"""The proxy app under test: settings with one route to the fake upstream, a client on it."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

from proxy.app import init_app
from proxy.config import Settings
from store.base import MemoryStore, Store
from tests.support.openai_server import UpstreamServer

ClientFactory = Callable[..., Awaitable[TestClient[Any, Any]]]  # pytest-aiohttp's fixture
CHAT = "/v1/chat/completions"
STUB = re.compile(r"offloaded as chunk ([0-9a-f~]+);")  # the stub left for an evicted chunk


def one_route(api_base: str, *, name: str, model: str, store: str = ":memory:",
              **route: Any) -> Settings:
    """Settings with one route (window 4000, recall off unless `route` says otherwise)."""
    base: dict[str, Any] = {
        "name": name, "model": model, "context_window": 4000, "max_output_tokens": 200,
        "upstream": {"model": "openai/gpt-4o", "api_base": api_base, "api_key": "sk-up"},
        "recall": {"enabled": False}}
    base.update(route)
    return Settings(store={"path": store}, routes=[base])


def settings_for(upstream: UpstreamServer, **route: Any) -> Settings:
    """Route `test` for models `test-*`."""
    return one_route(upstream.url, name="test", model="test-*", **route)


def config(api_base: str, store: str = ":memory:", **route: Any) -> Settings:
    """Route `t` for models `t-*`, at any base URL (a closed port, say)."""
    return one_route(api_base, name="t", model="t-*", store=store, **route)


async def make(aiohttp_client: ClientFactory, settings: Settings,
               store: Store | None = None) -> TestClient[Any, Any]:
    return await aiohttp_client(init_app(settings, store=store or MemoryStore()),
                                server_kwargs={"handler_cancellation": True})


def chat(stream: bool = False, text: str = "hi") -> dict[str, Any]:
    """A one-message request for route `t`."""
    return {"model": "t-1", "stream": stream, "messages": [{"role": "user", "content": text}]}


async def refused_whole(client: TestClient[Any, Any], msgs: dict[str, Any],
                        headers: dict[str, str], upstream: UpstreamServer) -> None:
    """The store could not take what this turn evicts: OpenAI's 503 shape with our code,
    nothing went upstream without its chunks, and the proxy stays up."""
    forwarded = len(upstream.history)
    refused = await client.post(CHAT, json=msgs, headers=headers)
    assert refused.status == 503
    err = (await refused.json())["error"]
    assert (err["type"], err["code"]) == ("store_error", "store_unavailable")
    assert err["message"].endswith("nothing was dropped from the conversation.")
    assert len(upstream.history) == forwarded  # nothing went out without its chunks
    assert (await client.get("/healthz")).status == 200  # the proxy stays up
