"""The environment over the YAML (proxy/config.py's one source of both).

A section's key is `CTXWARDEN_<SECTION>__<KEY>`; a route's is `CTXWARDEN_ROUTES__<i>__<KEY>`,
`i` the route's 0-based index in the YAML's `routes:`. It overrides that key only: the rest
of the route and the other routes stay as the YAML has them. A key's value is read as the
same key's in a section: JSON where the key holds a dict or a list (`POLICY_PARAMS`).
`CTXWARDEN_ROUTES` set to a JSON list replaces the YAML's routes (`ROUTES__<i>__*` then go
unread).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, get_args, get_origin

from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    YamlConfigSettingsSource,
)


def deep_update(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`base` with `over`'s keys, dicts merged key by key (as pydantic-settings merges its
    sources)."""
    out = dict(base)
    for k, v in over.items():
        old = out.get(k)
        out[k] = deep_update(old, v) if isinstance(old, dict) and isinstance(v, dict) else v
    return out


class EnvOverrideError(ValueError):
    """A route's override that matches no route; the message names the variable."""


class _IndexedEnv(EnvSettingsSource):
    """pydantic-settings' environment, where a number under a list names one of its items
    (so `ROUTES__0__POLICY_PARAMS` is decoded as a route's `policy_params`)."""

    def next_field(self, field: FieldInfo | Any | None, key: str,
                   case_sensitive: bool | None = None) -> FieldInfo | None:
        annotation = field.annotation if isinstance(field, FieldInfo) else field
        if key.isascii() and key.isdigit() and get_origin(annotation) is list:
            return get_args(annotation)[0]  # type: ignore[no-any-return]
        return super().next_field(field, key, case_sensitive)


class EnvOverYaml(PydanticBaseSettingsSource):
    """The YAML file's keys (if a file is given) under the environment's."""

    def __init__(self, settings_cls: type[BaseSettings], yaml_file: Path | None) -> None:
        super().__init__(settings_cls)
        self.env = _IndexedEnv(settings_cls)
        self.yaml_file = yaml_file
        self.yaml = None if yaml_file is None \
            else YamlConfigSettingsSource(settings_cls, yaml_file=yaml_file)

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads both sources whole

    def __call__(self) -> dict[str, Any]:
        yaml = self.yaml() if self.yaml is not None else {}
        env = self.env()
        if isinstance(env.get("routes"), dict):
            env["routes"] = self._routes(yaml.get("routes"), env["routes"])
        return deep_update(yaml, env)

    def _routes(self, routes: Any, overrides: dict[str, Any]) -> Any:
        """The YAML's routes with each index's keys overridden."""
        if routes is None:
            routes = []
        if not isinstance(routes, list):
            return routes  # not a list in the YAML: validation names `routes`
        merged = list(routes)
        for index, keys in overrides.items():
            if not (index.isascii() and index.isdigit() and int(index) < len(merged)):
                raise EnvOverrideError(self._no_route(index, len(merged)))
            route = merged[int(index)]
            merged[int(index)] = deep_update(route, keys) \
                if isinstance(route, dict) and isinstance(keys, dict) else keys
        return merged

    def _no_route(self, index: str, count: int) -> str:
        prefix = f"{self.env.env_prefix}routes{self.env.env_nested_delimiter}{index}".upper()
        names = sorted(n for n in os.environ if n.upper() == prefix
                       or n.upper().startswith(f"{prefix}{self.env.env_nested_delimiter}"))
        name = ", ".join(names) or prefix
        if self.yaml_file is None:
            return f"{name}: no config file, so no routes to override"
        has = "no routes" if count == 0 else "1 route (0)" if count == 1 \
            else f"{count} routes (0-{count - 1})"
        number = "" if index.isascii() and index.isdigit() else "a route's index is a number; "
        return f"{name}: {number}{self.yaml_file} has {has}"
