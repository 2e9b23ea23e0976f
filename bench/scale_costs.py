"""The shared store's costs alone (`make bench-scale`, before the replicas run): what a
request of a replica pays on a moto S3 server with nothing else running.

- head read: the per-request point read of the session's head;
- head publish: one publish alone (a commit);
- record: 3 chunks + 3 events committed (the tables side by side);
- a burst of `BURST` head publishes at once, as concurrent requests of one replica make
  them: grouped into shared commits (what `SessionHeads.put` does) against one commit
  each (what it did before; LanceDB then retries the losers of each race).
"""

from __future__ import annotations

import asyncio
import os
import time
from datetime import timedelta
from typing import Any

from bench.load import _pct
from tests.support.s3 import ENV_KEYS, MotoServer

BURST = 64


async def costs(moto: MotoServer, n: int = 40) -> dict[str, Any]:
    """p50 / p95 ms of each call; the burst's wall time (ms) and commits, both ways."""
    from store.base import Event, EvictedChunk
    from store.lance import LanceStore
    from store.shared import HEADS, SCHEMA, SessionHeads
    from tests.support.fakes import FakeEmbedder

    os.environ.update(ENV_KEYS)
    uri, opts = moto.bucket(), moto.storage_options(keys=False)
    heads = SessionHeads(uri, opts)
    store = LanceStore(uri, FakeEmbedder(), storage_options=opts, wal=False,
                       read_consistency_interval=timedelta(0), background=False)
    took: dict[str, list[float]] = {"head read": [], "head publish": [], "record": []}
    out: dict[str, Any] = {}
    try:
        for i in range(n):
            t0 = time.perf_counter()
            await heads.put("t", f"s{i % 8}", i, {"evicted": [f"c{j}" for j in range(i)]})
            t1 = time.perf_counter()
            await heads.get("t", f"s{i % 8}")
            t2 = time.perf_counter()
            await store.record([EvictedChunk("t", "s", f"c{i}-{k}", i, "tool", "TRANSIENT", 300,
                                             "x " * 600) for k in range(3)],
                               [Event("t", "s", i, f"c{i}-{k}", "TRANSIENT", 300, 0.1, "evict",
                                      "bench", "rwoe") for k in range(3)])
            t3 = time.perf_counter()
            for k, v in (("head publish", t1 - t0), ("head read", t2 - t1),
                         ("record", t3 - t2)):
                took[k].append(v * 1000)
        out = {k: (_pct(v, 50), _pct(v, 95)) for k, v in took.items()}

        def row(i: int) -> dict[str, Any]:
            return {"id": f"b{i}", "scope": f"burst/{i}", "tenant": "t", "session": f"b{i}",
                    "version": 1, "data": "{}", "time": time.time()}

        async def grouped(i: int) -> None:
            await heads.put("t", f"g{i}", 1, {"evicted": []})

        async def alone(i: int) -> None:
            await heads._commit(HEADS, [row(i)], SCHEMA)

        for label, one in (("grouped", grouped), ("one commit each", alone)):
            before = heads._writes
            t0 = time.perf_counter()
            done = await asyncio.gather(*(one(i) for i in range(BURST)),
                                        return_exceptions=True)
            out[f"burst {label}"] = ((time.perf_counter() - t0) * 1000,
                                     heads._writes - before,
                                     sum(isinstance(d, BaseException) for d in done))
    finally:
        await heads.close()
        await store.close()
    return out


def describe(c: dict[str, Any]) -> str:
    calls = ", ".join(f"{k} {c[k][0]:.1f} / {c[k][1]:.1f}"
                      for k in ("head read", "head publish", "record"))
    bursts = "; ".join(f"{k.removeprefix('burst ')}: {c[k][0]:,.0f} ms in {c[k][1]} commits"
                       f"{f', {c[k][2]} failed' if c[k][2] else ''}"
                       for k in ("burst grouped", "burst one commit each") if k in c)
    return (f"On the moto store alone, p50 / p95 ms (`bench/scale_costs.py`): {calls}. "
            f"{BURST} head publishes at once: {bursts}. Every request of a shared store "
            "reads its session's head; a turn that evicts commits its record, then the head.")
