"""Config: YAML under CTXWARDEN_* env overrides; typos and bad values name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.config import ConfigError, Settings, load_settings

ROOT = Path(__file__).resolve().parents[1]

ISSUE_EXAMPLE = """
store: {path: ./data/lancedb}
routes:
  - name: bench
    model: "bench-*"
    upstream: {model: openai/mock-1, api_base: "http://127.0.0.1:9100/v1", api_key: sk-test}
    context_window: 8000
    max_output_tokens: 512
    policy: rwoe
    recall: {enabled: true}
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_issue_example_loads(tmp_path: Path) -> None:
    s = load_settings(write(tmp_path, ISSUE_EXAMPLE))
    r = s.routes[0]
    assert (r.name, r.context_window, r.max_output_tokens, r.policy) == ("bench", 8000, 512, "rwoe")
    assert s.route_for("bench-7") is r and s.route_for("bench") is r
    assert s.route_for("gpt-4o") is None
    assert (s.server.host, s.server.port) == ("127.0.0.1", 8787)


def test_shipped_config_loads() -> None:
    s = load_settings(ROOT / "config.yaml")
    assert [r.name for r in s.routes] == ["demo"]
    assert s.routes[0].upstream.mock_response


def test_env_overrides_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXWARDEN_SERVER__PORT", "9999")
    monkeypatch.setenv("CTXWARDEN_STORE__PATH", "/tmp/elsewhere")
    s = load_settings(write(tmp_path, ISSUE_EXAMPLE))
    assert s.server.port == 9999 and s.store.path == "/tmp/elsewhere"
    assert s.routes[0].name == "bench"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("routes:\n  - name: a\n    upstream: {model: openai/x}\n    contxt_window: 5\n",
         "routes[0].contxt_window: Extra inputs are not permitted"),
        ("routes:\n  - name: a\n    upstream: {model: openai/x}\n    watermark: 2\n",
         "routes[0].watermark: Input should be less than or equal to 1"),
        ("routes:\n  - name: a\n", "routes[0].upstream: Field required"),
        ("server: {port: http}\n", "server.port: Input should be a valid integer"),
        ("routes:\n  - name: a\n    upstream: {model: openai/x}\n    policy: nope\n",
         "routes[0].policy: Unknown policy: nope"),
        ("routes:\n  - name: a\n    upstream: {model: openai/x}\n"
         "    policy_params: {alpah: 0.3}\n", "routes[0].policy_params:"),
        ("routes:\n  - {name: a, upstream: {model: openai/x}}\n"
         "  - {name: a, upstream: {model: openai/y}}\n", "duplicate route name 'a'"),
        ("routes: [\n", "cannot read config"),
        ("store: {embed_precision: fp8}\n",
         "store.embed_precision: Input should be 'auto', 'float32' or 'bfloat16'"),
    ],
)
def test_bad_config_names_the_key(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(write(tmp_path, text))
    assert needle in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_settings(tmp_path / "nope.yaml")


def test_store_wal_dir_reaches_the_store(tmp_path: Path) -> None:
    from proxy.app import make_store
    from store.lance import LanceStore

    settings = Settings(store={"path": str(tmp_path / "db"), "wal_dir": str(tmp_path / "wal")})
    store = make_store(settings)
    assert isinstance(store, LanceStore) and store.wal_dir == tmp_path / "wal"
    default = make_store(Settings(store={"path": str(tmp_path / "db2")}))
    assert isinstance(default, LanceStore) and default.wal_dir == tmp_path / "db2" / "_wal"


def test_store_embed_precision_reaches_the_embedder(tmp_path: Path) -> None:
    """`store.embed_precision` is the local model's (a child is started only when used)."""
    from proxy.app import make_store
    from store.embed import SentenceTransformerEmbedder
    from store.embedchild import PRECISION

    assert Settings().store.embed_precision == PRECISION == "float32"  # bfloat16's memory
    for precision in ("float32", "auto"):
        store = make_store(Settings(store={"path": str(tmp_path / precision),
                                           "embed_precision": precision}))
        embedder = getattr(store, "embedder", None)
        assert isinstance(embedder, SentenceTransformerEmbedder)
        assert embedder.process.precision == precision


def test_recall_budget_is_a_share_of_the_room_with_a_floor() -> None:
    """A tenth of a small window holds one passage of JSON; the floor (at most a quarter
    of the room) leaves room for two. Large windows keep their share; 0 turns it off."""
    from proxy.config import RecallSettings

    r = RecallSettings()
    assert r.budget(6_900) == 690  # 10 % is more than the floor
    assert r.budget(2_700) == 400  # 10 % would be 270
    assert r.budget(1_000) == 250  # the floor is capped at a quarter of the room
    assert RecallSettings(budget_fraction=0).budget(2_700) == 0
    assert RecallSettings(min_budget_tokens=0).budget(2_700) == 270
