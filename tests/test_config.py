"""Config: YAML under CTXWARDEN_* env overrides; typos and bad values name the key."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from policies.base import ChunkClass
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


TWO_ROUTES = """
server: {port: 8800}
routes:
  - name: small
    model: "small-*"
    upstream: {model: openai/small, api_base: "http://127.0.0.1:9100/v1", api_key: sk-test}
    context_window: 8000
    policy: rwoe
    recall: {enabled: true, budget_fraction: 0.2}
  - name: big
    upstream: {model: anthropic/claude-x, api_key_env: ANTHROPIC_API_KEY}
    context_window: 200000
"""


def test_env_overrides_one_key_of_a_route_by_its_index(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CTXWARDEN_ROUTES__<i>__<KEY> overrides that key of the YAML's i-th route (nested keys
    too); the rest of the route, the other route and the other sections stay the YAML's."""
    path = write(tmp_path, TWO_ROUTES)
    expected = copy.deepcopy(load_settings(path).model_dump())
    monkeypatch.setenv("CTXWARDEN_ROUTES__0__CONTEXT_WINDOW", "5000")
    monkeypatch.setenv("CTXWARDEN_ROUTES__0__POLICY", "lru")
    monkeypatch.setenv("CTXWARDEN_ROUTES__0__RECALL__ENABLED", "false")
    monkeypatch.setenv("CTXWARDEN_ROUTES__1__UPSTREAM__API_BASE", "http://10.0.0.2:8000/v1")
    monkeypatch.setenv("CTXWARDEN_STORE__PATH", "/data")
    s = load_settings(path)
    expected["store"]["path"] = "/data"
    expected["routes"][0].update(context_window=5000, policy="lru")
    expected["routes"][0]["recall"]["enabled"] = False
    expected["routes"][1]["upstream"]["api_base"] = "http://10.0.0.2:8000/v1"
    assert s.model_dump() == expected
    assert [r.name for r in s.routes] == ["small", "big"] and s.server.port == 8800
    assert (s.routes[0].recall.budget_fraction, s.routes[0].upstream.api_base) == \
        (0.2, "http://127.0.0.1:9100/v1")
    assert (s.routes[1].context_window, s.routes[1].upstream.model) == \
        (200000, "anthropic/claude-x")


def test_env_route_keys_holding_a_dict_or_list_take_json(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXWARDEN_ROUTES__1__POLICY_PARAMS", '{"alpha": 0.5}')
    monkeypatch.setenv("CTXWARDEN_ROUTES__0__CLASSIFICATION__RULES",
                       '[{"tool": "read_file", "class": "STRUCTURAL"}]')
    s = load_settings(write(tmp_path, TWO_ROUTES))
    assert s.routes[1].policy_params == {"alpha": 0.5}
    assert [r.model_dump() for r in s.routes[0].classification.rules] == [
        {"role": None, "tool": "read_file", "pattern": None, "position": None,
         "klass": ChunkClass.STRUCTURAL}]
    assert s.routes[0].policy_params == {} and s.routes[1].classification.rules == []


def test_env_json_list_still_replaces_the_routes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXWARDEN_ROUTES", '[{"name": "only", "upstream": {"model": "openai/x"}}]')
    s = load_settings(write(tmp_path, TWO_ROUTES))
    assert [(r.name, r.upstream.model) for r in s.routes] == [("only", "openai/x")]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("CTXWARDEN_ROUTES__5__POLICY", TWO_ROUTES, "{path} has 2 routes (0-1)"),
        ("CTXWARDEN_ROUTES__2__RECALL__ENABLED", TWO_ROUTES, "{path} has 2 routes (0-1)"),
        ("CTXWARDEN_ROUTES__small__POLICY", TWO_ROUTES,
         "a route's index is a number; {path} has 2 routes (0-1)"),
        ("CTXWARDEN_ROUTES__-1__POLICY", TWO_ROUTES,
         "a route's index is a number; {path} has 2 routes (0-1)"),
        ("CTXWARDEN_ROUTES__1__POLICY", ISSUE_EXAMPLE, "{path} has 1 route (0)"),
        ("CTXWARDEN_ROUTES__0__POLICY", "server: {port: 9000}\n", "{path} has no routes"),
    ],
)
def test_env_override_of_a_missing_route_names_the_variable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, text: str,
        message: str) -> None:
    path = write(tmp_path, text)
    monkeypatch.setenv(name, "lru")
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert str(info.value) == f"{name}: " + message.format(path=path)


def test_env_override_of_a_route_without_a_config_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXWARDEN_ROUTES__0__POLICY", "lru")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert str(info.value) == \
        "CTXWARDEN_ROUTES__0__POLICY: no config file, so no routes to override"


@pytest.mark.parametrize(
    ("name", "value", "needle"),
    [
        ("CTXWARDEN_ROUTES__1__CONTEXT_WINDOW", "big",
         "CTXWARDEN_ROUTES__1__CONTEXT_WINDOW: Input should be a valid integer"),
        ("CTXWARDEN_ROUTES__0__RECALL__ENABLED", "maybe",
         "CTXWARDEN_ROUTES__0__RECALL__ENABLED: Input should be a valid boolean"),
        ("CTXWARDEN_ROUTES__0__CONTXT_WINDOW", "5",
         "CTXWARDEN_ROUTES__0__CONTXT_WINDOW: Extra inputs"),
        ("CTXWARDEN_ROUTES__0__POLICY", "nope",
         "CTXWARDEN_ROUTES__0__POLICY: Unknown policy: nope"),
        ("CTXWARDEN_ROUTES__1__NAME", "small", "duplicate route name 'small'"),
    ],
)
def test_env_route_values_are_validated_like_the_yaml(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, value: str,
        needle: str) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        load_settings(write(tmp_path, TWO_ROUTES))
    assert needle in str(info.value)


def test_serve_exits_2_naming_the_variable_of_a_missing_route(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from proxy.cli import main

    path = write(tmp_path, TWO_ROUTES)
    monkeypatch.setenv("CTXWARDEN_ROUTES__5__POLICY", "lru")
    assert main(["serve", "--config", str(path)]) == 2
    assert capsys.readouterr().err == \
        f"ctxwarden: CTXWARDEN_ROUTES__5__POLICY: {path} has 2 routes (0-1)\n"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("routes:\n  - name: a\n    upstream: {model: openai/x}\n    contxt_window: 5\n",
         "routes[0].contxt_window: Extra inputs are not permitted (did you mean "
         "context_window?)"),
        ("routes:\n  - name: a\n    upstream: {model: openai/x}\n    watermark: 2\n",
         "routes[0].watermark: Input should be less than or equal to 1"),
        ("routes:\n  - name: a\n", "routes[0].upstream: Field required"),
        ("server: {port: http}\n", "server.port: Input should be a valid integer"),
        ("routes:\n  - name: a\n    upstream: {model: openai/x}\n    policy: nope\n",
         "routes[0].policy: Unknown policy: nope"),
        ("routes:\n  - name: a\n    upstream: {model: openai/x}\n"
         "    policy_params: {alpah: 0.3}\n",
         "routes[0].policy_params: policy 'rwoe' has no option alpah (its options: lambdas, "
         "alpha, base_rates, r0, recon_cost, recon_fixed, semantic_weight, recency_weight, "
         "recency_decay, cache_weight)"),
        ("routes:\n  - name: a\n    upstream: {model: openai/x}\n    policy: lru\n"
         "    policy_params: {keep: 3}\n",
         "routes[0].policy_params: policy 'lru' has no option keep (its options: none)"),
        ("routes:\n  - name: a\n    upstream: {model: openai/x}\n    classification:\n"
         "      rules: [{role: user, pattern: '(unclosed', class: PERMANENT}]\n",
         "routes[0].classification.rules[0].pattern: Value error, not a valid regular "
         "expression: missing ), unterminated subpattern at position 0"),
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


@pytest.mark.parametrize(("text", "what"), [("- a\n- b\n", "list"), ("just words\n", "str")])
def test_a_file_that_is_no_mapping_says_what_it_should_hold(tmp_path: Path, text: str,
                                                            what: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert str(info.value) == (f"{path}: cannot read config: the file must be a mapping of "
                               f"sections (server, store, auth, routes), not a {what}")


def test_serve_refuses_a_config_without_routes(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """An empty file loads (every key has a default) but would serve only 404s."""
    from proxy.cli import main

    path = write(tmp_path, "")
    assert main(["serve", "--config", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"ctxwarden: {path}: no routes: add at least one under `routes:` (the shipped "
        "config.yaml has a demo route and commented OpenAI, Anthropic and local ones), or set "
        "CTXWARDEN_ROUTES\n")


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
    # a user's question may take twice the share: its answer is often a few matches down
    assert r.budget(6_900, asks=True) == 1_380
    assert r.budget(1_000, asks=True) == 250  # the same floor, the same cap
    assert RecallSettings(question_budget_fraction=0).budget(6_900, asks=True) == 690
    assert RecallSettings(budget_fraction=0.3).budget(6_900, asks=True) == 2_070
    assert RecallSettings(budget_fraction=0, question_budget_fraction=0).budget(
        6_900, asks=True) == 0
    # ...and twice that where the request evicts twice its room or more
    assert r.budget(6_900, asks=True, out=13_800) == 2_760
    assert r.budget(6_900, asks=True, out=13_799) == 1_380
    assert r.budget(6_900, out=13_800) == 690  # a step that does not ask: its share
    assert RecallSettings(question_budget_far=0).budget(6_900, True, 13_800) == 1_380
    assert RecallSettings(far_history=4).budget(6_900, True, 13_800) == 1_380
    assert RecallSettings(budget_fraction=0, question_budget_fraction=0).budget(
        6_900, True, 13_800) == 0  # no room for recall: none, however far
