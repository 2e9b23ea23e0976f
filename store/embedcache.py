"""The content-hash cache every embedder sits behind, and in-flight sharing.

A text is embedded once per process: its vector is kept by the hash of its text (a
bounded LRU), and a text already being computed is waited on, not sent again. The cache
is filled by whatever thread a job finishes in (the local model's dispatcher,
store/embedproc.py), so it is thread-safe, and callers on any event loop wait through
`_bridge`. The three ways to ask (`embed`, `embed_nowait`, `embed_within`) are described in
store/embed.py, with the embedders built on this base.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]
T = TypeVar("T")


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

    def embed_nowait(self, texts: Sequence[str], *, urgent: bool = True) -> bool:
        """Schedule texts ahead of background work and return at once; their vectors show
        in `cached()` when done. False when the embedder's queue is full (dropped).
        `urgent`: a request will wait on them; else a later turn may look them up (no
        request waits: the newest few such are kept, `_start_ahead`)."""
        try:
            return self._plan(texts, urgent=urgent, ahead=not urgent) is not None
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

    def _plan(self, texts: Sequence[str], *, urgent: bool, ahead: bool = False
              ) -> Plan | None:
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
                raw = (self._start_ahead(list(todo.values())) if ahead
                       else self._start(list(todo.values()), urgent))
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

    def _start_ahead(self, texts: list[str]) -> Future[Any] | None:
        """Texts a later turn may look up: ahead of background work where the embedder
        can tell (the local model's process), else as background work."""
        return self._start(texts, False)


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
