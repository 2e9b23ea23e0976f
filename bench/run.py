"""`make bench`: run every benchmark and write docs/benchmarks.md.

    .venv/bin/python -m bench.run --out docs/benchmarks.md [--quick] [--only NAME ...]

With --only, the named sections are replaced in the existing document and the others keep
their figures (each section's footer says how and when it was made).

Each section is a module with `run(quick) -> markdown` (sync or async); a section that
fails is reported as failed in the document rather than silently left out. Loopback
only, no network; the full run takes about an hour and a half on 2 cores (18 minutes
the agent loops, about 57 the eleven black-box sets, two at a time, whose paced replays
embed every passage, 6 the twenty seeds, 4.5 the pauses and the wake-up probes).
`make bench ONLY="agentloop coldnext"` runs some sections.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import importlib
import inspect
import os
import platform
import re
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import proxy  # noqa: F401  (offline defaults)

ROOT = Path(__file__).resolve().parents[1]


def _run(module: str) -> Callable[[bool], Any]:
    """A benchmark module's `run(quick)`; imported only when its section runs."""
    def go(quick: bool) -> Any:
        return importlib.import_module(module).run(quick)
    return go


def _policies(quick: bool) -> str:
    from bench import policies  # issue 4: the paper's experiments, Bélády and the optimum

    return str(policies.section(ROOT / "docs" / "img", quick=quick))


SECTIONS: dict[str, tuple[str, str, Callable[[bool], Any]]] = {
    "overhead": ("Proxy overhead", "Targets: p50 ≤ 3 ms (short), ≤ 8 ms (50 messages), "
                 "≤ 60 ms (1,000 messages, the eviction case). Three processes (fake upstream "
                 "with zero latency, `ctxwarden serve` with a LanceDB store, this client); "
                 "overhead is the median of per-iteration differences (proxy − direct).",
                 _run("bench.overhead")),
    "agentloop": ("Agent loops: facts kept, cold histories, tau-bench, overhead",
                  "Issue 10's \"Done when\", measured through the real app over HTTP on "
                  "generated agent sessions and tau-bench (bench/agentloop.py, generator "
                  "bench/agentgen.py): every policy on the same traffic, targets stated "
                  "as met or not.", _run("bench.agentloop")),
    "seeds": ("Facts kept over twenty seeds", "How much the agent-loop figure above "
              "owes to its draw: the same sessions' generator on seeds 0-19, every policy, in "
              "process (bench/seeds.py).", _run("bench.seeds")),
    "blackbox": ("Facts kept on a workload written apart", "Sessions written apart by "
                 "helpers that saw no code here (sixteen sets, ninety-five domains nobody "
                 "here tuned for; the third, fourth and fifteenth are never studied, only "
                 "counted), "
                 "every policy, in "
                 "process (bench/blackbox.py).",
                 _run("bench.blackbox")),
    "pause": ("Pauses between turns: the same work, slower", "Why RWOE's paced overhead "
              "reads above its back-to-back overhead (bench/pause.py).", _run("bench.pause")),
    "coldnext": ("The turns after a history sent whole", "A resumed conversation's next "
                 "turns, back to back: a tool turn does not wait for the history's "
                 "indexing; a reply (or a question with related words) that comes before "
                 "the background has finished does, once (bench/coldnext.py).",
                 _run("bench.coldnext")),
    "responses": ("The Responses API, fitted as chat", "tau-bench through "
                  "`/v1/chat/completions` and through `/v1/responses` with the same "
                  "histories as items (bench/responses.py).", _run("bench.responses")),
    "relevance": ("Lexical relevance index: the candidates", "Per agent turn on tau-bench "
                  "text: add the turn's new passages, then one query over the session "
                  "(bench/relevance.py; why store/relevance.py is hand-rolled).",
                  _run("bench.relevance")),
    "forwarding": ("Forwarding transport", "Why OpenAI-wire routes use the direct aiohttp "
                   "transport and everything else LiteLLM (bench/forwarding.py).",
                   _run("bench.forwarding")),
    "decision": ("Eviction decision cost", "Target: ≤ 1 ms to rank 1,000 chunks.",
                 _run("bench.decision")),
    "prefix": ("Fitting: validity, reduction, cache-prefix ratio", "Goal: ≥ 0.9 while "
               "fitting; truncating every turn scores far lower (bench/prefix.py).",
               _run("bench.prefix")),
    "retention": ("Never forget: needle retention", "Target ≥ 95 % with recall; truncation "
                  "beside it (bench/retention.py).",
                  _run("bench.retention")),
    "store": ("Store: recall latency, embedding, hybrid search", "bench/store.py.",
              _run("bench.store")),
    "policies": ("Policies against Bélády and the offline optimum", "Issue 4 "
                 "(bench/policies/); details and chart in docs/policies.md.", _policies),
}


async def _section(name: str, quick: bool) -> str:
    title, intro, fn = SECTIONS[name]
    speed = cpu_check()  # each section's own: one run alone (--only) states it too
    started = time.perf_counter()
    try:
        # In a worker thread: a sync section may run its own event loop (asyncio.run)
        result = await asyncio.to_thread(fn, quick)
        body = await result if inspect.isawaitable(result) else result
        if isinstance(body, tuple):  # (markdown, figures)
            body = body[0]
    except Exception:
        body = "**This section failed:**\n\n```\n" + traceback.format_exc(limit=4) + "```"
    took = time.perf_counter() - started
    print(f"bench: {name} done in {took:.0f} s", file=sys.stderr)
    made = (f"{name}: {took:.0f} s{', --quick' if quick else ''}, {dt.date.today().isoformat()}"
            f"; the machine's loop {speed:.2f} s before, {cpu_check():.2f} s after")
    return f"## {title}\n\n{intro}\n\n{body}\n\n_({made})_\n"


def cpu_check(steps: int = 10_000_000) -> float:
    """Seconds for a fixed pure-Python loop: how fast this machine ran at that moment.
    Shared cores vary run to run (the same code's figures moved 40-100 % between two
    runs an hour apart), so a run's header states it at its start and end, and each
    section's footer before and after it (a section rerun alone keeps its own)."""
    t0 = time.perf_counter()
    total = 0
    for i in range(steps):
        total += i
    return time.perf_counter() - t0


def splice(doc: str, parts: dict[str, str]) -> str:
    """`doc` with the sections named in `parts` (by title) replaced, others kept in place;
    a section `doc` does not have yet goes before the first one that is not a benchmark."""
    chunks = re.split(r"(?m)^(?=## )", doc)
    head, sections = chunks[0], chunks[1:]
    titles = {SECTIONS[n][0]: n for n in parts}
    done: set[str] = set()
    out = []
    for sec in sections:
        title = sec.split("\n", 1)[0][3:].strip()
        if title in titles:
            out.append(parts[titles[title]] + "\n")
            done.add(titles[title])
        else:
            out.append(sec)
    known = {t for t, _, _ in SECTIONS.values()}
    at = next((i for i, sec in enumerate(out) if sec.split("\n", 1)[0][3:].strip()
               not in known), len(out))
    out[at:at] = [parts[n] + "\n" for n in parts if n not in done]
    return head + "".join(out)


async def main(out: Path | None, quick: bool, only: list[str]) -> str:
    """Every section (or those in `only`) into `out`. With `only` and an existing `out`,
    only those sections are replaced: the rest of the document keeps its figures."""
    names = only or list(SECTIONS)
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        raise SystemExit(f"Unknown benchmark: {', '.join(unknown)} "
                         f"(known: {', '.join(SECTIONS)})")
    before = cpu_check()
    parts = [await _section(n, quick) for n in names]
    after = cpu_check()
    if only and out is not None and out.exists():
        doc = splice(out.read_text(), dict(zip(names, parts, strict=True)))
        out.write_text(doc)
        return doc
    head = ["# Benchmarks", "",
            f"Made by `make bench` (`python -m bench.run --out docs/benchmarks.md"
            f"{' --quick' if quick else ''}`) on {dt.date.today().isoformat()}: "
            f"{platform.python_implementation()} {platform.python_version()}, "
            f"{os.cpu_count()} CPU cores, {platform.machine()}, loopback only. "
            "Every figure below is rerun from this repository; none is typed by hand. "
            f"The machine's speed, as a 10-million-step Python loop: {before:.2f} s at the "
            f"start, {after:.2f} s at the end (compare runs by it: the cores are shared).",
            ""]
    doc = "\n".join(head + parts + (kept_sections(out.read_text())
                                    if out is not None and out.exists() else []))
    if out is not None:
        out.write_text(doc)
    return doc


def kept_sections(doc: str) -> list[str]:
    """The sections of `doc` that other commands write, marked `<!-- name:begin -->`
    (`make bench-scale`'s): a full run keeps them as they are, after its own."""
    return [sec.rstrip("\n") + "\n" for sec in re.split(r"(?m)^(?=## )", doc)[1:]
            if re.search(r"<!-- [\w-]+:begin -->", sec)]


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, help="write the markdown here")
    ap.add_argument("--quick", action="store_true", help="fewer iterations (smoke run)")
    ap.add_argument("--only", nargs="*", default=[], help=f"sections: {', '.join(SECTIONS)}")
    args = ap.parse_args()
    text = asyncio.run(main(args.out, args.quick, args.only))
    if args.out is None:
        print(text)
