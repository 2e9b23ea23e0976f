"""`python -m bench.policies [OUT_DIR] [--quick]`: run `section()` and print its markdown
(what docs/policies.md and docs/benchmarks.md quote); the chart and JSON go to OUT_DIR
(default docs/img)."""

from __future__ import annotations

import sys
from pathlib import Path

from bench.policies import ROOT, section

if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--quick"]
    out = Path(args[0]) if args else ROOT / "docs" / "img"
    sys.stdout.write(section(out, quick="--quick" in sys.argv))
