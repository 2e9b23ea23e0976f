"""The eviction-policy benchmarks from the command line (`ctxwarden bench` runs this).

    python -m bench.cli policies [--workload uniform|adversarial] [--sessions N] [--seed S]
                                 [--budget-ratio R] [--chart-sessions M] [--out DIR]
    python -m bench.cli replay --trajectories FILE --window N [--policies a,b] [--limit N]
                               [--recall off|on|both] [--recall-limit K] [--out DIR]

Why a command and not only `make bench`: anyone can rerun a figure from docs/ with a
different seed, size or budget and get the same table for the same arguments (the
timing column aside). In a checkout, `ctxwarden bench ARGS` is the same command: the
installed proxy runs this module as a separate process (proxy/cli/bench.py), since the
product never imports bench/.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _ratio(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {value}")
    return value


def _variant(text: str) -> tuple[str, str, dict[str, Any]]:
    """LABEL=POLICY:JSON, e.g. rwoe-f200=rwoe:{"recon_fixed": {"tool": 200}}."""
    label, sep, rest = text.partition("=")
    name, colon, params = rest.partition(":")
    try:
        parsed = json.loads(params) if colon else {}
    except ValueError:
        parsed = None
    if not (sep and label and name) or not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(
            f"expected LABEL=POLICY:JSON-object, e.g. 'rwoe-f200=rwoe:{{\"recon_fixed\": "
            f"{{\"tool\": 200}}}}', got {text!r}")
    return label, name, parsed


VARIANT_HELP = ("also run a registered policy with parameters, as LABEL=POLICY:JSON "
                "(e.g. 'rwoe-sw0=rwoe:{\"semantic_weight\": 0}'); repeatable")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ctxwarden bench",
                                description="benchmark the eviction policies")
    sub = p.add_subparsers(dest="bench", required=True)
    pol = sub.add_parser("policies", help="RWOE paper experiments vs Bélády and the optimum")
    pol.add_argument("--workload", choices=("uniform", "adversarial"), default="uniform")
    pol.add_argument("--sessions", type=_positive, default=None,
                     help="sessions (default: the paper's, 500 uniform / 200 adversarial)")
    pol.add_argument("--seed", type=int, default=0)
    pol.add_argument("--budget-ratio", type=_ratio, default=None,
                     help="budget as a share of the session's tokens (default: workload's)")
    pol.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                     help="override a numeric workload parameter (bench/policies/workload.py), "
                          "e.g. --set ref_recency=0.5; repeatable")
    pol.add_argument("--variant", type=_variant, action="append", default=[], help=VARIANT_HELP)
    pol.add_argument("--chart-sessions", type=_positive, default=None,
                     help="sessions per budget point of the chart (default: min(N, 100))")
    pol.add_argument("--out", type=Path, default=None,
                     help="write policies.json, policies.md and policies.png here")
    pol.set_defaults(func=run_policies)
    rep = sub.add_parser("replay", help="real trajectories through the pipeline, per policy")
    rep.add_argument("--trajectories", type=Path, required=True, help="tau-bench JSON file")
    rep.add_argument("--window", type=_positive, required=True, help="context window, tokens")
    rep.add_argument("--policies", default=None,
                     help="comma-separated (default: every registered policy + rwoe-sized)")
    rep.add_argument("--limit", type=_positive, default=None, help="first N trajectories")
    rep.add_argument("--recall", choices=("off", "on", "both"), default="both")
    rep.add_argument("--recall-limit", type=int, default=20,
                     help="recall on replays the first K trajectories only (0 = all; it "
                          "embeds every evicted chunk with MiniLM, ~0.1 s a request)")
    rep.add_argument("--recall-policies", default="truncate,lru,lfu,rwoe")
    rep.add_argument("--variant", type=_variant, action="append", default=[], help=VARIANT_HELP)
    rep.add_argument("--out", type=Path, default=None, help="write replay.json and replay.md")
    rep.set_defaults(func=run_replay)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


def run_policies(args: argparse.Namespace) -> int:
    # Imported when a command runs, not at import: scipy and matplotlib take seconds to load.
    from bench.policies import experiment as exp_mod
    from bench.policies import report
    from bench.policies.workload import WORKLOADS

    params = WORKLOADS[args.workload]
    if args.budget_ratio is not None:
        params = params.with_(budget_ratio=args.budget_ratio)
    try:
        params = params.with_(**dict(_setting(params, item) for item in args.set))
    except ValueError as exc:
        print(f"ctxwarden: --set {exc}", file=sys.stderr)
        return 2
    n = args.sessions or (500 if args.workload == "uniform" else 200)
    pols = [*exp_mod.policy_names(), exp_mod.SIZE_AWARE, *args.variant]
    if not _valid(args.variant):
        return 2
    with report.progress_bar(n, f"{args.workload}") as bar:
        exp = exp_mod.run(params, n, args.seed, pols, bar)
    table = report.text_table(exp)
    sys.stdout.write(table)
    if args.out is not None:
        out: Path = args.out
        out.mkdir(parents=True, exist_ok=True)
        report.write_json(exp, out / "policies.json")
        (out / "policies.md").write_text(f"{report.describe(exp)}\n\n{report.markdown_table(exp)}")
        m = args.chart_sessions or min(n, 100)
        with report.progress_bar(m * len(exp_mod.RATIOS), "chart") as bar:
            curves = exp_mod.sweep(params, m, args.seed, policies=pols, bar=bar)
        report.chart(curves, out / "policies.png",
                     f"{params.name} workload, {m} sessions per point, seed {args.seed}")
        print(f"wrote {out}/policies.json, .md, .png, -curves.json", file=sys.stderr)
    return 0


def _setting(params: Any, item: str) -> tuple[str, int | float]:
    """`name=value` for a numeric field of WorkloadParams, typed like its default."""
    name, sep, text = item.partition("=")
    current = getattr(params, name, None) if sep else None
    if isinstance(current, bool) or not isinstance(current, int | float):
        raise ValueError(f"{item!r}: expected NAME=VALUE with NAME a numeric workload "
                         "parameter (turns, refs_per_turn, ref_recency, r0, alpha, topics, "
                         "topic_focus, topic_shift, topic_noise, budget_ratio, …)")
    try:
        return name, type(current)(text)
    except ValueError:
        raise ValueError(f"{item!r}: {text!r} is not a {type(current).__name__}") from None


def _valid(variants: list[tuple[str, str, dict[str, Any]]]) -> bool:
    """Build each variant once so a typo fails before minutes of simulation, not after."""
    from policies import get_policy

    for label, name, kw in variants:
        try:
            get_policy(name, **kw)
        except (ValueError, TypeError) as exc:  # UnknownPolicy, bad or unknown parameters
            print(f"ctxwarden: --variant {label}: {exc}", file=sys.stderr)
            return False
    return True


def run_replay(args: argparse.Namespace) -> int:
    from bench.policies import experiment as exp_mod
    from bench.policies import replay_table as table
    from bench.policies.replay import replay

    if not _valid(args.variant):
        return 2
    try:
        trajs = json.loads(args.trajectories.read_text())[: args.limit]
    except (OSError, ValueError) as exc:
        print(f"ctxwarden: cannot read {args.trajectories}: {exc}", file=sys.stderr)
        return 2
    pols = [*(args.policies.split(",") if args.policies
              else ["none", *exp_mod.policy_names(), exp_mod.SIZE_AWARE]), *args.variant]
    rows = []
    if args.recall in ("off", "both"):
        rows += [r.as_dict() for r in replay(trajs, args.window, pols, False, True)]
    if args.recall in ("on", "both"):
        subset = trajs[: args.recall_limit] if args.recall_limit > 0 else trajs
        recall_pols = args.recall_policies.split(",")
        if args.recall == "both" and len(subset) < len(trajs):  # paired: off on the same ones
            rows += [r.as_dict() for r in replay(subset, args.window, recall_pols, False, True)]
        rows += [r.as_dict() for r in replay(subset, args.window, recall_pols, True, True)]
    sys.stdout.write(table(rows))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "replay.json").write_text(json.dumps(rows, indent=2) + "\n")
        (args.out / "replay.md").write_text(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
