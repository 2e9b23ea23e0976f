"""Routes are resolved once, when the app is built: the transport each provider gets, the
proxy environment, and a misconfigured route stopping start-up with a message naming it."""

from __future__ import annotations

import pytest

from proxy.app import init_app
from proxy.config import ConfigError, Settings
from proxy.keys import SETTINGS, UPSTREAM
from proxy.upstream import resolve
from store.base import MemoryStore
from tests.support.upstream import KEY, route


def test_transport_choice_per_provider() -> None:
    base = "http://127.0.0.1:9/v1"
    for model in ("openai/gpt-4o", "gpt-4o-mini", "custom_openai/x", "hosted_vllm/x",
                  "lm_studio/x", "openai_like/x"):
        assert resolve(route(base, model=model)).transport == "direct", model
    for model in ("anthropic/claude-3-5-sonnet-latest", "ollama/llama3", "groq/llama3-8b"):
        assert resolve(route(base, model=model)).transport == "litellm", model
    assert resolve(route(base, "litellm")).transport == "litellm"
    target = resolve(route(base))
    assert target.url == base + "/chat/completions" and KEY not in repr(target)
    with pytest.raises(ConfigError, match="transport 'litellm'"):
        resolve(route(base, "direct", model="anthropic/claude-3-5-sonnet-latest"))
    with pytest.raises(ConfigError, match="NOT_SET_ANYWHERE"):
        resolve(route(base, api_key=None, api_key_env="NOT_SET_ANYWHERE"))


def test_env_proxy_is_honoured_like_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy",
                 "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert resolve(route("http://10.1.2.3:8000/v1")).proxy is None
    monkeypatch.setenv("HTTP_PROXY", "http://corp-proxy:3128")
    assert resolve(route("http://10.1.2.3:8000/v1")).proxy == "http://corp-proxy:3128"
    monkeypatch.setenv("NO_PROXY", "10.1.2.3,localhost")
    assert resolve(route("http://10.1.2.3:8000/v1")).proxy is None




def test_every_misconfigured_route_stops_start_up_by_name(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CTXW_TEST_UNSET_KEY", raising=False)
    upstreams = {
        "fine": {"model": "openai/gpt-4o", "api_key": "sk-x"},
        "claude": {"model": "anthropic/claude-3-5-sonnet-latest",
                   "api_key_env": "CTXW_TEST_UNSET_KEY"},
        "mystery": {"model": "my-mystery-model"},
        "forced": {"model": "anthropic/claude-3-5-sonnet-latest", "api_key": "sk-x",
                   "transport": "direct"},
        "vllm": {"model": "hosted_vllm/llama-3", "transport": "direct"},
        # a mock answers without a provider: an unset key variable does not matter there
        "demo": {"model": "openai/demo", "mock_response": "hi",
                 "api_key_env": "CTXW_TEST_UNSET_KEY"},
    }
    routes = [{"name": name, "upstream": up, "context_window": 8000}
              for name, up in upstreams.items()]
    with pytest.raises(ConfigError) as exc:
        init_app(Settings(store={"path": ":memory:"}, routes=routes), store=MemoryStore())
    assert str(exc.value) == (
        "routes[1] ('claude'): upstream.api_key_env: the environment variable "
        "CTXW_TEST_UNSET_KEY is not set\n"
        "routes[2] ('mystery'): upstream.model: LiteLLM cannot tell the provider of "
        "'my-mystery-model'; prefix it, e.g. 'openai/my-mystery-model'\n"
        "routes[3] ('forced'): upstream.transport: 'direct' needs a provider that speaks "
        "OpenAI's wire format, and 'anthropic' does not; use transport 'litellm'\n"
        "routes[4] ('vllm'): upstream.api_base: provider 'hosted_vllm' needs one")
    monkeypatch.setenv("CTXW_TEST_UNSET_KEY", "sk-ant-x")
    app = init_app(Settings(store={"path": ":memory:"}, routes=[routes[1], routes[5]]),
                   store=MemoryStore())
    claude = app[SETTINGS].routes[0]
    target = app[UPSTREAM].target(claude)  # resolved when the app was built, not now
    assert target.transport == "litellm" and target.api_key == "sk-ant-x"
    monkeypatch.delenv("CTXW_TEST_UNSET_KEY")
    assert app[UPSTREAM].target(claude) is target
