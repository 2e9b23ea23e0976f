"""The provider's usage (prompt, completion, cached prompt tokens) in the request log and
in /metrics, plain and streamed: what the provider's prompt cache actually served."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
from structlog.testing import capture_logs

from proxy.usage import StreamUsage, usage_fields
from tests.support.app import ClientFactory, make, settings_for
from tests.support.openai_server import UpstreamServer

OPENAI_USAGE = {"prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306,
                "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0}}


def test_usage_fields_of_openai_and_anthropic_shapes() -> None:
    assert usage_fields(OPENAI_USAGE) == {"usage_prompt": 2006, "usage_completion": 300,
                                          "usage_cached": 1920}
    anthropic = {"prompt_tokens": 50, "completion_tokens": 7, "cache_read_input_tokens": 40}
    assert usage_fields(anthropic) == {"usage_prompt": 50, "usage_completion": 7,
                                       "usage_cached": 40}
    assert usage_fields({"prompt_tokens": 12}) == {"usage_prompt": 12}  # no cache reported
    assert usage_fields(None) == {} and usage_fields("12") == {}
    assert usage_fields({"prompt_tokens": True, "completion_tokens": -1,
                         "prompt_tokens_details": None}) == {}


def test_stream_usage_reads_the_usage_chunk_only() -> None:
    seen = StreamUsage()
    seen.see(b'data: {"choices":[{"delta":{"content":"hi"}}],"usage":null}\n\n')
    assert seen.fields == {}
    # one frame may hold several events; the last is OpenAI's usage chunk
    seen.see(b'data: {"choices":[{"delta":{},"finish_reason":"stop"}],"usage":null}\n\n'
             b'data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,'
             b'"prompt_tokens_details":{"cached_tokens":0}}}\n\n')
    seen.see(b"data: [DONE]\n\n")
    assert seen.fields == {"usage_prompt": 9, "usage_completion": 2, "usage_cached": 0}


@pytest.fixture
async def cached_upstream() -> AsyncIterator[UpstreamServer]:
    """The stand-in with a prompt cache: a prompt's leading messages seen before count."""
    server = await UpstreamServer(prefix_cache=0).start()
    try:
        yield server
    finally:
        await server.close()


def _metric(text: str, name: str) -> float:
    line = next(ln for ln in text.splitlines() if ln.startswith(name + '{route="test"}'))
    return float(line.rsplit(" ", 1)[1])


async def test_the_providers_cached_tokens_reach_the_log_and_metrics(
        aiohttp_client: ClientFactory, cached_upstream: UpstreamServer) -> None:
    client = await make(aiohttp_client, settings_for(cached_upstream))
    sdk = openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key="sk-client",
                             max_retries=0)
    history: list[Any] = [{"role": "system", "content": "You are terse. " * 40},
                          {"role": "user", "content": "First question?"}]
    reported: list[tuple[int, int, int]] = []
    try:
        with capture_logs() as logs:
            first = await sdk.chat.completions.create(model="test-1", messages=history)
            history += [{"role": "assistant", "content": first.choices[0].message.content},
                        {"role": "user", "content": "And the second?"}]
            second = await sdk.chat.completions.create(model="test-1", messages=history)
            history += [{"role": "assistant", "content": second.choices[0].message.content},
                        {"role": "user", "content": "A third, streamed?"}]
            stream = await sdk.chat.completions.create(
                model="test-1", messages=history, stream=True,
                stream_options={"include_usage": True})
            last = None
            async for chunk in stream:
                last = chunk.usage or last
            history.append({"role": "user", "content": "And streamed without usage?"})
            plain = await sdk.chat.completions.create(model="test-1", messages=history,
                                                      stream=True)
            async for _ in plain:
                pass
    finally:
        await sdk.close()
    assert last is not None
    for u in (first.usage, second.usage, last):
        assert u is not None and u.prompt_tokens_details is not None
        reported.append((u.prompt_tokens, u.completion_tokens,
                         u.prompt_tokens_details.cached_tokens or 0))
    assert reported[0][2] == 0 and reported[1][2] > 0 and reported[2][2] > reported[1][2]
    lines = [e for e in logs if e["event"] == "request"]
    assert [(e.get("usage_prompt"), e.get("usage_completion"), e.get("usage_cached"))
            for e in lines] == [*reported, (None, None, None)]  # no usage asked: none known
    text = await (await client.get("/metrics")).text()
    assert _metric(text, "ctxwarden_upstream_prompt_tokens_total") == sum(
        r[0] for r in reported)
    assert _metric(text, "ctxwarden_upstream_cached_tokens_total") == sum(
        r[2] for r in reported)
    assert _metric(text, "ctxwarden_upstream_completion_tokens_total") == sum(
        r[1] for r in reported)
