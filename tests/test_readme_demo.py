"""The README's first example is what a user gets: its curl of examples/demo-request.json
on the shipped config.yaml's demo route prints the X-Ctxwarden-* headers the README shows
(they had drifted from 344 tokens out and 2 evicted to 266 and 3 unnoticed)."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient

from proxy.app import init_app
from proxy.config import load_settings

ROOT = Path(__file__).resolve().parent.parent
ClientFactory = Callable[..., Awaitable[TestClient[Any, Any]]]


def readme_headers() -> dict[str, str]:
    """The `# X-Ctxwarden-…: n   …` comment under the README's curl of the demo request."""
    text = (ROOT / "README.md").read_text()
    curl = text.index("-d @examples/demo-request.json")
    line = text[curl:].splitlines()[1]
    assert line.startswith("# X-Ctxwarden-"), line
    return dict(re.findall(r"(X-Ctxwarden-[A-Za-z-]+): (\S+)", line))


async def test_the_readme_curl_shows_the_demo_route_s_real_headers(
        aiohttp_client: ClientFactory, tmp_path: Path) -> None:
    shown = readme_headers()
    assert set(shown) >= {"X-Ctxwarden-Tokens-In", "X-Ctxwarden-Tokens-Out",
                          "X-Ctxwarden-Evicted"}
    settings = load_settings(ROOT / "config.yaml", store={"path": str(tmp_path / "db")})
    client = await aiohttp_client(init_app(settings))
    body = json.loads((ROOT / "examples" / "demo-request.json").read_text())
    resp = await client.post("/v1/chat/completions", json=body)
    assert resp.status == 200, await resp.text()
    assert {k: resp.headers[k] for k in shown} == shown
