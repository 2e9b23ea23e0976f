"""A history sent whole for the first time is prepared with the embedder stopped.

The embedder's child runs at nice 19, which keeps it off a core the proxy wants, but not
off the other one: a cold 1,000-message history is analysed on both cores (the
`ColdPool` worker takes half), and between the worker's turns the embedder ran there
beside the proxy's own thread (read from /proc: 50-170 ms of its CPU inside a request of
100-175 ms when cold histories came back to back, each leaving a backlog behind). So
while a cold history is analysed, fitted and written, the child is SIGSTOPped
(`EmbedProcess.pause`), and SIGCONTed as soon as the durable write is done. Twelve cold
histories back to back through `ctxwarden serve`, two runs each: median 154 / 110 ms ->
101 / 109, the slowest 235 / 170 -> 118 / 140 (docs/design-notes.md).

What keeps that safe:
- only cold histories are held (the `ColdPool`'s `min_bytes` of unseen content), not the
  ordinary turn, where holding it measured no gain;
- a hold ends after `max_hold_s` whatever the request is doing (its timer runs on the
  event loop: a request that holds the loop longer extends it, 1.27 s in a soak on a
  saturated CPU), and after a hold the child runs at least a quarter as long as it was
  held before the next one, so a stream of cold histories leaves it a fifth of the
  time at least and never stops it (with
  "as long", cold histories back to back were held every other one: through the
  agent-loop bench's order, 133-175 ms against 122-137 with a quarter);
- an urgent job (a query's vector that a request waits on) resumes the child at once;
- the child dies with the server even while stopped (`PR_SET_PDEATHSIG`, Linux only;
  elsewhere nothing is held).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Protocol

# After a stop of d seconds the child runs at least RUNS × d before the next one: at
# least a fifth of the time while cold histories come back to back.
RUNS = 0.25


class Pausable(Protocol):
    def pause(self) -> bool: ...

    def resume(self) -> None: ...


class Hush:
    """`held()` around a cold history's preparation; nested and concurrent holds share
    one stop. `holds` and `seconds` count what was held, for /metrics."""

    def __init__(self, process: Pausable | None, max_hold_s: float = 1.0) -> None:
        self.process = process
        self.max_hold_s = max_hold_s
        self.holds = 0  # times the child was stopped
        self.seconds = 0.0  # ... and for how long, in all
        self._depth = 0
        self._since = 0.0  # when the current stop began
        self._not_before = 0.0  # no new stop before the child has run RUNS × its stop
        self._timer: asyncio.TimerHandle | None = None
        self._stopped = False

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self._depth += 1
        if self._depth == 1:
            self._stop()
        try:
            yield
        finally:
            self._depth -= 1
            if self._depth == 0:
                self._go()

    def _stop(self) -> None:
        now = time.monotonic()
        if self.process is None or now < self._not_before or not self.process.pause():
            return
        self._stopped, self._since = True, now
        self.holds += 1
        self._timer = asyncio.get_running_loop().call_later(self.max_hold_s, self._go)

    def _go(self) -> None:
        """Resume the child (the last hold ended, or the longest hold is over)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._stopped or self.process is None:
            return
        self.process.resume()
        self._stopped = False
        now = time.monotonic()
        self.seconds += now - self._since
        self._not_before = now + (now - self._since) * RUNS
