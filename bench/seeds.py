"""Facts kept over more than one seed: how much the agent-loop figure owes to its draw.

`bench/agentloop.py` measures one seed's sessions through HTTP, with the embedder. The
tool facts asked there are 18, and which of them a lexical match can reach depends on the
draw (which paraphrase, which neighbours in the session): on five seeds RWOE kept 7 to 12
of 18 before related words. This section replays the back-to-back sessions of seeds 0-19
(recall was tuned on 0-4 and idioms on the misses of 1-14; 15-19 are also reported apart)
in process (`Pipeline.prepare`,
no HTTP, no embedder: the lexical path, which is all a back-to-back loop gets) for every
policy on the agent-loop route's settings, and reports facts kept by kind per policy,
summed over the seeds, with each seed's tool facts.
Then the same on `bench/heldout.py`'s sessions: six other domains, written apart from the
proxy and from bench/agentgen.py, on which nothing was tuned. Last, both workloads at
4k, 16k and 32k windows (`windows`, generated seeds 0-4): the ranking is not the 8k window's.

    .venv/bin/python -m bench.seeds [--seeds 0 1 2 3 4 5 6 7 8 9] [--held-out] [--windows]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
from collections import Counter

import proxy  # noqa: F401  (offline defaults)
from bench import agentgen, agentloop, heldout
from bench.recall_gate import measure
from bench.replay import Meter
from proxy.config import Settings

# Seeds 0-4 are those recall was tuned on (docs/design-notes.md); 5-9 were not looked at
# until their totals were first read (2026-11-28), and their misses were read on
# 2026-12-06 (the trade's idioms: store/idioms.py). 10-14 were first drawn then, their
# totals reported untouched (RWOE 261/270), and their misses read later that day; 15-19
# were drawn then and not looked at: the table reports all, and those apart.
TUNED_SEEDS = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14)
SEEDS = (*TUNED_SEEDS, 15, 16, 17, 18, 19)
# bench/heldout.py's seeds 0-4 showed the misses that recall's phrases and record fields
# were built for (docs/design-notes.md); the table reports draws nobody looked at then.
HELD_OUT_SEEDS = (5, 6, 7, 8, 9)
KINDS = ("tool", "user", "constraint")


def settings(policy: str, window: int = agentloop.WINDOW) -> Settings:
    """The agent-loop bench's `loop` route (bench/agentloop.py `config`), in process."""
    return Settings(store={"path": ":memory:"}, routes=[{
        "name": "loop", "model": "loop-*", "context_window": window,
        "max_output_tokens": agentloop.MAX_OUT, "policy": policy,
        "upstream": {"model": "openai/mock-1", "api_base": "http://127.0.0.1:9/v1",
                     "api_key": "unused"}}])


async def spread(seeds: tuple[int, ...] = SEEDS,
                 policies: tuple[str, ...] = agentloop.POLICIES) -> dict[str, list[Counter[str]]]:
    """policy -> one Counter per seed (asked_<kind>, kept_<kind>, ...)."""
    out: dict[str, list[Counter[str]]] = {p: [] for p in policies}
    for seed in seeds:
        w = agentloop.workload(dataclasses.replace(agentloop.FULL, seed=seed), Meter())
        for p in policies:
            out[p].append((await measure(w, settings(p)))["counts"])
    return out


def facts(c: Counter[str]) -> tuple[int, int]:
    """(kept, asked) over every kind of fact."""
    return sum(c[f"kept_{k}"] for k in KINDS), sum(c[f"asked_{k}"] for k in KINDS)


def table(by: dict[str, list[Counter[str]]], seeds: tuple[int, ...]) -> str:
    lines = ["| policy | facts kept | tool / user / constraint | tool facts per seed ("
             + ", ".join(map(str, seeds)) + ") |", "|---|---|---|---|"]
    for policy, counts in by.items():
        total = sum(counts, Counter())
        kept, asked = facts(total)
        kinds = " / ".join(f"{total[f'kept_{k}']}/{total[f'asked_{k}']}" for k in KINDS)
        per = ", ".join(f"{c['kept_tool']}/{c['asked_tool']}" for c in counts)
        lines.append(f"| {policy} | **{kept / max(1, asked):.2f}** ({kept}/{asked}) | "
                     f"{kinds} | {per} |")
    return "\n".join(lines)


async def held_out(seeds: tuple[int, ...] = HELD_OUT_SEEDS,
                   policies: tuple[str, ...] = agentloop.POLICIES
                   ) -> dict[str, list[Counter[str]]]:
    """The same replay on bench/heldout.py's sessions (six other domains, written apart
    from the proxy and from bench/agentgen.py): policy -> one Counter per seed."""
    out: dict[str, list[Counter[str]]] = {p: [] for p in policies}
    for seed in seeds:
        w = agentloop.Workload(heldout.sessions(seed, agentloop.WINDOW), [], [], [], [])
        for p in policies:
            out[p].append((await measure(w, settings(p)))["counts"])
    return out


# Other models' windows: the same two workloads at 4k, 16k and 32k tokens (histories
# 3-10 windows long, as at 8k), on the same seeds: the ranking is not the 8k window's.
WINDOWS = (4000, 16000, 32000)
WINDOW_SEEDS, WINDOW_HELD_SEEDS = TUNED_SEEDS[:5], HELD_OUT_SEEDS


async def windows(sizes: tuple[int, ...] = WINDOWS, seeds: tuple[int, ...] = WINDOW_SEEDS,
                  held_seeds: tuple[int, ...] = WINDOW_HELD_SEEDS,
                  policies: tuple[str, ...] = agentloop.POLICIES
                  ) -> dict[tuple[int, str], dict[str, Counter[str]]]:
    """(window, "generated" | "held out") -> policy -> counts summed over the seeds."""
    out: dict[tuple[int, str], dict[str, Counter[str]]] = {}
    for size in sizes:
        meter = Meter()
        loads = [("generated", agentgen.sessions(1, seed, size, 3.0, 10.0, tokens=meter.tokens))
                 for seed in seeds]
        loads += [("held out", heldout.sessions(seed, size)) for seed in held_seeds]
        for name, sessions in loads:
            w = agentloop.Workload(sessions, [], [], [], [])
            by = out.setdefault((size, name), {p: Counter() for p in policies})
            for p in policies:
                by[p] += (await measure(w, settings(p, size)))["counts"]
    return out


def windows_table(by: dict[tuple[int, str], dict[str, Counter[str]]]) -> str:
    policies = list(next(iter(by.values())))
    lines = ["| window | workload | facts asked (tool / user / constraint) | "
             + " | ".join(policies) + " |", "|---|---|---|" + "---|" * len(policies)]
    for (size, name), counts in by.items():
        first = counts[policies[0]]
        asked = " / ".join(str(first[f"asked_{k}"]) for k in KINDS)
        cells = []
        for p in policies:
            c = counts[p]
            kept, total = facts(c)
            kinds = " / ".join(str(c[f"kept_{k}"]) for k in KINDS)
            cells.append(f"**{kept / max(1, total):.2f}** ({kinds})")
        lines.append(f"| {size:,} | {name} | {asked} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def untuned(by: dict[str, list[Counter[str]]], seeds: tuple[int, ...]) -> str:
    """Each policy's facts kept on the seeds recall was not tuned on, as one sentence."""
    picked = [i for i, seed in enumerate(seeds) if seed not in TUNED_SEEDS]
    if not picked:
        return ""
    cells = []
    for policy, counts in by.items():
        total = sum((counts[i] for i in picked), Counter())
        kept, asked = facts(total)
        cells.append(f"{policy} {kept}/{asked} (tool {total['kept_tool']}/"
                     f"{total['asked_tool']})")
    return ("\n\nOn seeds " + ", ".join(str(seeds[i]) for i in picked)
            + " alone (not the seeds recall was tuned on): " + "; ".join(cells) + ".")


async def run(quick: bool = False) -> str:
    seeds = (0, 10) if quick else SEEDS
    by = await spread(seeds)
    held_seeds = HELD_OUT_SEEDS[:2] if quick else HELD_OUT_SEEDS
    held = await held_out(held_seeds)
    return ("Back to back, in process, lexical path (no embedder), the agent-loop route: "
            f"seeds {', '.join(map(str, seeds))}, each 9 sessions and 54 facts (18 of each "
            "kind) as in the HTTP run above, whose seed is 0. Recall's phrases, record "
            "fields and quantity rule were built on seeds 0-4, idioms on the misses of "
            "seeds 1-14 (docs/design-notes.md).\n\n"
            + table(by, seeds) + untuned(by, seeds)
            + "\n\nHeld out: the same replay on `bench/heldout.py`, sessions written apart "
            "from the proxy and from `bench/agentgen.py` (incident response, analytics, "
            "travel, contracts, finance, recruiting; 3 tool, 2 user and 1 constraint fact "
            "each; questions in plain words, naming the record but not the answer), six "
            f"sessions a seed, seeds {', '.join(map(str, held_seeds))}. Its seeds 0-4 showed "
            "the misses that recall's phrases and record fields were built for (2026-11-27); "
            "these draws were not looked at then."
            "\n\n" + table(held, held_seeds) + ("" if quick else _windows_text(
                await windows())))


def _windows_text(by: dict[tuple[int, str], dict[str, Counter[str]]]) -> str:
    sizes = sorted({size for size, _ in by})
    return (f"\n\nOther windows: both workloads at {', '.join(f'{n:,}' for n in sizes)} "
            f"tokens ({agentloop.MAX_OUT:,} reserved for the reply; histories 3-10 windows "
            "long): three generated sessions a seed (one of each kind), seeds "
            f"{', '.join(map(str, WINDOW_SEEDS))}, and the held-out sessions of seeds "
            f"{', '.join(map(str, WINDOW_HELD_SEEDS))}, every policy; facts kept (tool / user "
            "/ constraint).\n\n" + windows_table(by))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+")
    ap.add_argument("--held-out", action="store_true",
                    help="bench/heldout.py's sessions (default seeds 5-9)")
    ap.add_argument("--windows", action="store_true",
                    help="both workloads at 4k, 16k and 32k windows")
    a = ap.parse_args()
    if a.windows:
        print(windows_table(asyncio.run(windows())))
        raise SystemExit(0)
    seeds = tuple(a.seeds) if a.seeds else (HELD_OUT_SEEDS if a.held_out else SEEDS)
    print(table(asyncio.run((held_out if a.held_out else spread)(seeds)), seeds))
