"""One embedding child process, seen from the parent (store/embedproc.py drives it).

Start it (spawn context: fork is unsafe beside threads and torch) and wait until its model
has loaded; send it one job and wait for the answer or for its death, whichever comes
first; hold it still and let it go on (SIGSTOP / SIGCONT); kill it and reap it. What runs
inside the child is store/embedchild.py. No locking here: the dispatcher that owns the
handle decides who may call what, and when.

Spawn re-imports the parent's main module in the child, as `__mp_main__`: a script that
uses the local embedder must keep its work under `if __name__ == "__main__":`, as every
entry point here does (`ctxwarden`, `python -m bench.…`, pytest).
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import Any

from store.embedchild import child_main


class EmbedderDied(RuntimeError):
    pass


class ChildHandle:
    """A started child: `ready` waits for its model, `ask` runs one job on it."""

    def __init__(self, model: str, batch_size: int, precision: str) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc: Any = ctx.Process(target=child_main, name="ctxwarden-embed", daemon=True,
                                      args=(child, model, batch_size, precision))
        self._proc.start()
        child.close()

    @property
    def exitcode(self) -> int | None:
        code: int | None = self._proc.exitcode
        return code

    def alive(self) -> bool:
        """Raises ValueError once `close` has run (a caller in another thread may see it)."""
        return bool(self._proc.is_alive())

    def ready(self, stopping: Callable[[], bool], timeout: float
              ) -> tuple[int, str, str, int]:
        """Wait for the model to load: (vector size, the precision it computes in, how it
        computes a question alone: "onnx", "traced" or "eager" (store/embedonnx.py,
        store/embedquery.py), pid).
        EmbedderDied if it exits or `timeout` passes first, or once `stopping()`;
        RuntimeError if it reports that the model did not load."""
        started = time.monotonic()
        while not self._conn.poll(0):
            if stopping():
                raise EmbedderDied("the embedder was closed while loading")
            if not self._proc.is_alive() or time.monotonic() - started > timeout:
                raise EmbedderDied("the embedding process exited while loading")
            wait([self._conn, self._proc.sentinel], 1.0)  # an answer, or the child's death
        kind, value, pid = self._conn.recv()
        if kind != "ready":
            raise RuntimeError(f"the embedding model did not load: {value}")
        dim, computes, queries = value
        return int(dim), str(computes), str(queries), int(pid)

    def ask(self, job_id: int, texts: list[str], urgent: bool) -> tuple[int, str, Any]:
        """Send one job and wait for its answer, `(job id, status, value)`. EmbedderDied
        (or the pipe's EOFError / OSError) if the child dies first."""
        self._conn.send((job_id, texts, urgent))
        while True:
            ready = wait([self._conn, self._proc.sentinel], timeout=5.0)
            if self._conn in ready:
                break
            if ready or not self._proc.is_alive():
                raise EmbedderDied("the embedding process died")
        answer: tuple[int, str, Any] = self._conn.recv()
        return answer

    def signal(self, sig: int) -> None:
        """OSError if it is gone; ValueError once `close` has run."""
        os.kill(self._proc.pid, sig)

    def kill(self) -> None:
        self._proc.kill()

    def close(self) -> None:
        """Kill it if it still runs (SIGKILL ends a stopped process too) and reap it."""
        self._conn.close()
        if self._proc.is_alive():
            self._proc.kill()
        self._proc.join(5.0)
        self._proc.close()
