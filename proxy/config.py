"""Settings: YAML file, then `CTXWARDEN_*` environment overrides (nested with `__`).

    CTXWARDEN_SERVER__PORT=9000 CTXWARDEN_STORE__PATH=/data ctxwarden serve

Unknown keys and bad values stop start-up with a `ConfigError` naming the key.
"""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
)
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from policies.base import ChunkClass


class ConfigError(Exception):
    """A config that cannot run; the message names the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


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


class StoreSettings(_Strict):
    path: str = "./data/lancedb"  # a directory or an object-store URI (s3://…)
    embedder: str = "sentence-transformers"
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


class UpstreamSettings(_Strict):
    model: str  # LiteLLM model string, e.g. openai/gpt-4o-mini, anthropic/claude-…
    api_base: str | None = None
    api_key: str | None = None
    api_key_env: str | None = None  # read the key from this environment variable
    # Answer from LiteLLM's mock instead of a provider (no key, no network): the demo.
    mock_response: str | None = None
    timeout: float = Field(600.0, gt=0)
    # auto: OpenAI-wire providers go straight over aiohttp, the rest through litellm.acompletion
    transport: Literal["auto", "direct", "litellm"] = "auto"
    extra_headers: dict[str, str] = Field(default_factory=dict)


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
            return json.loads(value)
        return [k.strip() for k in value.split(",") if k.strip()]


class ClassRule(_Strict):
    """First matching rule wins; unset fields match anything."""

    role: str | None = None
    tool: str | None = None  # function name of the call a tool result answers
    pattern: str | None = None  # regular expression searched in the text
    position: Literal["first", "last"] | None = None
    klass: ChunkClass = Field(alias="class")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ClassificationSettings(_Strict):
    rules: list[ClassRule] = Field(default_factory=list)
    bulky_tokens: int = Field(4000, ge=1)  # a tool result this big and log-like is EPHEMERAL


class RecallSettings(_Strict):
    """Recall reads the session's lexical index (proxy/recall.py): a passage of an evicted
    chunk comes back when its strength (BM25 over the query's ideal, in [0, 1]) reaches
    `min_relevance` and its score is within `min_relative` of the session's best match.
    `budget_fraction` of the room is the most a recall may take, and only on turns that
    recall. The defaults are calibrated in docs/design-notes.md."""

    enabled: bool = True
    budget_fraction: float = Field(0.10, ge=0, le=0.5)
    # ...but never less than this many tokens (up to a quarter of the room): a tenth of a
    # small window (270 tokens of a 3,000-token one) holds one passage of JSON, not two
    min_budget_tokens: int = Field(400, ge=0)
    min_relevance: float = Field(0.25, ge=0, le=1)
    min_relative: float = Field(0.5, ge=0, le=1)
    # a user's question (proxy/step.py `asking`) is about what the conversation has
    # seen: its best evicted matches come back at this lower bar
    question_min_relevance: float = Field(0.10, ge=0, le=1)
    top_k: int = Field(8, ge=1)
    # Vectors refine where ready: a passage whose cosine to the step's words reaches this
    # is recalled too (and counts in RWOE's sim); the step's vector is waited for at most
    # vector_wait_ms. 0.5 sits above the noise MiniLM gives unrelated passages (<= 0.46 on
    # the generated sessions, docs/design-notes.md). 0 by default: MiniLM on two cores
    # takes 10-20 ms for a query, so a short wait never got it and a long one costs every
    # question that much; set it for a faster embedder (a GPU, an API within reach).
    min_similarity: float = Field(0.50, ge=-1, le=1)
    vector_wait_ms: int = Field(0, ge=0, le=1000)
    # A question waits for its own vector at most this long, and only where that can pay
    # off: the embedder idle and this session's passages embedded (a paced loop; back to
    # back the embedder lags and no question waits), and no passage matching its own
    # words at min_relevance (then they found it). 0 turns it off. Then its nearest
    # evicted passages by vector (the best 3) come back from this cosine, as its best
    # lexical matches do from question_min_relevance (docs/design-notes.md).
    question_vector_wait_ms: int = Field(60, ge=0, le=1000)
    question_min_similarity: float = Field(0.25, ge=-1, le=1)
    # a question's words also match their related words (store/related.py: "big" finds
    # "large", "growth" finds "grew") whose cosine reaches this; 1 turns it off
    related_words: float = Field(0.35, ge=0.35, le=1)
    cross_session: bool = False
    timeout_ms: int = Field(1000, ge=1)

    def budget(self, room: int) -> int:
        """The most a recall may take of `room` tokens."""
        if self.budget_fraction <= 0:
            return 0
        return max(int(room * self.budget_fraction), min(self.min_budget_tokens, room // 4))


class RouteSettings(_Strict):
    name: str
    model: str = "*"  # glob on the request's `model`
    upstream: UpstreamSettings
    context_window: int | None = Field(None, ge=64)
    max_output_tokens: int = Field(1024, ge=1)
    policy: str = "rwoe"
    policy_params: dict[str, Any] = Field(default_factory=dict)
    watermark: float = Field(0.85, gt=0, le=1)  # evict down to this share of the budget
    # of the window, kept free for a provider counting differently; unset: 1 % where
    # tiktoken has the model's own tokenizer (proxy/tokens.py counts over), else 5 %
    safety_margin: float | None = Field(None, ge=0, lt=0.5)
    classification: ClassificationSettings = Field(default_factory=ClassificationSettings)
    recall: RecallSettings = Field(default_factory=RecallSettings)

    def matches(self, model: str) -> bool:
        """The request's model names this route, or matches its glob."""
        return model == self.name or fnmatch.fnmatchcase(model, self.model)


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
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if cls._yaml_file is not None:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=cls._yaml_file))
        return tuple(sources)

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


def load_settings(path: str | Path | None = None, **overrides: Any) -> Settings:
    """Load YAML (if given) under env overrides; raise ConfigError naming each bad key."""
    yaml_path = Path(path) if path is not None else None
    if yaml_path is not None and not yaml_path.is_file():
        raise ConfigError(f"config file not found: {yaml_path}")
    Settings._yaml_file = yaml_path
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        where = f"{yaml_path}: " if yaml_path else ""
        lines = [f"{_key(e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise ConfigError(where + "invalid config\n  " + "\n  ".join(lines)) from None
    except Exception as exc:  # malformed YAML and the like
        where = f"{yaml_path}: " if yaml_path else ""
        raise ConfigError(f"{where}cannot read config: {exc}") from None
    finally:
        Settings._yaml_file = None
    _check_policies(settings)
    return settings


def _check_policies(settings: Settings) -> None:
    from policies import UnknownPolicy, get_policy

    for i, route in enumerate(settings.routes):
        try:
            get_policy(route.policy, **route.policy_params)
        except UnknownPolicy as exc:
            raise ConfigError(f"routes[{i}].policy: {exc}") from None
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"routes[{i}].policy_params: {exc}") from None
