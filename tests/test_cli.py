"""The `ctxwarden` command line: start-up refuses a route it cannot forward to, and
`ctxwarden bench` hands its arguments to bench/ in a separate process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import structlog

from proxy.cli import bench, main

ROUTE_WITHOUT_KEY = """\
store: {path: ":memory:"}
routes:
  - name: demo
    model: demo
    upstream: {model: openai/demo, mock_response: "hi"}
  - name: claude
    model: "claude-*"
    context_window: 200000
    upstream: {model: anthropic/claude-3-5-sonnet-latest, api_key_env: CTXW_TEST_NO_SUCH_KEY}
"""


def test_serve_refuses_a_route_whose_key_variable_is_unset(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("CTXW_TEST_NO_SUCH_KEY", raising=False)
    config = tmp_path / "config.yaml"
    config.write_text(ROUTE_WITHOUT_KEY)
    try:
        assert main(["serve", "--config", str(config)]) == 2
    finally:
        structlog.reset_defaults()  # serve configured logging; capture_logs needs the default
    assert capsys.readouterr().err == (  # the config read, the routes resolved: it starts
        "ctxwarden: starting on 127.0.0.1:8787 (LiteLLM, the store, the embedder's process); "
        "'listening' follows when ready\n"
        "ctxwarden: routes[1] ('claude'): upstream.api_key_env: the environment variable "
        "CTXW_TEST_NO_SUCH_KEY is not set\n")


def test_serve_rejects_unknown_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--no-such-flag"])
    assert exc.value.code == 2
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["policies", "--sessions", "3", "--seed", "1"],
                                  ["--help"], ["replay", "--help"]])
def test_bench_runs_bench_cli_from_the_checkout(monkeypatch: pytest.MonkeyPatch,
                                               argv: list[str]) -> None:
    calls: list[tuple[list[str], Any]] = []

    def call(cmd: list[str], cwd: Any = None) -> int:
        calls.append((cmd, cwd))
        return 0

    monkeypatch.setattr(subprocess, "call", call)
    assert main(["bench", *argv]) == 0
    assert calls == [([sys.executable, "-m", "bench.cli", *argv], bench.ROOT)]
    assert (bench.ROOT / "bench" / "cli.py").is_file()


def test_bench_outside_a_checkout_says_where_to_get_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(bench, "ROOT", tmp_path)
    assert main(["bench", "policies"]) == 2
    assert "the benchmarks ship with the source tree" in capsys.readouterr().err
