"""The embedder's job queues, as store/embedproc.py keeps them.

`urgent` (a request's query, a few texts: a request waits on it) before `ahead` (a step's
words a later turn will look up: nobody waits, the newest first, only the newest
`AHEAD` kept) before `bulk` (the worker's passages, sliced into `batch_size` texts so an
urgent job waits for one slice at most), together at most `max_queued` texts, under the
one condition variable the dispatcher waits on. A job's vectors come back through a
`concurrent.futures.Future`, so callers on any event loop (or none) can wait on it; a bulk
job's slices are `joined` into one.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]


@dataclass(slots=True)
class Job:
    texts: list[str]
    future: Future[Vectors] = field(default_factory=Future)
    since: float = field(default_factory=time.monotonic)
    attempts: int = 0
    id: int = 0
    urgent: bool = False
    ahead: bool = False


class JobQueues:
    """What is queued and how old it is; a job put back first, or finished (its texts
    counted out, its future resolved). `EmbedProcess` holds the state."""

    _cond: threading.Condition
    _urgent: deque[Job]
    _ahead: deque[Job]
    _bulk: deque[Job]
    _queued: int
    _current: Job | None
    _stopping: bool

    @property
    def queued(self) -> int:
        """Texts waiting or being embedded."""
        return self._queued

    def oldest_age(self) -> float:
        """Seconds the oldest job waiting or being embedded has waited (0 when none)."""
        with self._cond:
            jobs = [j for j in (self._current, self._urgent[0] if self._urgent else None,
                                self._ahead[0] if self._ahead else None,
                                self._bulk[0] if self._bulk else None) if j is not None]
        return max((time.monotonic() - j.since for j in jobs), default=0.0)

    def _requeue(self, job: Job) -> None:
        with self._cond:  # again, first: it has waited longest
            if not self._stopping:
                self._current = None
                if job.ahead:  # the newest end: the next taken
                    self._ahead.append(job)
                else:
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


def joined(parts: list[Future[Vectors]]) -> Future[Vectors]:
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
