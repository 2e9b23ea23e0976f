"""The property: random agent histories (text, images, PDFs, audio; function, custom and
legacy calls; tools, functions and response_format schemas), valid then broken on purpose,
at a 2,000-token window. The proxy either forwards a request the OpenAI stand-in accepts
and that fits the window, counted independently here (media by the providers' published
rules, worked out by hand), or answers a 4xx in OpenAI's shape; never a 5xx.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
import tiktoken
from aiohttp.test_utils import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.app import init_app
from store.base import MemoryStore
from tests.support.app import CHAT, ClientFactory, one_route
from tests.support.media import audio_part, file_part, image, image_part, mp3, pdf, wav
from tests.support.messages import assistant, call, filler, tool
from tests.support.openai_server import UpstreamServer

WINDOW, RESERVED = 2000, 200
O200K = tiktoken.get_encoding("o200k_base")


@pytest.fixture
async def client(aiohttp_client: ClientFactory, upstream: UpstreamServer) -> TestClient[Any, Any]:
    settings = one_route(upstream.url, name="t", model="t-*", context_window=WINDOW,
                         max_output_tokens=RESERVED)
    return await aiohttp_client(init_app(settings, store=MemoryStore()))


def body(*messages: Any, **fields: Any) -> bytes:
    """stdlib json: it writes integers of any size, which JSON allows and orjson refuses."""
    return json.dumps({"model": "t-1", "messages": list(messages), **fields}).encode()


ROLES = ["system", "developer", "user", "assistant", "tool", "function"]
texts = st.one_of(st.text(max_size=40), st.integers(0, 700).map(lambda n: filler(n, "w")))
# Media with what each costs on gpt-4o, worked out from OpenAI's rules (proxy/media.py)
MEDIA: list[tuple[dict[str, Any], int]] = [
    (image_part(image(64, 64), "low"), 85),
    (image_part(image(4000, 3000), "high"), 85 + 4 * 170),
    (image_part(image(1000, 3000, "JPEG"), mime="image/jpeg"), 85 + 8 * 170),
    (image_part("https://example.com/a.png", "low"), 85),
    (image_part("https://example.com/a.png"), 85 + 8 * 170),
    (audio_part(wav(3.0)), 30),
    (audio_part(mp3(40), "mp3"), 11),  # 40 × 1152 / 44100 s
    (file_part(pdf(1)), 3000 + 85 + 6 * 170),
    (file_part(None), 5 * (3000 + 85 + 6 * 170)),
]
MEDIA_COST = {orjson.dumps(part): cost for part, cost in MEDIA}
cheap = st.sampled_from([part for part, cost in MEDIA if cost < 1000])
parts = st.one_of(st.fixed_dictionaries({"type": st.just("text"), "text": texts}), cheap, cheap,
                  st.sampled_from([part for part, _ in MEDIA]))
contents = st.one_of(texts, st.none(), st.lists(parts, max_size=3), st.lists(parts, max_size=3))
junk = st.one_of(st.integers(), st.none(), st.text(max_size=5), st.lists(st.integers(),
                                                                          max_size=2))
TOOLS = [{"type": "custom", "custom": {"name": "patch", "description": "Apply a diff."}},
         {"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]
FUNCTIONS = [{"name": "lookup", "parameters": {"type": "object", "properties": {
    "ref": {"type": "string", "description": filler(30, "f")}}}}]


def schema(fields: int) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "out", "schema": {
        "type": "object", "properties": {f"f{i}": {"type": "string", "description":
                                         filler(10, f"s{i}")} for i in range(fields)}}}}


def any_call(cid: str, draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.booleans()):
        return {"id": cid, "type": "custom", "custom": {"name": "patch", "input": draw(texts)}}
    return call(cid, draw(st.sampled_from(["read", "run"])),
                draw(st.sampled_from(["{}", '{"a": 1}'])))


@st.composite
def histories(draw: st.DrawFn) -> list[Any]:
    msgs: list[Any] = []
    if draw(st.booleans()):
        msgs.append({"role": draw(st.sampled_from(["system", "developer"])),
                     "content": draw(texts)})
    ids = iter(range(1000))
    for _ in range(draw(st.integers(0, 10))):
        kind = draw(st.sampled_from(["user", "assistant", "tools", "tools", "legacy"]))
        if kind == "tools":  # function and custom tool calls
            cids = [f"c{next(ids)}" for _ in range(draw(st.integers(1, 3)))]
            msgs.append(assistant(draw(st.one_of(st.none(), texts)),
                                  *(any_call(c, draw) for c in cids)))
            msgs += [tool(c, draw(texts)) for c in cids]
        elif kind == "legacy":  # a function_call answered by a `function` message
            args = draw(st.sampled_from(["{}", orjson.dumps({"ref": filler(200, "a")}).decode()]))
            msgs += [{"role": "assistant", "content": None,
                      "function_call": {"name": "lookup", "arguments": args}},
                     {"role": "function", "name": "lookup", "content": draw(texts)}]
        else:
            msgs.append({"role": kind, "content": draw(contents)})
    for _ in range(draw(st.integers(0, 2))):  # then break it, maybe
        if not msgs:
            break
        i = draw(st.integers(0, len(msgs) - 1))
        op = draw(st.sampled_from(["drop", "dup", "swap", "role", "content", "id", "calls",
                                   "media", "fcall"]))
        m = dict(msgs[i])
        if op == "drop":
            del msgs[i]
            continue
        if op == "dup":
            msgs.insert(i, m)
        elif op == "swap":
            j = draw(st.integers(0, len(msgs) - 1))
            msgs[i], msgs[j] = msgs[j], msgs[i]
        elif op == "role":
            m["role"] = draw(st.one_of(st.sampled_from(ROLES), junk))
        elif op == "content":
            m["content"] = draw(junk)
        elif op == "media":
            kind = draw(st.sampled_from(["image_url", "input_audio", "file"]))
            m["content"] = [{"type": kind, kind: draw(st.one_of(junk, st.just({})))}]
        elif op == "fcall":
            m["function_call"] = draw(junk)
        elif op == "id":
            m["tool_call_id"] = draw(st.one_of(st.just("c0"), junk))
        else:
            m["tool_calls"] = draw(st.one_of(junk, st.just([call("c0"), call("c0")]), st.just(
                [{"id": "c0", "type": "custom", "custom": {"input": "no name"}}])))
        msgs[i] = m
    return msgs


def forwarded_tokens(up: UpstreamServer, sent: dict[str, Any]) -> int:
    """The stand-in's count (text, calls, tools) plus what it does not see: media by the
    table above, the response_format schema and legacy functions as JSON."""
    tokens, _ = up.count_tokens(sent["messages"], sent.get("tools"))
    for m in sent["messages"]:
        if isinstance(m.get("content"), list):
            tokens += sum(MEDIA_COST.get(orjson.dumps(p), 0) for p in m["content"])
    for key in ("response_format", "functions"):
        if sent.get(key):
            tokens += len(O200K.encode_ordinary(orjson.dumps(sent[key]).decode()))
    return int(tokens)


extras = st.fixed_dictionaries({}, optional={
    "tools": st.just(TOOLS), "functions": st.just(FUNCTIONS),
    "response_format": st.one_of(st.just({"type": "json_object"}),
                                 *[st.integers(1, 20).map(schema)] * 3, junk)})


@settings(max_examples=250, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(messages=histories(), max_tokens=st.one_of(st.none(), st.integers(-2, 3000)),
       stream=st.booleans(), fields=extras)
async def test_property_valid_within_budget_or_4xx(client: TestClient[Any, Any],
                                                   upstream: UpstreamServer, messages: list[Any],
                                                   max_tokens: int | None, stream: bool,
                                                   fields: dict[str, Any]) -> None:
    fields = {**fields, "stream": stream}
    if max_tokens is not None:
        fields["max_tokens"] = max_tokens
    seen = len(upstream.history)
    resp = await client.post(CHAT, data=body(*messages, **fields),
                             headers={"Content-Type": "application/json"})
    text = await resp.text()
    assert resp.status < 500, text
    assert upstream.rejected == 0  # nothing forwarded was invalid or over the window
    if resp.status == 200:
        assert len(upstream.history) == seen + 1
        sent = upstream.history[-1].body
        reserved = sent.get("max_completion_tokens") or sent.get("max_tokens") or RESERVED
        assert forwarded_tokens(upstream, sent) + reserved <= WINDOW
        assert "error" not in text[:200]
    else:
        assert 400 <= resp.status < 500 and len(upstream.history) == seen
        assert set(orjson.loads(text)["error"]) >= {"message", "type", "code"}
