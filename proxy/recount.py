"""A history sent whole is estimated; after its request, the session's messages are counted.

A cold history's plain-text contents are estimated from their length (proxy/analysis.py
`measure`), and the fit counts only what it keeps: tokenizing a 1,000-message history
would double its request's time. But the session's next turns reuse those infos, so
`tokens_in` (the `X-Ctxwarden-Tokens-In` header, the request log, the tokens-saved
metric) stayed an estimate for the rest of the session, off by −6 % to +29 % after a
restart, and RWOE weighed evicted chunks by estimated sizes where a process that saw the
session turn by turn had counted them.

So after such a request, the session's estimated messages are counted in the background
(`Recounter.later`), a slice at a time and only while no request is being prepared
(store/quiet.py), as the cold history's passages are indexed (proxy/relate.py); each
counted info replaces the estimate in the session's previous request and in the route's
analyzer cache. A turn that arrives first uses the estimates, as before.
"""

from __future__ import annotations

import asyncio
import contextlib

from proxy.analysis import MessageAnalyzer, counted
from proxy.session import SessionState
from store.quiet import QUIET

# characters counted at once (a message or more): ~1 ms of tokenizing, then the loop is
# free again; a request arriving meanwhile waits that long at most (16,000 until
# 2026-12-05: every request that arrived behind such slices waited for them)
SLICE_CHARS = 4_000


class Recounter:
    """One background task counts the sessions' estimated messages, a slice of one
    session's at a time, the sessions in turn (a task per session ran a slice of each in
    every turn of the event loop: proxy/relate.py's drain measured why not)."""

    def __init__(self) -> None:
        self._waiting: dict[int, tuple[SessionState, MessageAnalyzer]] = {}  # in turn order
        self._task: asyncio.Task[None] | None = None
        self.counted = 0  # messages counted, ever (tests)

    def later(self, state: SessionState, analyzer: MessageAnalyzer) -> None:
        """Count the session's estimated messages in the background, once at a time."""
        prefix = state.prefix
        if prefix is None or id(state) in self._waiting or all(i.exact for i in prefix.infos):
            return
        self._waiting[id(state)] = (state, analyzer)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="recount")

    async def _run(self) -> None:
        while self._waiting:
            await QUIET.wait()
            key, (state, analyzer) = next(iter(self._waiting.items()))
            del self._waiting[key]
            if self._slice(state, analyzer):  # its turn again after the others'
                self._waiting[key] = (state, analyzer)
            await asyncio.sleep(0)

    def _slice(self, state: SessionState, analyzer: MessageAnalyzer) -> bool:
        """Count up to `SLICE_CHARS` of the session's latest request (a turn may have
        replaced it meanwhile); whether any is left."""
        prefix = state.prefix
        if prefix is None:
            return False
        chars = 0
        for k, info in enumerate(prefix.infos):
            if info.exact:
                continue
            info = counted(analyzer.counter, info)
            prefix.infos[k] = info
            analyzer.update(info)
            self.counted += 1
            chars += len(info.text)
            if chars >= SLICE_CHARS:
                return True
        return False

    async def settled(self) -> None:
        """Until every recount has finished (tests)."""
        while self._task is not None and not self._task.done():
            await asyncio.gather(self._task, return_exceptions=True)

    async def close(self) -> None:
        task, self._task = self._task, None
        self._waiting.clear()
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
