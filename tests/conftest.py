"""Shared fixtures. `import proxy` first: it sets the offline defaults for litellm/tiktoken."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

import proxy  # noqa: F401  (must run before litellm or tiktoken is imported)
from tests.support.openai_server import UpstreamServer


@pytest.fixture
async def upstream() -> AsyncIterator[UpstreamServer]:
    """A real OpenAI stand-in on 127.0.0.1; `.url` is its `/v1` base, `.enqueue()` scripts it."""
    server = await UpstreamServer().start()
    try:
        yield server
    finally:
        await server.close()
