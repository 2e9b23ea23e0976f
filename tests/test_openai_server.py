"""The fake OpenAI upstream (tests/support/openai_server.py) speaks OpenAI to the official
SDK, and refuses what OpenAI refuses with OpenAI's own words: every other test relies on it."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.support.messages import assistant, call, tool, user
from tests.support.openai_server import UpstreamServer
from tests.support.upstream import TOOLS


async def test_fake_upstream_speaks_openai_to_the_sdk(upstream: UpstreamServer) -> None:
    # Any: the SDK wants TypedDict messages; these plain dicts are what it sends anyway
    client: Any = openai.AsyncOpenAI(base_url=upstream.url, api_key="sk-test", max_retries=0)
    try:
        upstream.enqueue(tool_calls=[{"name": "read_file", "arguments": '{"path": "a.py"}'}])
        r = await client.chat.completions.create(model="gpt-4o-mini", messages=[user("hi")],
                                                 tools=TOOLS)
        assert r.choices[0].finish_reason == "tool_calls"
        assert r.choices[0].message.tool_calls[0].function.name == "read_file"
        upstream.enqueue("one two three")
        stream = await client.chat.completions.create(
            model="gpt-4o-mini", messages=[user("hi")], stream=True,
            stream_options={"include_usage": True})
        chunks = [c async for c in stream]
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) \
            == "one two three"
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3
        assert [m.id async for m in client.models.list()] == ["gpt-4o-mini", "mock-1"]
        with pytest.raises(openai.BadRequestError) as exc:
            await client.chat.completions.create(
                model="gpt-4o-mini", messages=[user("q"), assistant(None, call("c1")), user("x")])
        assert exc.value.body == {  # OpenAI's own wording for a broken tool-call pair
            "message": "An assistant message with 'tool_calls' must be followed by tool "
                       "messages responding to each 'tool_call_id'. The following "
                       "tool_call_ids did not have response messages: c1",
            "type": "invalid_request_error", "param": "messages.[1].role", "code": None}
        with pytest.raises(openai.BadRequestError) as exc:
            await client.chat.completions.create(model="gpt-4o-mini",
                                                 messages=[user("q"), tool("c9", "orphan")])
        assert "must be a response to a preceeding message" in exc.value.message
        upstream.context_window = 20
        with pytest.raises(openai.BadRequestError) as exc:
            await client.chat.completions.create(model="gpt-4o-mini",
                                                 messages=[user("word " * 50)])
        assert exc.value.code == "context_length_exceeded"
        assert upstream.rejected == 3
    finally:
        await client.close()
