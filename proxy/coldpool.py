"""A history sent whole for the first time is analysed on two cores.

A client resuming a chat or a stateless caller sends hundreds of messages the proxy has
never seen. Their analysis (`proxy.analysis.measure`: token counts, rare identifiers,
failure checks) is per message, independent, pure Python and tiktoken under the
interpreter lock (docs/design-notes.md). Such a history's plain-text contents are
estimated, not tokenized (`measure(estimate=True)`; the fit counts what it keeps), which
took its analysis from ~75 to ~30 ms of 1,000 messages. So when a request's unseen
messages come to `min_bytes` of content, about half of them go to a worker process while
this process measures the other half, and the session's first read of the store runs in
between (`Pipeline._locked`).
One job is out at a time: a cold history that arrives meanwhile is measured here.

The worker computes exactly what this process would (the same pure function on the same
message and tokenizer), so the infos, the decisions and the events are the same wherever
a message was measured (tests/test_coldpool.py). The worker starts with the first request
that needs it (that request measures everything here) or when `ctxwarden serve` starts; a
worker that dies or hangs costs its request nothing but the time: its half is measured
here and a new worker is started for the next cold history.
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from multiprocessing.connection import wait
from typing import Any

import structlog
import tiktoken

from proxy.analysis import Facts, MessageAnalyzer, MsgInfo, fingerprint, measure, text_of
from proxy.prefix import Prefix, known_prefix
from proxy.tokens import TokenCounter

log = structlog.get_logger("ctxwarden")

MIN_BYTES = 64_000  # unseen content worth a worker's round trip (~2 ms; ~0.1 µs a byte)
# A worker that has not answered in 1 s plus 1 s per MB of its messages (~20 times what it
# takes here) is taken for dead.
TIMEOUT_S, TIMEOUT_S_PER_BYTE = 1.0, 1e-6

_COUNTERS: dict[tuple[str, str], TokenCounter] = {}  # in the worker: one per tokenizer


def _measure(encoding: str, model: str, messages: list[dict[str, Any]],
             estimate: bool) -> list[Facts]:
    """In the worker: `measure` each message with the route's tokenizer."""
    counter = _COUNTERS.get((encoding, model))
    if counter is None:
        counter = TokenCounter(tiktoken.get_encoding(encoding), model=model)
        _COUNTERS[(encoding, model)] = counter
    return [measure(counter, m, text_of(m), estimate) for m in messages]


def _follow_parent() -> None:
    """In the worker, first: exit when the server's process is gone, even SIGKILLed (an
    idle pool worker otherwise waits on its queue forever, orphaned)."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        wait([parent.sentinel])
        os._exit(0)

    threading.Thread(target=watch, name="follow-parent", daemon=True).start()


def _warm() -> None:
    """Imports and the default tokenizer loaded before the first cold history, then out of
    the collector's sight (as `ctxwarden serve` does): a full collection in the worker
    walked them, 13-25 ms inside the half of a cold history it was measuring."""
    _measure("o200k_base", "", [{"role": "user", "content": "warm"}], estimate=False)
    gc.collect()
    gc.freeze()


class ColdPool:
    """`infos(analyzer, messages, prev)`: the messages' infos, as `Chunker.split` takes
    them; many unseen messages are measured half here, half in a worker process."""

    def __init__(self, workers: int = 1, min_bytes: int = MIN_BYTES) -> None:
        self.workers = workers  # 0: everything in this process
        self.min_bytes = min_bytes
        self._executor: Executor | None = None
        self._warm: Future[None] | None = None  # done once the worker has its tokenizer
        self.offloaded = 0  # messages a worker measured (metrics, tests)
        self.busy = False  # a job is out: the next cold history is measured here
        self.failures = 0

    @property
    def ready(self) -> bool:
        """A worker is up with its tokenizer loaded: cold histories go half to it."""
        return self._warm is not None and self._warm.done() and self._warm.exception() is None

    def processes(self) -> list[multiprocessing.process.BaseProcess]:
        """The worker processes (the executor has no public accessor; 3.14 adds ways to
        stop them)."""
        procs: dict[int, multiprocessing.process.BaseProcess] = getattr(
            self._executor, "_processes", None) or {}
        return list(procs.values())

    def start(self) -> None:
        """Start the worker now (its imports take ~0.5 s), not on a request."""
        if self.workers > 0 and self._executor is None:
            ctx = multiprocessing.get_context("spawn")  # fork is unsafe beside threads
            self._executor = ProcessPoolExecutor(self.workers, mp_context=ctx,
                                                 initializer=_follow_parent)
            self._warm = self._executor.submit(_warm)

    def close(self) -> None:
        procs = self.processes()
        executor, self._executor, self._warm = self._executor, None, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
        for proc in procs:  # an idle worker exits at once; a hung one is killed
            proc.join(2.0)
            if proc.exitcode is None:
                proc.kill()
                proc.join(2.0)

    async def infos(self, analyzer: MessageAnalyzer, messages: Sequence[dict[str, Any]],
                    prev: Prefix | None, on_cold: Callable[[], object] | None = None
                    ) -> tuple[list[MsgInfo], int]:
        """The infos of `messages` and how many leading ones were the previous request's
        (`prev`), as `proxy.prefix.infos_of` returns them. `on_cold` is called first
        when the unseen messages come to `min_bytes` (proxy/hush.py)."""
        head = known_prefix(messages, prev)
        rest = messages[len(head):]
        if len(rest) < 2:
            return head + [analyzer.info(m) for m in rest], len(head)
        fps = [fingerprint(m) for m in rest]
        out: list[MsgInfo | None] = [analyzer.cached(fp) for fp in fps]
        unseen = [i for i, info in enumerate(out) if info is None]
        size = [len(str(rest[i].get("content"))) for i in unseen]  # the work, roughly
        cold = sum(size) >= self.min_bytes
        if cold and on_cold is not None:
            on_cold()
        if self.workers <= 0 or not cold or not self.ready or self.busy:
            if cold:
                self.start()  # measured here while a worker starts (or works)
            for i in unseen:
                out[i] = _put(analyzer, fps[i], rest[i], None, cold)
            return head + _all(out), len(head)
        half, acc = len(unseen), 0
        for k, n in enumerate(size):  # the worker takes the later half, by size
            acc += n
            if acc * 2 >= sum(size):
                half = k + 1
                break
        mine, theirs = unseen[:half], unseen[half:]
        counter = analyzer.counter
        job = asyncio.get_running_loop().run_in_executor(
            self._executor, _measure, counter.encoding.name, counter.model,
            [rest[i] for i in theirs], True)
        self.busy = True  # one job at a time: a queue behind it would only add waiting
        try:
            await asyncio.sleep(0)  # let the session's store reads go out first
            for i in mine:
                out[i] = _put(analyzer, fps[i], rest[i], None, True)
            timeout = TIMEOUT_S + TIMEOUT_S_PER_BYTE * sum(size[half:])
            facts = await self._collect(job, len(theirs), timeout)
        finally:
            self.busy = False
        for k, i in enumerate(theirs):
            out[i] = _put(analyzer, fps[i], rest[i], facts[k] if facts else None, True)
        return head + _all(out), len(head)

    async def _collect(self, job: asyncio.Future[list[Facts]], n: int,
                       timeout: float) -> list[Facts] | None:
        """The worker's facts; None (measure them here) if it died or hung."""
        try:
            facts = await asyncio.wait_for(job, timeout)
        except Exception as exc:  # BrokenProcessPool, a timeout, a pickling error
            self.failures += 1
            log.warning("cold_pool_failed", error=type(exc).__name__, detail=str(exc)[:200],
                        messages=n)
            for proc in self.processes():  # a hung one too
                proc.kill()
            executor, self._executor, self._warm = self._executor, None, None
            if executor is not None:
                executor.shutdown(wait=False, cancel_futures=True)
            self.start()  # a fresh worker for the next cold history
            return None
        self.offloaded += n
        return facts


def _put(analyzer: MessageAnalyzer, fp: str, msg: dict[str, Any], facts: Facts | None,
         estimate: bool) -> MsgInfo:
    text = text_of(msg)
    return analyzer.put(fp, text, facts if facts is not None else
                        measure(analyzer.counter, msg, text, estimate))


def _all(infos: list[MsgInfo | None]) -> list[MsgInfo]:
    out = [i for i in infos if i is not None]
    assert len(out) == len(infos)
    return out
