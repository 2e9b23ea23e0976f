"""The environment over the YAML (proxy/config.py's one source of both).

A section's key is `CTXWARDEN_<SECTION>__<KEY>`; a route's is `CTXWARDEN_ROUTES__<i>__<KEY>`,
`i` the route's 0-based index in the YAML's `routes:`. It overrides that key only: the rest
of the route and the other routes stay as the YAML has them. A key's value is read as the
same key's in a section: JSON where the key holds a dict or a list (`POLICY_PARAMS`).
`CTXWARDEN_ROUTES` set to a JSON list replaces the YAML's routes (`ROUTES__<i>__*` then go
unread).

What the environment gets wrong names the variable: a `CTXWARDEN_<X>__…` whose `<X>` is no
section, a value that is not valid JSON, and a value that does not validate
(`variable_at`). Variables without `__` are not the config's (`CTXWARDEN_KEYS` and the
like, named by `auth.*_env`) and are not read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, get_args, get_origin

from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsError,
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
    """An override that cannot be read (no such section, not JSON) or matches no route; the
    message names the variable."""


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
        self._check_sections()
        yaml = self.yaml() if self.yaml is not None else {}
        try:
            env = self.env()
        except SettingsError as exc:
            raise self._not_json(exc) from None
        if isinstance(env.get("routes"), dict):
            env["routes"] = self._routes(yaml.get("routes"), env["routes"])
        return deep_update(yaml, env)

    def _check_sections(self) -> None:
        """Every `CTXWARDEN_<X>__…` names a section: a typo in `<X>` is not ignored."""
        prefix, delimiter = self.env.env_prefix.upper(), self.env.env_nested_delimiter or "__"
        sections = list(self.settings_cls.model_fields)
        bad = sorted(n for n in os.environ if n.upper().startswith(prefix) and delimiter in
                     n[len(prefix):] and n[len(prefix):].split(delimiter)[0].lower()
                     not in sections)
        if bad:
            valid = ", ".join(s.upper() for s in sections)
            raise EnvOverrideError("\n".join(
                f"{n}: {n[len(prefix):].split(delimiter)[0]} is not a config section "
                f"(sections: {valid})" for n in bad))

    def _not_json(self, exc: SettingsError) -> Exception:
        """The variables holding the text pydantic-settings could not decode as JSON."""
        cause = exc.__cause__
        if not isinstance(cause, json.JSONDecodeError):
            return exc
        prefix = self.env.env_prefix.upper()
        names = sorted(n for n, v in os.environ.items()
                       if n.upper().startswith(prefix) and v == cause.doc)
        return EnvOverrideError(f"{', '.join(names) or prefix + '*'}: not valid JSON: {cause}")

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


def variable_at(settings_cls: type[BaseSettings],
                loc: tuple[int | str, ...]) -> tuple[str, bool] | None:
    """The `CTXWARDEN_*` variable that set the value at `loc` (a validation error's), and
    whether `loc` lies inside its value (its JSON); None where the value is the YAML's, or
    the YAML's and the environment's together (a route and the override of one of its keys).
    """
    env = _IndexedEnv(settings_cls)
    parts = [str(p).lower() for p in loc]
    node: Any = env()
    for part in parts:
        if not isinstance(node, dict):
            break  # a list or a value the environment set whole: all of it is the variable's
        if part not in node:
            return None
        node = node[part]
    prefix, delimiter = env.env_prefix.upper(), env.env_nested_delimiter or "__"
    found: list[tuple[int, str]] = []
    for name in os.environ:
        if name.upper().startswith(prefix):
            path = name[len(prefix):].lower().split(delimiter)
            if path == parts[:len(path)]:
                found.append((len(path), name))
    if not found:
        return None
    depth, name = max(found)
    return name, depth < len(parts)
