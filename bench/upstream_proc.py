"""Run the test suite's OpenAI stand-in as its own process (benchmarks): port as argv[1]."""

from __future__ import annotations

import asyncio
import sys

from tests.support.openai_server import UpstreamServer


async def main(port: int) -> None:
    server = UpstreamServer(context_window=None)
    await server.start(port=port)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
