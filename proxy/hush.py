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
  saturated CPU);
- the child keeps a fifth of the time at least: each stop spends its length from a
  credit that every second the child runs adds 1 / RUNS seconds back to, up to
  `burst_s`; no stop while it is spent. So a burst of cold histories is held whole, and
  a longer stream still leaves the child a fifth of the time. (Before, the child ran a
  quarter of each stop before the next could begin, so cold histories back to back
  were held every other one at best.) Through the agent-loop bench's order (back to
  back sessions, tau-bench, cold histories, then five 1,000-message histories back to
  back), with this and with a step's vector for a later turn no longer queued as
  urgent (store/embedproc.py: those had kept every stop refused), all five were held
  and took 81-116 ms (medians 86 and 88 over two runs), against 94-142 ms (medians 105
  to 137 over four runs) with none held;
- an urgent job (a query's vector that a request waits on) resumes the child at once;
- the child dies with the server even while stopped (`PR_SET_PDEATHSIG`, Linux only;
  elsewhere nothing is held).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Protocol

# Every second the child runs earns RUNS⁻¹ seconds of stop, up to BURST_S banked: over
# any long stretch it runs at least a fifth of the time (RUNS / (1 + RUNS)).
RUNS = 0.25
BURST_S = 1.0


class Pausable(Protocol):
    def pause(self) -> bool: ...

    def resume(self) -> None: ...


class Hush:
    """`held()` around a cold history's preparation; nested and concurrent holds share
    one stop. `holds` and `seconds` count what was held, for /metrics; `refused`, the
    holds the child's credit did not grant. `clock`: seconds, monotonic (tests)."""

    def __init__(self, process: Pausable | None, max_hold_s: float = 1.0,
                 burst_s: float = BURST_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.process = process
        self.max_hold_s = max_hold_s
        self.burst_s = burst_s
        self.holds = 0  # times the child was stopped
        self.seconds = 0.0  # ... and for how long, in all
        self.refused = 0  # holds not granted: the child's credit was spent
        self._clock = clock
        self._depth = 0
        self._since = 0.0  # when the current stop began
        self._credit = burst_s  # seconds of stop banked when the child last resumed
        self._resumed = clock()  # ... and when that was (it earns from there)
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
        if self.process is None:
            return
        now = self._clock()
        credit = min(self.burst_s, self._credit + (now - self._resumed) / RUNS)
        if credit <= 0:
            self.refused += 1
            return
        if not self.process.pause():
            return
        self._credit, self._resumed = credit, now
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
        now = self._clock()
        self.seconds += now - self._since
        self._credit -= now - self._since
        self._resumed = now
