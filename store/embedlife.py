"""The embedder's child process, kept (store/embedproc.py): started and waited for until
its model is loaded, replaced after it dies (with a backoff after a failed load), reaped,
and held still while a cold history is prepared (`pause` / `resume`: SIGSTOP / SIGCONT,
Linux only; proxy/hush.py). Seen from here through `ChildHandle` (store/embedhandle.py).
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future

import structlog

from store.embedchild import CAN_PAUSE
from store.embedhandle import ChildHandle, EmbedderDied
from store.embedqueue import Job

log = structlog.get_logger("ctxwarden.store")

START_TIMEOUT = 600.0  # seconds for a child to import torch and load the model


class ChildLife:
    """The child's start, death, replacement and pauses. `EmbedProcess` holds the state."""

    _cond: threading.Condition
    _urgent: deque[Job]
    _current: Job | None
    _stopping: bool
    _child: ChildHandle | None
    _paused: bool
    _want_child: bool
    _resolve: Callable[[str], str]
    model: str
    batch_size: int
    precision: str
    computes: str | None
    queries: str | None
    ready: Future[int]
    dim: int | None
    pid: int | None
    restarts: int
    failures: int

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
            dim, computes, queries, pid = child.ready(lambda: stopping or self._stopping,
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
        self.dim, self.computes, self.queries, self.pid = dim, computes, queries, pid
        if not self.ready.done():
            self.ready.set_result(self.dim)
        log.info("embedder_process_ready", pid=self.pid, model=self.model, dim=self.dim,
                 precision=self.computes, queries=self.queries,
                 seconds=round(time.monotonic() - started, 2))
        return True

    def _reap(self) -> None:
        child, self._child = self._child, None
        self._paused = False  # it is killed below (SIGKILL ends a stopped process too)
        if child is not None:
            child.close()
