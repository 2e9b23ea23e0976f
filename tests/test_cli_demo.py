"""`ctxwarden demo`: starts a proxy on the shipped demo route, plays the scripted session,
prints what happened turn by turn, and ends with the inspector's URL. Its lines must agree
with the decision log the same store keeps (`ctxwarden log --json`)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from proxy.cli import main
from proxy.cli.demo import DemoResult, _totals
from proxy.cli.demo_script import STEPS

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def config(tmp_path: Path) -> Iterator[Path]:
    """The shipped config.yaml (its demo route), with the store in tmp."""
    text = (ROOT / "config.yaml").read_text()
    assert "path: ./data/lancedb" in text
    cfg = tmp_path / "config.yaml"
    cfg.write_text(text.replace("path: ./data/lancedb", f"path: {tmp_path / 'db'}"))
    yield cfg
    structlog.reset_defaults()  # --start quiets the server's log lines for the demo


def test_demo_start_prints_turns_evictions_recall_and_the_inspector_url(
        config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--start", "--exit", "--port", "0", "--config", str(config),
                 "--session", "demo-t"]) == 0
    out = capsys.readouterr().out.splitlines()
    head = re.fullmatch(r"ctxwarden demo: session demo-t on (http://127\.0\.0\.1:\d+) "
                        r"\(model 'demo'\)", out[0])
    assert head is not None
    url = head.group(1)
    turns = [re.fullmatch(r"turn +(\d+)  (.+?) +tokens +([\d,]+) → +([\d,]+)  budget 1,012",
                          line) for line in out if line.startswith("turn ")]
    assert all(turns) and [int(t.group(1)) for t in turns if t] == list(range(len(STEPS)))
    assert [t.group(2).split(" (")[0] for t in turns if t] == [s.label for s in STEPS]
    sizes = [(int(t.group(3).replace(",", "")), int(t.group(4).replace(",", "")))
             for t in turns if t]
    assert sizes[0][0] == sizes[0][1]  # nothing to evict at the start
    assert all(o <= 911 + 101 for _, o in sizes)  # fitted: budget plus the recall budget
    assert sizes[-1][0] > 1200 > sizes[-1][1]  # the history outgrew the window

    # Every evicted/recalled line is an entry of the store's decision log, in order.
    capsys.readouterr()
    assert main(["log", "--session", "demo-t", "--config", str(config), "--json"]) == 0
    logged = json.loads(capsys.readouterr().out)["events"]
    lines = [line.split() for line in out if line.lstrip().startswith(("- ", "+ "))]
    assert len(lines) == len(logged) > 0
    for words, e in zip(lines, logged, strict=True):
        assert words[:4] == ["-" if e["action"] == "evict" else "+",
                             "evicted" if e["action"] == "evict" else "recalled",
                             e["class"], str(e["tokens"])]
        assert words[6] == f"{e['score']:.4f}"
    recalled = [line for line in out if line.lstrip().startswith("+ recalled")]
    assert any("ADR-012: Refund rounding" in line for line in recalled)  # the early fact is back
    ev = [e for e in logged if e["action"] == "evict"]
    rc = [e for e in logged if e["action"] == "recall"]
    assert (f"session demo-t: {len(STEPS)} turns, {len(ev)} chunks evicted "
            f"({sum(e['tokens'] for e in ev):,} tokens), {len(rc)} "
            f"passage{'' if len(rc) == 1 else 's'} recalled "
            f"({sum(e['tokens'] for e in rc):,} tokens)") in out
    # --exit: its own server is gone, so no hint points at it
    assert out[-1].startswith("model's last answer: ")
    result = DemoResult("demo-t", url)
    assert _totals(result).splitlines()[-2:] == [  # while the proxy keeps running
        "decision log: ctxwarden log --session demo-t", f"inspector: {url}/ui/#session=demo-t"]


def test_demo_without_a_proxy_says_how_to_get_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--url", "http://127.0.0.1:9/v1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ctxwarden demo: no proxy answers at http://127.0.0.1:9 (")
    assert "`make serve`" in err and "ctxwarden demo --start" in err and "--url" in err


def test_demo_start_needs_a_matching_route(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"store:\n  path: {tmp_path / 'db'}\nroutes: []\n")
    assert main(["demo", "--start", "--exit", "--config", str(cfg)]) == 1
    assert capsys.readouterr().err == (
        f"ctxwarden demo: no route in {cfg} matches model 'demo'; the shipped config.yaml "
        "has the `demo` route (LiteLLM mock, window 1200)\n")
    assert not (tmp_path / "db").exists()


def test_demo_keys_come_from_the_servers_variables_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """The README names the server's CTXWARDEN_KEYS / CTXWARDEN_ADMIN_KEYS; the demo's own
    singular variables win where set (a new user set the server's and got a 401)."""
    from proxy.cli import build_parser

    for name in ("CTXWARDEN_API_KEY", "CTXWARDEN_ADMIN_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CTXWARDEN_KEYS", " ck-a , ck-b")
    monkeypatch.setenv("CTXWARDEN_ADMIN_KEYS", "ak-1,ak-2")
    args = build_parser().parse_args(["demo"])
    assert (args.api_key, args.admin_key) == ("ck-a", "ak-1")
    monkeypatch.setenv("CTXWARDEN_ADMIN_KEY", "ak-own")
    assert build_parser().parse_args(["demo"]).admin_key == "ak-own"
    monkeypatch.delenv("CTXWARDEN_KEYS")
    assert build_parser().parse_args(["demo"]).api_key is None
