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

ROOT = Path(__file__).resolve().parent.parent

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


BUSY_PORT_CONFIG = """\
server: {{port: {port}, cold_workers: 0}}
store: {{path: ":memory:"}}
routes:
  - name: demo
    model: demo
    upstream: {{model: openai/demo, mock_response: "hi"}}
    context_window: 1200
"""


def test_serve_on_a_port_in_use_says_so_and_exits_2(tmp_path: Path) -> None:
    """In its own process, as it runs: in this one its loggers would keep pytest's
    captured stderr after the test closed it."""
    import socket

    with socket.socket() as held:  # another process already listens there
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        config = tmp_path / "config.yaml"
        config.write_text(BUSY_PORT_CONFIG.format(port=port))
        done = subprocess.run([sys.executable, "-m", "proxy.cli", "serve", "--config",
                               str(config)], capture_output=True, text=True, timeout=120,
                              cwd=ROOT, check=False)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "listening on" not in done.stderr  # said only once the socket is bound
    assert done.stderr.endswith(
        f"ctxwarden: cannot listen on 127.0.0.1:{port}: Address already in use; free the "
        "port or choose another: --port, server.port or CTXWARDEN_SERVER__PORT\n")


@pytest.mark.parametrize(("port", "why"), [("99999", "99999 is not a port: use 1-65535"),
                                           ("0", "0 is not a port: use 1-65535"),
                                           ("http", "'http' is not a port number")])
def test_serve_refuses_a_port_out_of_range_before_starting(
        port: str, why: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--port", port])
    assert exc.value.code == 2
    assert f"argument --port: {why}" in capsys.readouterr().err


def test_serve_warns_of_a_route_that_would_reach_its_provider_without_a_key(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from proxy.cli.serve import keyless_routes
    from proxy.config import Settings

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    routes = [{"name": "demo", "upstream": {"model": "openai/demo", "mock_response": "hi"}},
              {"name": "bare", "upstream": {"model": "openai/gpt-4o-mini"}},
              {"name": "local", "upstream": {"model": "openai/llama3",
                                             "api_base": "http://127.0.0.1:11434/v1"}},
              {"name": "keyed", "upstream": {"model": "openai/gpt-4o", "api_key": "sk-x"}}]
    settings = Settings(store={"path": ":memory:"}, routes=routes)
    assert keyless_routes(settings) == [
        "routes[1] ('bare') has no key for 'openai/gpt-4o-mini': set upstream.api_key_env "
        "(e.g. OPENAI_API_KEY) or upstream.api_key, or export OPENAI_API_KEY; else the "
        "provider answers 401"]
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")  # LiteLLM's own variable is a key
    assert keyless_routes(settings) == []
    monkeypatch.delenv("OPENAI_API_KEY")
    passthrough = Settings(store={"path": ":memory:"}, routes=routes,
                           auth={"mode": "passthrough"})
    assert keyless_routes(passthrough) == []  # the client's key goes upstream
