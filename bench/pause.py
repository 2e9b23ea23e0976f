"""What a pause between turns costs the same work: why paced turns measure slower.

The agent-loop section measures RWOE's paced overhead (1.5 s between turns) above its
back-to-back overhead, on sessions of the same shape. This section replays the same
requests in process (`Pipeline.prepare`: no HTTP, no store writes worth the name
(`MemoryStore`), no embedder, nothing else running) with different pauses between them.
The work and the decisions are identical in every replay (a fresh pipeline each time);
only the time the process spends asleep before each request differs. Each replay is a
fresh process's first, so its order does not warm the next. This machine's speed drifts
within minutes, so every paused replay runs between two back-to-back ones and is compared
with their mean.

    .venv/bin/python -m bench.pause
"""

from __future__ import annotations

import asyncio
import hashlib
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

import proxy  # noqa: F401  (offline defaults)
from bench import wake

ROOT = Path(__file__).resolve().parents[1]
PAUSES = (0.05, 0.3, 1.5)  # each between two back-to-back replays
QUICK_PAUSES = (0.3,)


async def replay(pause: float) -> list[tuple[float, bool, str]]:
    """(prepare ms, evicted anything, a digest of the body to forward) per request of the
    paced-alone sessions."""
    from bench.agentloop import FULL, paced_sessions
    from bench.replay import Meter, requests_of
    from bench.seeds import settings
    from proxy.pipeline import Pipeline
    from proxy.validate import validate_body
    from store.base import MemoryStore

    st = settings("rwoe")
    sessions = paced_sessions(FULL, "alone", Meter())
    pipeline = Pipeline(st, MemoryStore())
    out: list[tuple[float, bool, str]] = []
    try:
        for i, s in enumerate(sessions):
            for msgs in requests_of(s.messages):
                raw = orjson.dumps({"model": "loop-1", "messages": msgs, "tools": s.tools})
                await asyncio.sleep(pause)
                started = time.perf_counter()
                body = orjson.loads(raw)
                validate_body(body)
                prep = await pipeline.prepare(body, st.routes[0], "bench", f"s{i}")
                ms = (time.perf_counter() - started) * 1000
                sent = hashlib.blake2b(orjson.dumps(prep.body), digest_size=8).hexdigest()
                out.append((ms, bool(prep.new_evictions), sent))
    finally:
        await pipeline.close()
    return out


def _child(pause: float) -> list[tuple[float, bool, str]]:
    """One replay in a fresh interpreter (its caches and heap start cold alike)."""
    code = ("import asyncio, sys, orjson; from bench.pause import replay; "
            "sys.stdout.buffer.write(orjson.dumps(asyncio.run(replay(float(sys.argv[1])))))")
    done = subprocess.run([sys.executable, "-c", code, str(pause)], cwd=ROOT, check=True,
                          capture_output=True)
    return [(float(ms), bool(ev), str(sent)) for ms, ev, sent in orjson.loads(done.stdout)]


def _q(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def run(quick: bool = False) -> str:
    rows = ["| pause before each request | requests | prepare p50 / p95 (ms) | "
            "back to back just before and after: p50 (ms) | ratio | "
            "turns that evict nothing: p50 (ms) |", "|---|---|---|---|---|---|"]
    before = _child(0.0)
    sent = [s for *_, s in before]
    for pause in QUICK_PAUSES if quick else PAUSES:
        got, after = _child(pause), _child(0.0)
        if [s for *_, s in got] != sent or [s for *_, s in after] != sent:
            raise RuntimeError(f"a replay after {pause} s pauses forwarded other bodies")
        b50, a50 = (statistics.median(ms for ms, *_ in r) for r in (before, after))
        all_ms = [ms for ms, *_ in got]
        calm = [ms for ms, evicted, _ in got if not evicted]
        p50 = statistics.median(all_ms)
        rows.append(f"| {pause:g} s | {len(got)} | {p50:.2f} / {_q(all_ms, 0.95):.2f} | "
                    f"{b50:.2f}, {a50:.2f} | ×{p50 / ((b50 + a50) / 2):.2f} | "
                    f"{statistics.median(calm):.2f} |")
        before = after
    return ("In process, RWOE on the agent-loop route, the paced-alone sessions of seed 0 "
            "(bench/agentloop.py), no HTTP and no embedder; the same requests in every "
            "replay, and the same bodies forwarded (checked), each replay a fresh process, "
            "every paused replay between two back-to-back ones (this machine's speed drifts "
            "within minutes; the ratio is "
            "against their mean). What changes is only how long the process slept before "
            "each request. After a pause the same work takes longer, and the second table "
            "shows why: what the machine takes away while a process sleeps is per memory "
            "page (address translations and cached lines), and any process pays it, a "
            "bare round trip included. So a paced loop's per-turn overhead reads higher "
            "than a back-to-back loop's without the proxy doing more, and the agent-loop "
            "section's paced figures carry it."
            "\n\n" + "\n".join(rows) + "\n\n" + wake.run(quick))


def main(argv: Any = None) -> None:
    print(run("--quick" in (argv or sys.argv[1:])))


if __name__ == "__main__":
    main()
