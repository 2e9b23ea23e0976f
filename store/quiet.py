"""Background work yields to requests: one gate per process.

The request path and the background jobs (the log's replay into LanceDB, the embedding
worker's writes, indexing a cold history's passages) share one interpreter lock: a job
that runs while a request is being prepared lengthens that request by its own CPU time
(a cold 1,000-message request's log write took ~200 ms instead of ~20 with indexing
interleaved). So the request path marks itself `busy()`, and each job awaits `wait()`
before each unit of work: it runs while no request is being prepared, and after
`max_wait_s` at most, so a steady stream of requests never starves it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator


class Quiet:
    def __init__(self, max_wait_s: float = 1.0) -> None:
        self.max_wait_s = max_wait_s
        self._busy = 0
        self._idle: asyncio.Event | None = None  # made in the loop that first waits
        self._loop: asyncio.AbstractEventLoop | None = None
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
        if self._idle is not None:
            self._idle.clear()
        try:
            yield
        finally:
            self._busy -= 1
            self._since = time.monotonic()
            if not self._busy and self._idle is not None:
                self._idle.set()

    async def wait(self) -> None:
        """Until no request is being prepared, `max_wait_s` at most."""
        if not self._busy:
            return
        loop = asyncio.get_running_loop()
        if self._idle is None or self._loop is not loop:  # tests run one loop per test
            self._idle, self._loop = asyncio.Event(), loop
        self._idle.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.max_wait_s):
                await self._idle.wait()


QUIET = Quiet()
