"""The local embedding model in a process of its own, fed by one dispatcher thread.

Why a process: sentence-transformers inference is CPU-bound and holds the GIL for much of
a batch; in a thread of the proxy's process it slowed every request while a backlog of
passages was being embedded (issue 10: recall waited 4-7 s behind the worker, overhead
p50 67 ms). In its own process with one torch thread it takes one core at most (two for
the few milliseconds of a query a request waits for, `URGENT_THREADS`), and the proxy's
event loop never waits on it; torch (400 MB, 6 s to import here) is not even
loaded in the proxy's process.

Shape: the parent keeps two bounded queues of jobs, `urgent` (a request's query, a few
texts) before `bulk` (the worker's passages, sliced into `batch_size` texts so an urgent
job waits for one slice at most). One dispatcher thread sends one job at a time over a
pipe and hands the vectors back through a `concurrent.futures.Future`, so callers on any
event loop (or none) can wait on it. If the child dies (killed, out of memory), the
dispatcher starts a new one and resends the job it was working on (a job that kills
three children in a row fails); nothing a request does ever fails because of it,
embedding just lags. `queued` and `oldest_age` say by how much.

Measured here (2 shared cores): the proxy's process stays at 40 MB with torch never
imported (it was 400+ MB with the model in a thread).

While the proxy prepares a history sent whole for the first time, the child is held
still (`pause` / `resume`: SIGSTOP / SIGCONT, proxy/hush.py), on Linux only: there the
child asks the kernel to SIGKILL it when its parent dies (`PR_SET_PDEATHSIG`), so a child
stopped by a server that is then SIGKILLed does not stay behind, stopped. An urgent job
resumes it at once.

The child's process, seen from here (start, ask, signal, reap), is store/embedhandle.py.
"""

from __future__ import annotations

import contextlib
import itertools
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import structlog

from store.embedchild import CAN_PAUSE, PRECISION, PRECISIONS
from store.embedhandle import ChildHandle, EmbedderDied

__all__ = ["CAN_PAUSE", "PRECISIONS", "EmbedProcess", "EmbedderDied"]
log = structlog.get_logger("ctxwarden.store")

Vectors = npt.NDArray[np.float32]
MAX_ATTEMPTS = 3  # children a job may see die before it fails
START_TIMEOUT = 600.0  # seconds for a child to import torch and load the model


@dataclass(slots=True)
class Job:
    texts: list[str]
    future: Future[Vectors] = field(default_factory=Future)
    since: float = field(default_factory=time.monotonic)
    attempts: int = 0
    id: int = 0
    urgent: bool = False


class EmbedProcess:
    """`submit` jobs from any thread; one child process computes them, one at a time."""

    def __init__(self, model: str, *, batch_size: int = 8, max_queued: int = 4096,
                 resolve: Callable[[str], str] = lambda m: m,
                 precision: str = PRECISION) -> None:
        if precision not in PRECISIONS:
            raise ValueError(f"Unknown precision: {precision} (one of {', '.join(PRECISIONS)})")
        self.model = model
        self.batch_size = batch_size
        self.precision = precision  # asked for; the child's own is `computes` once ready
        self.computes: str | None = None
        self.max_queued = max_queued  # texts waiting, both queues together
        self._resolve = resolve
        self._cond = threading.Condition()
        self._urgent: deque[Job] = deque()
        self._bulk: deque[Job] = deque()
        self._queued = 0
        self._current: Job | None = None
        self._thread: threading.Thread | None = None
        self._child: ChildHandle | None = None
        self._ids = itertools.count(1)
        self._stopping = False
        self._want_child = False  # set by `start` and `submit`: keep a child running
        self.ready: Future[int] = Future()  # the vector size, once a child has loaded
        self.dim: int | None = None
        self.pid: int | None = None
        self.restarts = 0  # children that died and were replaced
        self.failures = 0  # children that could not load the model, in a row
        self._paused = False  # the child is SIGSTOPped (`pause`)

    # -- submitting ----------------------------------------------------------------------
    def submit(self, texts: list[str], *, urgent: bool = False) -> Future[Vectors] | None:
        """The vectors' future; None when the queue is full (an urgent job is refused
        then; the caller goes on without it). Bulk jobs are sliced to `batch_size`."""
        with self._cond:
            if self._stopping:
                raise RuntimeError("the embedder was closed")
            if self._queued + len(texts) > self.max_queued and (urgent or self._queued):
                return None
            self._want_child = True
            self._start_thread()
            if urgent:  # a request waits on it: never behind a stopped child
                self._resume_locked()
            if urgent or len(texts) <= self.batch_size:
                job = Job(list(texts), id=next(self._ids), urgent=urgent)
                (self._urgent if urgent else self._bulk).append(job)
                self._queued += len(texts)
                self._cond.notify()
                return job.future
            parts = [Job(list(texts[i:i + self.batch_size]), id=next(self._ids))
                     for i in range(0, len(texts), self.batch_size)]
            self._bulk.extend(parts)
            self._queued += len(texts)
            self._cond.notify()
        return _joined([p.future for p in parts])

    @property
    def queued(self) -> int:
        """Texts waiting or being embedded."""
        return self._queued

    def answers_now(self) -> bool:
        """A query submitted now would start at once: the model is loaded and nothing is
        running or queued ahead of it. (While the model loads or a batch runs, a caller
        that can only wait a few milliseconds should not wait at all.)"""
        with self._cond:
            return (self.ready.done() and self._current is None and not self._urgent
                    and not self._stopping)

    def oldest_age(self) -> float:
        """Seconds the oldest job waiting or being embedded has waited (0 when none)."""
        with self._cond:
            jobs = [j for j in (self._current, self._urgent[0] if self._urgent else None,
                                self._bulk[0] if self._bulk else None) if j is not None]
        return max((time.monotonic() - j.since for j in jobs), default=0.0)

    # -- holding the child still -------------------------------------------------------------
    def pause(self) -> bool:
        """SIGSTOP the child: True if it is stopped now (by this call or an earlier one).
        False where the child cannot be stopped safely (not Linux), when there is none,
        or when an urgent job is queued or running."""
        with self._cond:
            if self._paused:
                return True
            urgent = self._urgent or (self._current is not None and self._current.urgent)
            child = self._child
            if not CAN_PAUSE or urgent or self._stopping or child is None:
                return False
            try:  # ValueError: `_reap` (another thread) closed it just now
                if not child.alive():
                    return False
                child.signal(signal.SIGSTOP)
            except (OSError, ValueError):
                return False
            self._paused = True
            return True

    def resume(self) -> None:
        """SIGCONT the child if `pause` stopped it."""
        with self._cond:
            self._resume_locked()

    @property
    def paused(self) -> bool:
        return self._paused

    def _resume_locked(self) -> None:
        child = self._child
        if self._paused:
            self._paused = False
            if child is not None:
                with contextlib.suppress(OSError, ValueError):  # ValueError: closed
                    child.signal(signal.SIGCONT)

    # -- the dispatcher thread -------------------------------------------------------------
    def _start_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._dispatch, name="embed-dispatch",
                                            daemon=True)
            self._thread.start()

    def start(self) -> Future[int]:
        """Start the child now (it loads the model); `ready` resolves with the vector size."""
        with self._cond:
            self._want_child = True
            self._start_thread()
            self._cond.notify()
        return self.ready

    def _dispatch(self) -> None:
        while True:
            with self._cond:
                while not (self._urgent or self._bulk or self._stopping
                           or self._respawn_needed()):
                    self._cond.wait(timeout=1.0)  # and look at the child every second
                if self._stopping:
                    return
                job = (self._urgent.popleft() if self._urgent
                       else self._bulk.popleft() if self._bulk else None)
                self._current = job
            if job is None and self._child is not None:
                log.warning("embedder_process_died", pid=self.pid, idle=True,
                            exitcode=self._child.exitcode)
            try:
                if not self._alive() and not self._spawn():
                    if job is not None:  # a child that died while loading is retried;
                        if self.failures >= MAX_ATTEMPTS:  # a model that never loads is not
                            self._finish(job, error=self._load_error)
                        else:
                            self._requeue(job)
                    continue
                if job is not None:
                    self._run(job)
            except Exception as exc:  # never let the thread die: fail the job, go on
                log.exception("embed_dispatch_failed", error=type(exc).__name__)
                if job is not None:
                    self._finish(job, error=exc)

    def _run(self, job: Job) -> None:
        assert self._child is not None
        try:
            job_id, status, value = self._child.ask(job.id, job.texts, job.urgent)
        except (EOFError, OSError, EmbedderDied) as exc:
            self._died(job, exc)
            return
        if job_id != job.id:  # cannot happen with one job in flight; never mix answers
            self._died(job, EmbedderDied(f"answer for job {job_id}, expected {job.id}"))
            return
        if status == "ok":
            self._finish(job, value=value)
        else:
            self._finish(job, error=RuntimeError(f"embedding failed: {value}"))

    def _died(self, job: Job, exc: BaseException) -> None:
        code = self._child.exitcode if self._child is not None else None
        self._reap()
        if self._stopping:  # `close` killed it: not a death to report or retry
            self._finish(job, error=RuntimeError("the embedder was closed"))
            return
        job.attempts += 1
        log.warning("embedder_process_died", pid=self.pid, exitcode=code,
                    error=type(exc).__name__, attempt=job.attempts, texts=len(job.texts))
        if job.attempts >= MAX_ATTEMPTS:
            self._finish(job, error=EmbedderDied(
                f"the embedding process died {job.attempts} times on this job"))
            return
        self._requeue(job)

    def _requeue(self, job: Job) -> None:
        with self._cond:  # again, first: it has waited longest
            if not self._stopping:
                self._current = None
                (self._urgent if job.urgent else self._bulk).appendleft(job)
                self._cond.notify()
                return
        self._finish(job, error=RuntimeError("the embedder was closed"))

    def _finish(self, job: Job, *, value: Vectors | None = None,
                error: BaseException | None = None) -> None:
        with self._cond:
            self._queued -= len(job.texts)
            if self._current is job:
                self._current = None
        if job.future.done():
            return
        if error is not None:
            job.future.set_exception(error)
        else:
            assert value is not None
            job.future.set_result(value)

    # -- the child's life ----------------------------------------------------------------
    _load_error: BaseException = EmbedderDied("the embedding process is not running")

    def _alive(self) -> bool:
        return self._child is not None and self._child.alive()

    def _respawn_needed(self) -> bool:
        """Idle, wanted and not running (killed, or not started yet): start one now, so
        the next job does not wait for the model to load. Not after a failed load: the
        next job retries that, with a backoff."""
        return self._want_child and self.failures == 0 and not self._alive()

    def _spawn(self) -> bool:
        """Start a child and wait until its model is loaded; False (after a backoff) if
        it could not load it."""
        self._reap()
        if self.pid is not None:  # one ran before: this replaces it
            self.restarts += 1
        if self.failures:
            with self._cond:  # a backoff that `close` cuts short
                self._cond.wait_for(lambda: self._stopping,
                                    min(30.0, 0.5 * 2 ** min(self.failures, 6)))
        child = ChildHandle(self._resolve(self.model), self.batch_size, self.precision)
        with self._cond:  # `close` kills the child it sees, or we see that it was closed
            self._child = child
            stopping = self._stopping
        started = time.monotonic()
        try:
            dim, computes, pid = child.ready(lambda: stopping or self._stopping,
                                             START_TIMEOUT)
        except (EmbedderDied, RuntimeError, EOFError, OSError) as exc:
            if self._stopping:
                self._reap()
                return False
            self.failures += 1
            self._load_error = exc
            log.error("embedder_process_failed", model=self.model, error=str(exc)[:300],
                      failures=self.failures)
            self._reap()
            return False
        self.failures = 0
        self.dim, self.computes, self.pid = dim, computes, pid
        if not self.ready.done():
            self.ready.set_result(self.dim)
        log.info("embedder_process_ready", pid=self.pid, model=self.model, dim=self.dim,
                 precision=self.computes, seconds=round(time.monotonic() - started, 2))
        return True

    def _reap(self) -> None:
        child, self._child = self._child, None
        self._paused = False  # it is killed below (SIGKILL ends a stopped process too)
        if child is not None:
            child.close()

    def close(self, timeout: float = 5.0) -> None:
        """Stop the dispatcher and the child at once; queued jobs fail. The child is
        killed, not asked: it holds nothing durable, and a batch it is halfway through
        at nice 19 on a busy machine would keep the proxy's exit waiting for seconds."""
        with self._cond:
            self._stopping = True
            left = [*self._urgent, *self._bulk]
            self._urgent.clear()
            self._bulk.clear()
            self._cond.notify_all()
            child = self._child
        if child is not None:  # the dispatcher's wait() on its sentinel returns now
            with contextlib.suppress(Exception):
                child.kill()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        for job in left:
            self._finish(job, error=RuntimeError("the embedder was closed"))
        self._reap()


def _joined(parts: list[Future[Vectors]]) -> Future[Vectors]:
    """One future for the slices' futures, stacked in order (the first error fails it)."""
    out: Future[Vectors] = Future()
    left = [len(parts)]
    lock = threading.Lock()

    def done(part: Future[Vectors]) -> None:
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if out.done():
            return
        exc = part.exception()
        if exc is not None:
            with contextlib.suppress(Exception):
                out.set_exception(exc)
            return
        if last:
            with contextlib.suppress(Exception):
                out.set_result(np.concatenate([p.result() for p in parts]))

    for p in parts:
        p.add_done_callback(done)
    return out
