"""Shared fixtures. `import proxy` first: it sets the offline defaults for litellm/tiktoken.

Helpers that are not fixtures live in tests/support/ (the fake OpenAI server, message
builders, app settings, SSE parsing); test modules import from there, never from each other.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

import proxy  # noqa: F401  (must run before litellm or tiktoken is imported)
from proxy.upstream import Upstream
from tests.support.openai_server import UpstreamServer


@pytest.fixture
async def upstream() -> AsyncIterator[UpstreamServer]:
    """A real OpenAI stand-in on 127.0.0.1; `.url` is its `/v1` base, `.enqueue()` scripts it."""
    server = await UpstreamServer().start()
    try:
        yield server
    finally:
        await server.close()


@pytest.fixture
async def up() -> AsyncIterator[Upstream]:
    """The proxy's upstream client, with no routes resolved yet (tests pass their own)."""
    client = Upstream()
    yield client
    await client.close()
