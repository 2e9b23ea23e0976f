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

# characters counted at once (a message or more): ~2-4 ms of tokenizing, then the loop is
# free again; a request arriving meanwhile waits that long at most
SLICE_CHARS = 16_000


class Recounter:
    def __init__(self) -> None:
        self._tasks: dict[int, asyncio.Task[None]] = {}  # id(state) -> its recount
        self.counted = 0  # messages counted, ever (tests)

    def later(self, state: SessionState, analyzer: MessageAnalyzer) -> None:
        """Count the session's estimated messages in the background, once at a time."""
        prefix = state.prefix
        if prefix is None or id(state) in self._tasks or all(i.exact for i in prefix.infos):
            return
        task = asyncio.get_running_loop().create_task(self._run(state, analyzer),
                                                      name="recount")
        self._tasks[id(state)] = task
        task.add_done_callback(lambda _: self._tasks.pop(id(state), None))

    async def _run(self, state: SessionState, analyzer: MessageAnalyzer) -> None:
        while True:
            await QUIET.wait()
            # the session's latest request: a turn may have replaced it meanwhile
            prefix = state.prefix
            if prefix is None:
                return
            todo = (k for k, info in enumerate(prefix.infos) if not info.exact)
            chars = 0
            for k in todo:
                info = counted(analyzer.counter, prefix.infos[k])
                prefix.infos[k] = info
                analyzer.update(info)
                self.counted += 1
                chars += len(info.text)
                if chars >= SLICE_CHARS:
                    break
            else:
                return
            await asyncio.sleep(0)

    async def settled(self) -> None:
        """Until every recount has finished (tests)."""
        while self._tasks:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    async def close(self) -> None:
        for task in list(self._tasks.values()):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
