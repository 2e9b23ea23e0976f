"""bench/seeds.py's window table: every workload is generated for the window it is
measured at, and the table reports what was asked and kept."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from bench import agentgen, agentloop, recall_gate, seeds
from bench.replay import Meter
from proxy.config import Settings


def test_settings_take_the_window() -> None:
    route = seeds.settings("mask", 16_000).routes[0]
    assert (route.context_window, route.policy) == (16_000, "mask")


async def test_windows_measure_each_size_on_sessions_made_for_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, int]] = []  # (the route's window, the longest history's tokens)
    real = recall_gate.measure  # what bench/seeds.py imports as `measure`
    tokens = Meter().tokens

    async def measure(w: agentloop.Workload, st: Settings) -> dict[str, Any]:
        seen.append((st.routes[0].context_window or 0,
                     max(sum(tokens(m) for m in s.messages) for s in w.b2b)))
        return await real(w, st)  # the real replay: this only records what it was given

    monkeypatch.setattr(seeds, "measure", measure)
    by = await seeds.windows(sizes=(4000, 16_000), seeds=(0,), held_seeds=(5,),
                             policies=("rwoe", "truncate"))
    assert list(by) == [(4000, "generated"), (4000, "held out"),
                        (16_000, "generated"), (16_000, "held out")]
    assert {size for size, _ in seen} == {4000, 16_000}
    for size, longest in seen:  # histories several windows long, for this window
        assert 3 * size <= longest <= 12 * size
    made = agentgen.sessions(1, 0, 4000, 3.0, 10.0)
    asked = Counter(f.kind for s in made for f in s.facts)
    generated = by[(4000, "generated")]
    for policy in ("rwoe", "truncate"):
        c = generated[policy]
        assert {k: c[f"asked_{k}"] for k in seeds.KINDS} == {k: asked[k] for k in seeds.KINDS}
        assert all(0 <= c[f"kept_{k}"] <= c[f"asked_{k}"] for k in seeds.KINDS)
    table = seeds.windows_table(by)
    rwoe = generated["rwoe"]
    cell = " / ".join(str(rwoe[f"kept_{k}"]) for k in seeds.KINDS)
    assert table.splitlines()[0].endswith("| rwoe | truncate |")
    assert f"| 4,000 | generated | {asked['tool']} / {asked['user']} / " in table
    assert f"({cell}) |" in table


def test_untuned_sums_only_the_seeds_recall_was_not_tuned_on() -> None:
    def kept(tool: int, user: int) -> Counter[str]:
        return Counter({"asked_tool": 18, "kept_tool": tool, "asked_user": 18,
                        "kept_user": user, "asked_constraint": 18, "kept_constraint": 18})

    by = {"rwoe": [kept(1, 1), kept(10, 17), kept(12, 18)],
          "mask": [kept(0, 0), kept(9, 9), kept(8, 8)]}
    line = seeds.untuned(by, (0, 15, 16))  # seed 0 is among TUNED_SEEDS
    assert line == ("\n\nOn seeds 15, 16 alone (not the seeds recall was tuned on): "
                    "rwoe 93/108 (tool 22/36); mask 70/108 (tool 17/36).")
    assert seeds.untuned(by, (0, 1, 2)) == ""
