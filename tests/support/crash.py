"""`ctxwarden serve` as its own process for the crash tests (SIGKILL, SIGTERM, replicas),
and what the requests it forwarded depended on."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from tests.support.app import STUB

ROOT = Path(__file__).resolve().parents[2]
RECALLED = re.compile(r"\[chunk ([0-9a-f~]+), turn \d+, \w+\]")


def serve(cfg: Path, log: Path | None = None,
          env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """`ctxwarden serve` in its own process; its log lines (stderr) to `log` if given;
    `env` added to this process's environment."""
    exe = Path(sys.executable).with_name("ctxwarden")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "proxy.cli"]
    with contextlib.ExitStack() as stack:  # the child keeps its own copy of the file
        err = stack.enter_context(log.open("ab")) if log is not None else subprocess.DEVNULL
        return subprocess.Popen([*cmd, "serve", "--config", str(cfg)], cwd=ROOT,
                                env={**os.environ, **(env or {})},
                                stdout=subprocess.DEVNULL, stderr=err)


def kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait()


async def wait_up(http: aiohttp.ClientSession, url: str, proc: subprocess.Popen[bytes],
                  tries: int = 300) -> None:
    for _ in range(tries):
        assert proc.poll() is None, "ctxwarden serve exited"
        with contextlib.suppress(aiohttp.ClientError):
            async with http.get(f"{url}/healthz") as r:
                if r.status == 200:
                    return
        await asyncio.sleep(0.1)
    raise TimeoutError(url)


def dependencies(history: list[Any]) -> dict[str, tuple[set[str], set[str]]]:
    """Per session (the agent named in the system prompt, "You are agent NAME."): chunks a
    forwarded request replaced by stubs, and chunks it recalled."""
    out: dict[str, tuple[set[str], set[str]]] = {}
    for rec in history:
        msgs = rec.body["messages"]
        name = msgs[0]["content"].removeprefix("You are agent ").rstrip(".")
        stubs, recalled = out.setdefault(name, (set(), set()))
        stubs.update(STUB.findall(orjson.dumps(msgs).decode()))
        for m in msgs:  # a block stays on the message it was first attached to
            recalled.update(RECALLED.findall(str(m.get("content"))))
    return out
