"""What `/healthz` says about the store: a replica whose store cannot open answers every
chat request 503 `store_unavailable`, so it must not look healthy to a load balancer or
Docker's HEALTHCHECK.

`ctxwarden serve` opens the store before it listens (`StoreHealth.open`); when that fails
(an S3 bucket that does not exist, a path it cannot write), `/healthz` answers 503 with the
reason, and tries the opening again in the background at most every `retry_s` seconds, so
the replica turns healthy on its own once the store is there. A store that was never
opened through here (an app built in a test, a store with nothing to open) is not judged.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any


class StoreHealth:
    def __init__(self, store: Any, retry_s: float = 10.0) -> None:
        self.store = store
        self.retry_s = retry_s
        self.error: str | None = None  # why the last opening failed; None: open or unjudged
        self._tried = 0.0
        self._task: asyncio.Task[None] | None = None

    async def open(self) -> None:
        """Open the store now; raises what its opening raised (StoreUnavailable)."""
        opener = getattr(self.store, "open", None)
        if opener is None:
            return
        self._tried = time.monotonic()
        try:
            await opener()
        except Exception as exc:
            self.error = str(exc) or type(exc).__name__
            raise
        self.error = None

    def check(self) -> str | None:
        """None when healthy; else why not, with a new attempt started if one is due."""
        if self.error is not None and (self._task is None or self._task.done()) and (
                time.monotonic() - self._tried >= self.retry_s):
            self._task = asyncio.get_running_loop().create_task(self._retry())
        return self.error

    async def close(self) -> None:
        """A retry still running at shutdown is cancelled (the store closes next)."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _retry(self) -> None:
        try:
            await self.open()
        except Exception:  # recorded in `error`; the store logged the cause
            return
