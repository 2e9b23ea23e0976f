"""The package boundaries hold, and `lint-imports` (run by `make lint`) fails when one breaks.

Each case copies the source tree (Python files only) to a temporary directory, adds one
module that crosses one boundary, and runs `lint-imports` there with the project's own
pyproject.toml: the contract that forbids that import must come out BROKEN, and the
command must fail. The contracts are in pyproject.toml [tool.importlinter].
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("proxy", "policies", "store", "bench", "tests")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
CONTRACTS = {c["name"] for c in tomllib.loads((ROOT / "pyproject.toml").read_text())
             ["tool"]["importlinter"]["contracts"]}


def _python_only(directory: str, names: list[str]) -> set[str]:
    return {n for n in names if n == "__pycache__"
            or (not n.endswith(".py") and not (Path(directory) / n).is_dir())}


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", "--no-logo"], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def broken(output: str) -> set[str]:
    """Contract names reported BROKEN (a long name wraps over two lines)."""
    text = " ".join(output.split())
    return {name for name in CONTRACTS if f"{name} BROKEN" in text}


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the source tree that keeps every contract (checked once here)."""
    root = tmp_path_factory.mktemp("tree")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, root / package, ignore=_python_only)
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def test_the_source_tree_keeps_every_contract(tree: Path) -> None:
    result = lint_imports(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in result.stdout


@pytest.mark.parametrize(("path", "source", "contract"), [
    ("store/leak.py", "from proxy.errors import ProxyError\n",
     "policies/ and store/ know nothing of the proxy (HTTP, config, CLI)"),
    ("policies/leak.py", "from store import base\n",
     "store/ and policies/ never import each other"),
    ("proxy/leak.py", "import bench.cli\n",
     "the product never imports bench/ or tests/"),
    ("store/leak.py", "from tests.support import openai_server\n",
     "the product never imports bench/ or tests/"),
    ("proxy/upstream/leak.py", "from proxy import app\n",
     "no import cycles between the modules and sub-packages of proxy/, policies/, store/"),
    ("proxy/admin/leak.py", "from proxy.cli import main\n",
     "the edge sits on top: the CLI, then the app, then the admin side and the handlers"),
    ("proxy/upstream/leak.py", "from proxy.admin import api\n",
     "the request path and the upstream boundary never reach up into the edge"),
])
def test_lint_imports_fails_on_a_broken_boundary(tree: Path, path: str, source: str,
                                                 contract: str) -> None:
    leak = tree / path
    leak.write_text(f'"""A module that crosses a boundary on purpose."""\n\n{source}')
    try:
        result = lint_imports(tree)
    finally:
        leak.unlink()
    assert result.returncode == 1, result.stdout + result.stderr
    assert contract in broken(result.stdout), result.stdout
    assert path.removesuffix(".py").replace("/", ".") in result.stdout  # names the culprit
