"""Settings: YAML file, then `CTXWARDEN_*` environment overrides (nested with `__`; a
route by its index in the YAML's `routes:`, proxy/envconfig.py).

    CTXWARDEN_SERVER__PORT=9000 CTXWARDEN_ROUTES__0__CONTEXT_WINDOW=8000 ctxwarden serve

Unknown keys and bad values stop start-up with a `ConfigError` naming the key, or the
variable where the environment set it. A route's settings (its upstream, window, policy,
classification and recall): proxy/routing.py.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, get_args, get_origin

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from proxy.envconfig import EnvOverrideError, EnvOverYaml, variable_at
from proxy.routing import (
    ClassificationSettings,
    ClassRule,
    RecallSettings,
    RouteSettings,
    UpstreamSettings,
    _Strict,
)

__all__ = ["AuthSettings", "ClassRule", "ClassificationSettings", "ConfigError",
           "RecallSettings", "RouteSettings", "ServerSettings", "Settings", "StoreSettings",
           "UpstreamSettings", "load_settings"]


class ConfigError(Exception):
    """A config that cannot run; the message names the key."""


class ServerSettings(_Strict):
    host: str = "127.0.0.1"
    port: int = Field(8787, ge=1, le=65535)
    max_body_mb: float = Field(32.0, gt=0)
    max_sessions: int = Field(10_000, ge=1)  # in-memory session states kept (LRU)
    # and at most about this much memory for them (proxy/session.py `footprint`): past it
    # the least recently used are dropped; they reload from the store when next seen
    session_memory_mb: int = Field(2048, ge=1)
    # worker processes that measure half of a history sent whole for the first time
    # (proxy/coldpool.py); 0 measures everything in the server's own process
    cold_workers: int = Field(1, ge=0, le=8)
    # the bodies forwarded for each session's last turns, kept in memory (GET /admin/sent,
    # docs/inspector.md); 0 keeps none
    keep_sent: int = Field(8, ge=0)


class StoreSettings(_Strict):
    path: str = "./data/lancedb"  # a directory or an object-store URI (s3://…)
    # "sentence-transformers" (alias "local"): the packaged MiniLM in a child process;
    # "litellm": a hosted model named by embed_model (its key from the provider's own
    # environment variable)
    embedder: Literal["sentence-transformers", "sentence_transformers", "local",
                      "litellm"] = "sentence-transformers"
    embed_model: str = "all-MiniLM-L6-v2"
    # The local model's arithmetic (the default is store/embedchild.py's PRECISION: a
    # test holds them equal). "auto": bfloat16 where the CPU computes it natively and the
    # vectors agree with float32's (~1.9x the throughput, but its process holds ~1.3 GB
    # where float32's holds ~0.75: docs/design-notes.md), else float32
    embed_precision: Literal["auto", "float32", "bfloat16"] = "float32"
    # An object-store URI's options, as LanceDB takes them (docs/deploy.md). S3: endpoint,
    # region, allow_http ("true" for a local http endpoint); keys come from the
    # environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY); GCS and Azure take theirs.
    # Secret: never shown in a settings dump or a log.
    storage_options: dict[str, SecretStr] = Field(default_factory=dict)
    # The write-ahead log that makes an offload durable before LanceDB has it: a local
    # directory, <path>/_wal by default for a directory store. An object-store URI has no
    # local log: every write is committed to the shared store before the request is
    # forwarded, so any replica may serve any turn (docs/design-notes.md). Setting
    # wal_dir with an object-store URI keeps a local log instead: one replica only.
    wal_dir: str | None = None

    @property
    def shared(self) -> bool:
        """Replicas may share this store: an object-store URI without a local log."""
        return "://" in self.path and not self.path.startswith("file://") \
            and self.wal_dir is None

    def options(self) -> dict[str, str] | None:
        return {k: v.get_secret_value() for k, v in self.storage_options.items()} or None


class AuthSettings(_Strict):
    """Who may call (proxy/auth.py). `none` keeps the shipped demo keyless.

    proxy_keys: clients send one of `keys` (Bearer); the upstream key is the route's.
    passthrough: the client's Bearer key is sent upstream as is; its hash is the tenant.
    `*_env` name an environment variable holding comma-separated keys (added to the list).
    Admin keys guard /admin/* and /ui; with none configured the admin API is open in mode
    `none` and closed otherwise.
    """

    mode: Literal["none", "proxy_keys", "passthrough"] = "none"
    keys: Annotated[list[SecretStr], NoDecode] = Field(default_factory=list)
    keys_env: str | None = None
    admin_keys: Annotated[list[SecretStr], NoDecode] = Field(default_factory=list)
    admin_keys_env: str | None = None

    @field_validator("keys", "admin_keys", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        """CTXWARDEN_AUTH__KEYS may be a JSON list or plain comma-separated keys."""
        if not isinstance(value, str):
            return value
        if value.lstrip().startswith("["):
            try:
                return json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"not valid JSON: {exc}") from None
        return [k.strip() for k in value.split(",") if k.strip()]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="CTXWARDEN_", env_nested_delimiter="__", extra="forbid"
    )
    _yaml_file: ClassVar[Path | None] = None

    server: ServerSettings = Field(default_factory=ServerSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    routes: list[RouteSettings] = Field(default_factory=list)

    @field_validator("routes")
    @classmethod
    def _unique_names(cls, routes: list[RouteSettings]) -> list[RouteSettings]:
        seen: set[str] = set()
        for r in routes:
            if r.name in seen:
                raise ValueError(f"duplicate route name {r.name!r}")
            seen.add(r.name)
        return routes

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, EnvOverYaml(settings_cls, cls._yaml_file)

    def route_for(self, model: str) -> RouteSettings | None:
        for r in self.routes:
            if r.matches(model):
                return r
        return None


def _key(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(root)"


def _where(loc: tuple[int | str, ...], overrides: dict[str, Any]) -> tuple[str, bool]:
    """The key at `loc`, or the variable that set its value (and the key, if inside the
    variable's JSON); and whether it is a variable."""
    found = None if loc and loc[0] in overrides else variable_at(Settings, loc)
    if found is None:
        return _key(loc), False
    name, inside = found
    return (f"{name}: {_key(loc)}" if inside else name), True


def _nearest(loc: tuple[int | str, ...]) -> str:
    """' (did you mean port?)' for an unknown key one typo away from a known one."""
    model: Any = Settings
    for part in loc[:-1]:  # down to the model holding the key (a list's index skipped)
        if isinstance(part, int):
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return ""
        model = field.annotation
        args = [a for a in get_args(model) if isinstance(a, type)]
        model = args[0] if get_origin(model) is not None and args else model
    names = list(getattr(model, "model_fields", {}))
    close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else ""


def _invalid(exc: ValidationError, yaml_path: Path | None, overrides: dict[str, Any]) -> str:
    """Each error under the file's key, or under the variable that set its value."""
    lines: dict[bool, list[str]] = {False: [], True: []}
    for e in exc.errors():
        where, in_env = _where(e["loc"], overrides)
        hint = _nearest(e["loc"]) if e["type"] == "extra_forbidden" else ""
        lines[in_env].append(f"{where}: {e['msg']}{hint}")
    blocks: list[str] = []
    if lines[False]:
        where = f"{yaml_path}: " if yaml_path else ""
        blocks.append(f"{where}invalid config\n  " + "\n  ".join(lines[False]))
    if lines[True]:
        blocks.append("invalid environment override\n  " + "\n  ".join(lines[True]))
    return "\n".join(blocks)


def load_settings(path: str | Path | None = None, **overrides: Any) -> Settings:
    """Load YAML (if given) under env overrides; raise ConfigError naming each bad key (or
    the variable that set it)."""
    yaml_path = Path(path) if path is not None else None
    if yaml_path is not None and not yaml_path.is_file():
        raise ConfigError(f"config file not found: {yaml_path}")
    if yaml_path is not None:
        _check_top_level(yaml_path)
    Settings._yaml_file = yaml_path
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(_invalid(exc, yaml_path, overrides)) from None
    except EnvOverrideError as exc:
        raise ConfigError(str(exc)) from None
    except Exception as exc:  # malformed YAML and the like
        where = f"{yaml_path}: " if yaml_path else ""
        raise ConfigError(f"{where}cannot read config: {exc}") from None
    finally:
        Settings._yaml_file = None
    _check_policies(settings, overrides)
    return settings


def _check_top_level(yaml_path: Path) -> None:
    """A file that parses to a list or a scalar says what it should hold, not the
    `dict(...)` error pydantic-settings meets it with. A parse error is left to the load."""
    import yaml

    try:
        top = yaml.safe_load(yaml_path.read_text(encoding="utf-8"))
    except Exception:
        return
    if top is not None and not isinstance(top, dict):
        raise ConfigError(f"{yaml_path}: cannot read config: the file must be a mapping of "
                          f"sections ({', '.join(Settings.model_fields)}), not a "
                          f"{'list' if isinstance(top, list) else type(top).__name__}")


def _check_policies(settings: Settings, overrides: dict[str, Any]) -> None:
    from policies import UnknownPolicy, get_policy

    for i, route in enumerate(settings.routes):
        try:
            get_policy(route.policy, **route.policy_params)
        except UnknownPolicy as exc:
            where, _ = _where(("routes", i, "policy"), overrides)
            raise ConfigError(f"{where}: {exc}") from None
        except (TypeError, ValueError) as exc:
            where, _ = _where(("routes", i, "policy_params"), overrides)
            raise ConfigError(f"{where}: {exc}") from None
