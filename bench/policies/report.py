"""Tables (terminal and markdown), policies.json and the budget chart.

Why separate from the runs: the CLI prints, `--out` writes files, and `make bench` embeds
the markdown in docs/benchmarks.md; all three render the same rows the same way. The
chart uses matplotlib's Agg backend (no display, same bytes on a server).
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.policies.experiment import KEYS, RATIOS, Experiment

HEADERS = ("policy", "utility % of optimum", "utility % of Bélády", "reconstructions / turn",
           "ms / turn (median)")


class _Quiet:
    def update(self, n: int = 1) -> None:
        return None


@contextlib.contextmanager
def progress_bar(total: int, desc: str, enabled: bool = True) -> Iterator[Any]:
    """A tqdm bar on a terminal, nothing when stderr is piped (logs stay clean)."""
    if not enabled or not sys.stderr.isatty():
        yield _Quiet()
        return
    from tqdm import tqdm

    with tqdm(total=total, desc=desc, file=sys.stderr, leave=False, unit="session") as bar:
        yield bar


def _cells(row: dict[str, Any]) -> list[str]:
    ms = row["ms_per_turn"]
    return [row["policy"], f"{row['utility_pct_optimum']:.2f}",
            f"{row['utility_pct_belady']:.2f}", f"{row['reconstructions_per_turn']:.3f}",
            "—" if ms is None else f"{ms:.4f}"]


def describe(exp: Experiment) -> str:
    p = exp.params
    mix = "/".join(f"{100 * v:g}" for v in p.class_mix.values())
    topics = (f", {p.topics} topics (focus {p.topic_focus:g}, shift {p.topic_shift:g})"
              if p.topics else "")
    topics += f", reference recency {p.ref_recency:g}/turn" if p.ref_recency else ""
    return (f"workload {p.name}: {exp.sessions} sessions × {p.turns} turns, seed {exp.seed}, "
            f"budget ratio {p.budget_ratio:g}, {p.chunks_per_turn[0]}–{p.chunks_per_turn[1]} "
            f"chunks/turn, class mix P/S/T/E {mix} %, Poisson({p.refs_per_turn:g}) "
            f"references/turn ({exp.references_per_turn:.2f} drawn){topics}")


def text_table(exp: Experiment) -> str:
    rows = [list(HEADERS), *(_cells(r) for r in exp.rows)]
    widths = [max(len(r[k]) for r in rows) for k in range(len(HEADERS))]
    lines = ["  ".join(c.ljust(w) if k == 0 else c.rjust(w)
                       for k, (c, w) in enumerate(zip(r, widths, strict=True))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return describe(exp) + "\n" + "\n".join(lines) + "\n"


def markdown_table(exp: Experiment) -> str:
    head = "| " + " | ".join(HEADERS) + " |\n|" + "---|" * len(HEADERS) + "\n"
    body = "".join("| " + " | ".join(_cells(r)) + " |\n" for r in exp.rows)
    return head + body


def write_json(exp: Experiment, path: Path) -> None:
    rows = [{k: r[k] for k in KEYS} for r in exp.rows]
    path.write_text(json.dumps(rows, indent=2) + "\n")


def chart(curves: dict[str, list[float]], path: Path, title: str,
          ratios: tuple[float, ...] = RATIOS) -> None:
    """Utility (% of the exact optimum) against the budget ratio, one line per policy; the
    numbers go beside it as <name>-curves.json."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=110)
    for name, ys in sorted(curves.items()):
        ref = name in ("belady", "informed")
        ax.plot([100 * r for r in ratios], ys, marker="o", markersize=3, label=name,
                linestyle=("--" if name == "belady" else ":") if ref else "-",
                color="black" if ref else None,
                linewidth=2.2 if name.startswith("rwoe") else 1.4)
    ax.set_xlabel("budget (% of the tokens generated in the session)")
    ax.set_ylabel("utility (% of the exact optimum)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata={"Software": None})
    data = {"title": title, "budget_ratio": list(ratios), "utility_pct_optimum": curves}
    path.with_name(f"{path.stem}-curves.json").write_text(json.dumps(data, indent=1) + "\n")
    plt.close(fig)
