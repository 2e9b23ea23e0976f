"""A written-apart set through `ctxwarden serve`, as a client would send it.

bench/blackbox.py replays the sets in process (`Pipeline.prepare`, no HTTP, no store, no
embedder). This sends one set's sessions, every request in order and back to back, to
the real server (its own process, LanceDB in a temporary directory, the embedder
working beside), with the official `openai` SDK as the client and no session header (the
proxy finds the session from the messages, as it does for any client), and reads what
reached the test suite's stand-in upstream. The facts it kept and missed should be the
in-process replay's, policy by policy (docs/design-notes.md: the fourteenth and
fifteenth sets, RWOE).

    .venv/bin/python -m bench.audit [set name, default fifteenth] [policy, default rwoe]
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from openai import AsyncOpenAI

import proxy  # noqa: F401  (offline defaults)
from bench.agentloop import config
from bench.blackbox import SETS, _cell, _tally, sessions
from bench.harness import ProxyProcess, free_port


async def audit(data: list[dict[str, Any]], policy: str) -> tuple[Counter[str], list[str]]:
    """Facts asked and kept by kind (`asked_<kind>`, `kept_<kind>`, `errors`) and the
    facts missed (`session:fact`)."""
    from tests.support.openai_server import UpstreamServer

    upstream = await UpstreamServer(context_window=None, record=True).start()
    tmp = Path(tempfile.mkdtemp(prefix="ctxw-audit-"))
    port = free_port()
    server = ProxyProcess(config(tmp, port, upstream.url, policy), port).start()
    client = AsyncOpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    c: Counter[str] = Counter()
    missed: list[str] = []
    try:
        await server.ready()
        for s in data:
            asks: dict[int, list[dict[str, Any]]] = {}
            for f in s["facts"]:
                asks.setdefault(f["ask_index"] + 1, []).append(f)
            for k in s["requests"]:
                del upstream.history[:]
                try:
                    await client.chat.completions.create(model="loop-1",
                                                         messages=s["messages"][:k])
                    sent = upstream.history[-1].body
                except Exception:  # counted, and its facts missed: an audit does not stop
                    c["errors"] += 1
                    sent = {"messages": []}
                for f in asks.get(k, ()):  # counted as the in-process replay counts
                    _tally(c, missed, s["id"], f, sent)
    finally:
        await client.close()
        server.stop()
        await upstream.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return c, missed


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    name = args[0] if args else "fifteenth"
    policy = args[1] if len(args) > 1 else "rwoe"
    c, missed = asyncio.run(audit(sessions(SETS[name]), policy))
    print(f"{name} through ctxwarden serve, {policy}, back to back: kept {_cell(c)} "
          f"(tool / user / constraint); errors {c['errors']}")
    print("missed:", " ".join(sorted(missed)) or "none")


if __name__ == "__main__":
    main()
