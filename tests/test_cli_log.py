"""`ctxwarden log`: the per-turn table with totals, and `--json` in the admin API's shape."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from proxy.cli import main
from store.base import Event, EvictedChunk
from store.embed import CachedEmbedder, get_embedder
from store.lance import LanceStore

T0 = 1_767_000_000.0


@pytest.fixture(autouse=True)
def default_logging() -> Iterator[None]:
    yield
    structlog.reset_defaults()  # `log` configured logging; capture_logs needs the default


@pytest.fixture(scope="session")
def embedder() -> CachedEmbedder:
    return get_embedder("sentence-transformers", "all-MiniLM-L6-v2")


@pytest.fixture
def config(tmp_path: Path, embedder: CachedEmbedder) -> Path:
    async def fill() -> None:
        store = LanceStore(tmp_path / "db", embedder, background=False)
        await store.offload([EvictedChunk("default", "s1", "c-aa", 3, "tool", "TRANSIENT", 812,
                                          "[{\"flight\": \"HAT136\"}]")])
        await store.log([
            Event("default", "s1", 3, "c-aa", "TRANSIENT", 812, 0.125, "evict", "lowest EFV",
                  "rwoe", preview="[{\"flight\": \"HAT136\", \"depart\": \"09:40\"}]\n" + "x" * 90,
                  time=T0),
            Event("default", "s1", 3, "c-bb", "EPHEMERAL", 40, 0.0, "evict", "failed tool call",
                  "rwoe", preview="Traceback (most recent call last)", time=T0 + 1),
            Event("default", "s1", 9, "c-aa", "TRANSIENT", 64, 0.4123, "recall",
                  "similar to the current step", "rwoe", preview="HAT136 departs 09:40",
                  time=T0 + 60),
            Event("other", "s1", 1, "c-zz", "TRANSIENT", 5, 0.0, "evict", "r", "rwoe", time=T0),
        ])
        await store.close()

    asyncio.run(fill())
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"store:\n  path: {tmp_path / 'db'}\n")
    return cfg


def test_table_with_totals(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["log", "--session", "s1", "--config", str(config)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "session s1"
    assert out[1].split() == ["turn", "action", "class", "tokens", "score", "preview"]
    assert set(out[2].replace(" ", "")) == {"-"}
    rows = out[3:6]
    assert rows[0].split()[:5] == ["3", "evict", "TRANSIENT", "812", "0.125"]
    assert '[{"flight": "HAT136", "depart": "09:40"}] xxx' in rows[0]
    assert rows[0].endswith("…") and "\n" not in rows[0]  # one line, cut
    assert rows[1].split()[:5] == ["3", "evict", "EPHEMERAL", "40", "0.000"]
    assert rows[2].split()[:5] == ["9", "recall", "TRANSIENT", "64", "0.412"]
    assert out[6] == ""
    assert out[7] == ("evicted: 2 chunks, 852 tokens | recalled: 1 passage, 64 tokens"
                      " | restored: 0")
    assert out[8].startswith("turns 3-9, 2025-12-29 ")


def test_json_is_the_admin_shape(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["log", "--session", "s1", "--config", str(config), "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert list(body) == ["events"] and len(body["events"]) == 3
    assert body["events"][2] == {
        "turn": 9, "chunk_id": "c-aa", "class": "TRANSIENT", "tokens": 64, "score": 0.4123,
        "action": "recall", "reason": "similar to the current step", "policy": "rwoe",
        "time": T0 + 60, "preview": "HAT136 departs 09:40"}


def test_tenant_and_unknown_session(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["log", "--session", "s1", "--config", str(config), "--tenant", "other",
                 "--json"]) == 0
    assert [e["chunk_id"] for e in json.loads(capsys.readouterr().out)["events"]] == ["c-zz"]
    assert main(["log", "--session", "nope", "--config", str(config)]) == 0
    got = capsys.readouterr()
    assert got.out == "session nope: no events\n"
    assert got.err.startswith("ctxwarden: read the store at ")  # where and as whom it looked
    assert "as tenant 'default'" in got.err and "--tenant" in got.err


def test_missing_store_and_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"store:\n  path: {tmp_path / 'absent'}\n")
    assert main(["log", "--session", "s1", "--config", str(cfg)]) == 1
    assert "no store at" in capsys.readouterr().err
    assert not (tmp_path / "absent").exists()  # reading never creates a store
    (tmp_path / "absent").mkdir()  # an empty directory: no tables made in it either
    assert main(["log", "--session", "s1", "--config", str(cfg)]) == 1
    assert "no store at" in capsys.readouterr().err
    assert list((tmp_path / "absent").iterdir()) == []
    assert main(["log", "--session", "s1", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "config file not found" in capsys.readouterr().err


def test_json_stays_json_when_the_store_has_a_log_to_load(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Right after a crash the write-ahead log still holds records: the store says so
    (`wal_loaded`), and that line went to stdout in front of the JSON (a soak run: every
    `log --json` on a dead proxy's store unparseable)."""
    from proxy.cli.log import _NoEmbedder

    async def crash() -> None:  # logged, never replayed into LanceDB: as a SIGKILL leaves it
        store = LanceStore(tmp_path / "db", _NoEmbedder(), replay=False)
        await store.log([Event("default", "s1", 4, "c-aa", "TRANSIENT", 9, 0.5, "evict", "r",
                               "rwoe", time=T0)])
        await store.close()

    asyncio.run(crash())
    capsys.readouterr()  # what the crashed store said as it stopped
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"store:\n  path: {tmp_path / 'db'}\n")
    assert main(["log", "--session", "s1", "--config", str(cfg), "--json"]) == 0
    got = capsys.readouterr()
    assert [e["chunk_id"] for e in json.loads(got.out)["events"]] == ["c-aa"]
    assert "wal_loaded" not in got.out
