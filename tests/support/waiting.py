"""Waiting in tests for something another process or thread does."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


async def until(check: Callable[[], Awaitable[bool] | bool], timeout: float = 120.0) -> None:
    """Until `check()` (awaited if it returns an awaitable) is true; fails after
    `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if await got if isinstance(got, Awaitable) else got:
            return
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)
