"""The local embedding model in a process of its own, fed by one dispatcher thread.

Why a process: sentence-transformers inference is CPU-bound and holds the GIL for much of
a batch; in a thread of the proxy's process it slowed every request while a backlog of
passages was being embedded (issue 10: recall waited 4-7 s behind the worker, overhead
p50 67 ms). In its own process with one torch thread it takes one core at most (two for
the few milliseconds of a query a request waits for, `URGENT_THREADS`), and the proxy's
event loop never waits on it; torch (400 MB, 6 s to import here) is not even
loaded in the proxy's process.

Shape: the parent keeps bounded queues of jobs, `urgent` (a request's query, a few texts,
that the request waits on) before `ahead` (a step's words a later turn will look up) before
`bulk` (the worker's passages, sliced into `batch_size` texts so an urgent job waits for one
slice at most). Only an urgent job runs on two threads, resumes a held child or keeps it
from being held: every busy turn used to ask for its step's vector as urgent, and back to
back they queued by the hundred (tau-bench's 40 trajectories, 571 requests in seconds:
~220 urgent jobs, still ~150 when the agent-loop bench's 1,000-message histories came
after its cold phase), ran on two threads, and kept every stop refused (proxy/hush.py).
One dispatcher thread sends one job at a time over a pipe and hands the vectors back
through a `concurrent.futures.Future`, so callers on any event loop (or none) can wait on
it. If the child dies (killed, out of memory), the dispatcher starts a new one and
resends the job it was working on (a job that kills three children in a row fails);
nothing a request does ever fails because of it, embedding just lags. `queued` and
`oldest_age` say by how much.

Measured here (2 shared cores): the proxy's process stays at 40 MB with torch never
imported (it was 400+ MB with the model in a thread).

While the proxy prepares a history sent whole for the first time, the child is held
still (`pause` / `resume`: SIGSTOP / SIGCONT, proxy/hush.py), on Linux only: there the
child asks the kernel to SIGKILL it when its parent dies (`PR_SET_PDEATHSIG`), so a child
stopped by a server that is then SIGKILLed does not stay behind, stopped. An urgent job
resumes it at once.

The child's process, seen from here (start, ask, signal, reap), is store/embedhandle.py;
keeping it (start, replace, pause) store/embedlife.py; the queues store/embedqueue.py.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future

import structlog

from store.embedchild import CAN_PAUSE, PRECISION, PRECISIONS
from store.embedhandle import ChildHandle, EmbedderDied
from store.embedlife import ChildLife
from store.embedqueue import Job, JobQueues, Vectors, joined

__all__ = ["CAN_PAUSE", "PRECISIONS", "EmbedProcess", "EmbedderDied"]
log = structlog.get_logger("ctxwarden.store")

MAX_ATTEMPTS = 3  # children a job may see die before it fails
AHEAD = 8  # step vectors kept for later turns, the newest; an older one is dropped


class EmbedProcess(ChildLife, JobQueues):
    """`submit` jobs from any thread; one child process computes them, one at a time. The
    queues' bookkeeping is `JobQueues`' (store/embedqueue.py), the child's life and pauses
    `ChildLife`'s (store/embedlife.py)."""

    def __init__(self, model: str, *, batch_size: int = 8, max_queued: int = 4096,
                 resolve: Callable[[str], str] = lambda m: m,
                 precision: str = PRECISION) -> None:
        if precision not in PRECISIONS:
            raise ValueError(f"Unknown precision: {precision} (one of {', '.join(PRECISIONS)})")
        self.model = model
        self.batch_size = batch_size
        self.precision = precision  # asked for; the child's own is `computes` once ready
        self.computes: str | None = None
        # a question alone: "onnx", "traced" or "eager"; "onnx-only": no torch at all
        self.queries: str | None = None
        self.max_queued = max_queued  # texts waiting, both queues together
        self._resolve = resolve
        self._cond = threading.Condition()
        self._urgent: deque[Job] = deque()
        self._ahead: deque[Job] = deque()
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
    def submit(self, texts: list[str], *, urgent: bool = False,
               ahead: bool = False) -> Future[Vectors] | None:
        """The vectors' future; None when the queue is full (an urgent or ahead job is
        refused then; the caller goes on without it). Bulk jobs are sliced to
        `batch_size`. `urgent`: a request waits on it; `ahead`: a later turn will look it
        up (the oldest of more than `AHEAD` such jobs is dropped, its future failed)."""
        dropped: list[Job] = []
        with self._cond:
            if self._stopping:
                raise RuntimeError("the embedder was closed")
            if self._queued + len(texts) > self.max_queued and (urgent or ahead
                                                                  or self._queued):
                return None
            self._want_child = True
            self._start_thread()
            if urgent:  # a request waits on it: never behind a stopped child
                self._resume_locked()
            if urgent or ahead or len(texts) <= self.batch_size:
                job = Job(list(texts), id=next(self._ids), urgent=urgent,
                          ahead=ahead and not urgent)
                (self._urgent if job.urgent else self._ahead if job.ahead
                 else self._bulk).append(job)
                self._queued += len(texts)
                while len(self._ahead) > AHEAD:
                    dropped.append(self._ahead.popleft())
                self._cond.notify()
                out = job.future
            else:
                parts = [Job(list(texts[i:i + self.batch_size]), id=next(self._ids))
                         for i in range(0, len(texts), self.batch_size)]
                self._bulk.extend(parts)
                self._queued += len(texts)
                self._cond.notify()
                out = joined([p.future for p in parts])
        for old in dropped:  # a later turn's step has superseded it
            self._finish(old, error=RuntimeError("dropped: newer steps came first"))
        return out

    def answers_now(self) -> bool:
        """A query submitted now would start at once: the model is loaded and nothing is
        running or queued ahead of it. (While the model loads or a batch runs, a caller
        that can only wait a few milliseconds should not wait at all.)"""
        with self._cond:
            return (self.ready.done() and self._current is None and not self._urgent
                    and not self._stopping)

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
                while not (self._urgent or self._ahead or self._bulk or self._stopping
                           or self._respawn_needed()):
                    self._cond.wait(timeout=1.0)  # and look at the child every second
                if self._stopping:
                    return
                job = (self._urgent.popleft() if self._urgent
                       else self._ahead.pop() if self._ahead  # the newest step first
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

    def close(self, timeout: float = 5.0) -> None:
        """Stop the dispatcher and the child at once; queued jobs fail. The child is
        killed, not asked: it holds nothing durable, and a batch it is halfway through
        at nice 19 on a busy machine would keep the proxy's exit waiting for seconds."""
        with self._cond:
            self._stopping = True
            left = [*self._urgent, *self._ahead, *self._bulk]
            self._urgent.clear()
            self._ahead.clear()
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
