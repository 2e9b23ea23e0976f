"""Full garbage collections run while the proxy rests, not inside a request.

CPython starts a full (generation-2) collection when enough objects have survived two
young collections since the last one (25 % of the long-lived heap). A cold history is
exactly that: a 1,000-message request makes tens of thousands of objects that live until
it ends (the parsed body, its infos, chunks, index entries), so the collection starts
inside it and walks all of them with the sessions' state: 35-55 ms on a request of
~100 (measured through `ctxwarden serve`, docs/design-notes.md). The same collection a
fraction of a second later, once the request is answered, walks only what stays.

So `ctxwarden serve` takes the automatic full collection away (generation 2's threshold
is set out of reach; young collections run as before, and cycles that die young are
freed as before) and `RestingCollector` runs it when the count CPython would have acted
on is reached and no request has been prepared for `rest_s`, or after `max_defer_s`
whatever the traffic (a steady stream of requests still gets its full collections, one
a minute at most instead of whenever the heap grew by a quarter). A full collection is
not run again before 50 times its own time has passed, so a large heap is walked
rarely, as CPython's rule would have it.

While a cold history is prepared no collection runs at all (`COLD.held()`, everywhere the
pipeline runs, not only under `serve`): its tens of thousands of objects live until it
ends, and the young collections they set off walked them again and again for nothing
(a 1,000-message history in process: 69 -> 65 ms, the median of eleven, twice).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Iterator

import structlog

from store.quiet import QUIET, Quiet

log = structlog.get_logger("ctxwarden")

OUT_OF_REACH = 1 << 30  # generation 2's threshold while the collector runs
# The gap after a full collection, in multiples of its time: 2 % of the CPU at most, as
# CPython's own 25 % rule keeps full collections rare on a large heap.
DUTY = 50


class RestingCollector:
    """`start()` in the server's event loop, `await stop()` at shutdown (thresholds
    restored). `every` is generation 2's threshold it replaces (CPython's is 10: young
    collections of generation 1 since the last full one)."""

    def __init__(self, quiet: Quiet = QUIET, rest_s: float = 0.25, max_defer_s: float = 60.0,
                 poll_s: float = 0.05, every: int | None = None, duty: float = DUTY) -> None:
        self.quiet = quiet
        self.duty = duty
        self.rest_s, self.max_defer_s, self.poll_s = rest_s, max_defer_s, poll_s
        self.every = every if every is not None else gc.get_threshold()[2]
        self.at_rest = 0  # full collections run while resting
        self.forced = 0  # ... and after max_defer_s under traffic
        self.seconds = 0.0  # their time, in all
        self._saved: tuple[int, int, int] | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is not None:
            return
        self._saved = gc.get_threshold()
        gc.set_threshold(self._saved[0], self._saved[1], OUT_OF_REACH)
        self._task = asyncio.get_running_loop().create_task(self._run(), name="gc-at-rest")
        log.info("gc_at_rest", every=self.every, rest_s=self.rest_s,
                 max_defer_s=self.max_defer_s)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._saved is not None:
            gc.set_threshold(*self._saved)
            self._saved = None

    async def _run(self) -> None:
        due: float | None = None  # when a full collection first became due
        after = 0.0  # not before: the last one's time × duty (a big heap, fewer of them)
        while True:
            await asyncio.sleep(self.poll_s)
            now = time.monotonic()
            if gc.get_count()[2] <= self.every or now < after:
                continue
            due = now if due is None else due
            resting = self.quiet.rested() >= self.rest_s
            if not resting and now - due < self.max_defer_s:
                continue
            t = time.perf_counter()
            gc.collect(2)
            took = time.perf_counter() - t
            self.seconds += took
            if resting:
                self.at_rest += 1
            else:
                self.forced += 1
            due, after = None, time.monotonic() + took * self.duty
            log.debug("gc_full", ms=round(took * 1000, 2), at_rest=resting)


class Pause:
    """`held()`: automatic collection off until the last of nested or concurrent holds
    ends, then as it was before the first."""

    def __init__(self) -> None:
        self.depth = 0
        self._was_enabled = False

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        if self.depth == 0:
            self._was_enabled = gc.isenabled()
            gc.disable()
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            if self.depth == 0 and self._was_enabled:
                gc.enable()


COLD = Pause()  # around a cold history's preparation (proxy/pipeline.py)
