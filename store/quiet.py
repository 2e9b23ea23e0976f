"""Background work yields to requests: one gate per process.

The request path and the background jobs (the log's replay into LanceDB, the embedding
worker's writes, indexing a cold history's passages) share one interpreter lock: a job
that runs while a request is being prepared lengthens that request by its own CPU time
(a cold 1,000-message request's log write took ~200 ms instead of ~20 with indexing
interleaved). So the request path marks itself `busy()`, from the first byte of its body
(the handler's read; a 700 KB history takes a few ms to arrive and parse, and indexing a
previous cold history in between cost 15-60 ms: docs/design-notes.md) until it is
prepared, and while the request goes out to the upstream (`hold`: until its answer is
written to the client, `FORWARD_HOLD_S` at most, so a model that takes seconds to answer
leaves those seconds to the background); each job awaits `wait()` before each unit of
work: it runs while no request is being prepared, and after `max_wait_s` at most, so a
steady stream of requests never starves it.

LanceDB's writes (the log's replay, the embedder's vectors) also wait for a rest
(`WRITE_REST_S` without a request being prepared): a commit builds its Arrow tables on
the event loop and its thread then competes for the interpreter lock, and begun in the
~1 ms between back-to-back requests it ran into the next one. In process, RWOE's 412
back-to-back requests on LanceDB: p50 / p95 3.8-3.9 / 10.0-11.6 ms → 3.2 / 8.8-9.2
(the log append's return to the request, p95 1.9-4.4 → 0.4 ms); through `ctxwarden
serve` 5.0-6.4 / 12.0-15.1 → 4.7-5.1 / 10.0-11.6. Under a steady stream they run once a
second (`max_wait_s`), carrying that second's rows; the replay at once when more than
`REST_BACKLOG` records wait (store/journal.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator


class Quiet:
    def __init__(self, max_wait_s: float = 1.0, poll_s: float = 0.002) -> None:
        self.max_wait_s = max_wait_s
        self.poll_s = poll_s  # how often a waiting job looks again
        self._busy = 0
        self._since = time.monotonic()  # when the last preparation ended

    @property
    def busy_count(self) -> int:
        return self._busy

    def rested(self) -> float:
        """Seconds since the last request's preparation ended; 0 while one runs."""
        return 0.0 if self._busy else time.monotonic() - self._since

    @contextlib.contextmanager
    def busy(self) -> Iterator[None]:
        """Around a request's preparation (its durable write included)."""
        self._busy += 1
        try:
            yield
        finally:
            self._busy -= 1
            self._since = time.monotonic()

    def hold(self, seconds: float) -> Callable[[], None]:
        """Busy from now until the returned function is called or `seconds` have passed,
        whichever comes first (calling it again does nothing). For the forward: after a
        cold history the background's slices (its indexing, its recount) ran between the
        forward's steps, and a forward that takes 1.5 ms took 9-79 ms
        (docs/design-notes.md)."""
        self._busy += 1
        done = False

        def release() -> None:
            nonlocal done
            if not done:
                done = True
                self._busy -= 1
                self._since = time.monotonic()

        timer = asyncio.get_running_loop().call_later(seconds, release)

        def end() -> None:
            timer.cancel()
            release()

        return end

    async def wait(self, rest: float | Callable[[], float] = 0.0) -> None:
        """Until no request is being prepared and none has been for `rest` seconds,
        `max_wait_s` at most. `rest` may be a function, asked again each time the job
        looks (a backlog that grows meanwhile may shorten it). It looks every `poll_s`
        while a request is prepared (no event to wake it: one gate serves every event
        loop of the process, and an asyncio.Event is bound to one)."""
        def needed() -> float:
            return rest() if callable(rest) else rest

        if not self._busy and self.rested() >= needed():
            return
        deadline = time.monotonic() + self.max_wait_s
        while True:
            step = self.poll_s if self._busy else max(needed() - self.rested(), self.poll_s)
            step = min(step, RECHECK_S)  # a `rest` function is asked again at least this often
            await asyncio.sleep(min(step, max(deadline - time.monotonic(), 0.0)))
            if (not self._busy and self.rested() >= needed()) or time.monotonic() >= deadline:
                return


FORWARD_HOLD_S = 0.05  # a forward holds the background off this long at most (`hold`)
RECHECK_S = 0.05  # how often a job waiting out a rest asks a `rest` function again
WRITE_REST_S = 0.02  # LanceDB writes wait for this long without a request
QUIET = Quiet()
