"""What the environment gets wrong names the variable, not the file: a section that does
not exist, a value that does not validate, a value that is not JSON, an unknown policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.config import ConfigError, load_settings

ROUTES = """
routes:
  - name: small
    upstream: {model: openai/small, api_base: "http://127.0.0.1:9100/v1", api_key: sk-test}
    policy: rwoe
"""
POLICIES = "decay, hybrid, lfu, lru, mask, none, rwoe, rwoe-r, truncate"
SECTIONS = "(sections: SERVER, STORE, AUTH, ROUTES)"


def write(tmp_path: Path, text: str = ROUTES) -> Path:
    p = tmp_path / "config.yaml"
    p.write_text(text)
    return p


def error(path: Path | None = None) -> str:
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    return str(info.value)


@pytest.mark.parametrize(("name", "message"), [
    ("CTXWARDEN_SERVERR__PORT", f"SERVERR is not a config section {SECTIONS}"),
    ("CTXWARDEN_ROUTE__0__POLICY", f"ROUTE is not a config section {SECTIONS}"),
    ("ctxwarden_auths__mode", f"auths is not a config section {SECTIONS}"),
])
def test_a_variable_naming_no_section_stops_start_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, message: str) -> None:
    monkeypatch.setenv(name, "1")
    assert error(write(tmp_path)) == f"{name}: {message}"
    assert error() == f"{name}: {message}"  # with no file too


def test_every_variable_naming_no_section_is_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXWARDEN_STOER__PATH", "/data")
    monkeypatch.setenv("CTXWARDEN_SERVERR__PORT", "1")
    assert error() == (f"CTXWARDEN_SERVERR__PORT: SERVERR is not a config section {SECTIONS}\n"
                       f"CTXWARDEN_STOER__PATH: STOER is not a config section {SECTIONS}")


def test_variables_without_the_delimiter_are_not_the_configs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Users' key variables (named by auth.*_env) and the CLI's are not sections."""
    for name in ("CTXWARDEN_KEYS", "CTXWARDEN_ADMIN_KEYS", "CTXWARDEN_CLIENT_KEYS",
                 "CTXWARDEN_API_KEY", "CTXWARDEN_ADMIN_KEY", "CTXWARDEN_CHROMIUM",
                 "CTXWARDEN_UPDATE_SCREENSHOT"):
        monkeypatch.setenv(name, "k1,k2")
    monkeypatch.setenv("CTXWARDEN_SERVER__PORT", "9000")
    assert load_settings(write(tmp_path)).server.port == 9000


@pytest.mark.parametrize(("name", "value", "message"), [
    ("CTXWARDEN_SERVER__PROT", "9000",
     "CTXWARDEN_SERVER__PROT: Extra inputs are not permitted (did you mean port?)"),
    ("CTXWARDEN_ROUTES__0__CONTEXT_WINDOW", "abc",
     "CTXWARDEN_ROUTES__0__CONTEXT_WINDOW: Input should be a valid integer, unable to parse "
     "string as an integer"),
    ("CTXWARDEN_AUTH__MODE", "passthru",
     "CTXWARDEN_AUTH__MODE: Input should be 'none', 'proxy_keys' or 'passthrough'"),
    ("CTXWARDEN_ROUTES__0__CLASSIFICATION__RULES", '[{"tool": 1, "class": "EPHEMERAL"}]',
     "CTXWARDEN_ROUTES__0__CLASSIFICATION__RULES: routes[0].classification.rules[0].tool: "
     "Input should be a valid string"),
    ("CTXWARDEN_ROUTES", '[{"name": "a"}]', "CTXWARDEN_ROUTES: routes[0].upstream: Field required"),
    ("CTXWARDEN_AUTH__KEYS", "[1,",
     "CTXWARDEN_AUTH__KEYS: Value error, not valid JSON: Expecting value: line 1 column 4 "
     "(char 3)"),
])
def test_a_bad_value_from_the_environment_names_the_variable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, value: str,
        message: str) -> None:
    monkeypatch.setenv(name, value)
    assert error(write(tmp_path)) == "invalid environment override\n  " + message


def test_a_misspelled_embedder_names_its_variable_and_the_choices(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It was any string until the store was built, which raised UnknownEmbedder out of
    `serve` as a traceback naming neither the key nor the variable."""
    monkeypatch.setenv("CTXWARDEN_STORE__EMBEDDER", "sentence-transfomers")
    assert error(write(tmp_path)) == (
        "invalid environment override\n  CTXWARDEN_STORE__EMBEDDER: Input should be "
        "'sentence-transformers', 'sentence_transformers', 'local' or 'litellm'")
    path = write(tmp_path, "store: {embedder: minilm}\n" + ROUTES)
    monkeypatch.delenv("CTXWARDEN_STORE__EMBEDDER")
    assert error(path) == (
        f"{path}: invalid config\n  store.embedder: Input should be "
        "'sentence-transformers', 'sentence_transformers', 'local' or 'litellm'")


def test_errors_of_the_file_and_of_the_environment_are_told_apart(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A key the file sets stays the file's, even under a variable that sets its section's
    other keys (a JSON object is merged into the file's section)."""
    path = write(tmp_path, "server: {prot: 1}\n" + ROUTES.replace("    policy: rwoe\n", ""))
    monkeypatch.setenv("CTXWARDEN_SERVER", '{"port": 9000}')
    monkeypatch.setenv("CTXWARDEN_ROUTES__0__WATERMARK", "2")
    assert error(path) == (
        f"{path}: invalid config\n"
        "  server.prot: Extra inputs are not permitted (did you mean port?)\n"
        "invalid environment override\n"
        "  CTXWARDEN_ROUTES__0__WATERMARK: Input should be less than or equal to 1")


def test_the_file_alone_is_blamed_as_before(tmp_path: Path) -> None:
    path = write(tmp_path, "server: {prot: 1}\n")
    assert error(path) == (f"{path}: invalid config\n  server.prot: Extra inputs are not "
                           "permitted (did you mean port?)")


@pytest.mark.parametrize(("name", "value", "position"), [
    ("CTXWARDEN_ROUTES__0__RECALL", '{"enabled": fals}', "line 1 column 13 (char 12)"),
    ("CTXWARDEN_ROUTES", "[{", "line 1 column 3 (char 2)"),
    ("CTXWARDEN_STORE__STORAGE_OPTIONS", '{"region": "eu"', "line 1 column 16 (char 15)"),
])
def test_a_value_that_is_not_json_names_the_variable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, value: str,
        position: str) -> None:
    monkeypatch.setenv(name, value)
    message = error(write(tmp_path))
    assert message.startswith(f"{name}: not valid JSON: ") and message.endswith(position)
    assert "config.yaml" not in message and value not in message  # a value may be a secret


def test_an_unknown_policy_lists_the_registered_and_names_the_variable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, ROUTES.replace("policy: rwoe", "policy: rwo"))
    assert error(path) == f"routes[0].policy: Unknown policy: rwo (registered: {POLICIES})"
    monkeypatch.setenv("CTXWARDEN_ROUTES__0__POLICY", "lfru")
    assert error(path) == \
        f"CTXWARDEN_ROUTES__0__POLICY: Unknown policy: lfru (registered: {POLICIES})"


def test_serve_exits_2_naming_the_variable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from proxy.cli import main

    path = write(tmp_path)
    monkeypatch.setenv("CTXWARDEN_SERVERR__PORT", "1")
    assert main(["serve", "--config", str(path)]) == 2
    assert capsys.readouterr().err == \
        f"ctxwarden: CTXWARDEN_SERVERR__PORT: SERVERR is not a config section {SECTIONS}\n"
    monkeypatch.delenv("CTXWARDEN_SERVERR__PORT")
    monkeypatch.setenv("CTXWARDEN_SERVER__PROT", "9000")
    assert main(["serve", "--config", str(path)]) == 2
    assert capsys.readouterr().err == ("ctxwarden: invalid environment override\n"
                                       "  CTXWARDEN_SERVER__PROT: Extra inputs are not "
                                       "permitted (did you mean port?)\n")


def test_an_unknown_key_one_typo_away_names_the_known_one(tmp_path: Path) -> None:
    path = write(tmp_path, """
sever: {port: 1}
routes:
  - name: a
    model: "a-*"
    upstream: {model: openai/gpt-4o, api_base: "http://127.0.0.1:9/v1", api_key: k}
    context_windw: 8000
    recall: {min_relevanc: 0.3, zzz: 1}
""")
    assert error(path).splitlines()[1:] == [
        "  routes[0].recall.min_relevanc: Extra inputs are not permitted (did you mean "
        "min_relevance?)",
        "  routes[0].recall.zzz: Extra inputs are not permitted",  # nothing near it
        "  routes[0].context_windw: Extra inputs are not permitted (did you mean "
        "context_window?)",
        "  sever: Extra inputs are not permitted (did you mean server?)"]
