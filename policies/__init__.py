"""Eviction policies, registered by name.

Built-ins register through the same `register` decorator a plug-in would use:

    from policies import Policy, register

    @register
    class MyPolicy(Policy):
        name = "mine"
        def priority(self, chunk, ctx): ...

`get_policy("rwoe", **params)` builds one; an unknown name raises `UnknownPolicy`
("Unknown policy: X (registered: …)", the registered names sorted).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from typing import Any

from policies.base import Chunk, ChunkClass, Policy, PolicyContext, Ranked

_REGISTRY: dict[str, type[Policy]] = {}


class UnknownPolicy(ValueError):
    def __init__(self, name: str, registered: Iterable[str] = ()) -> None:
        names = ", ".join(sorted(registered))
        super().__init__(f"Unknown policy: {name}" + (f" (registered: {names})" if names else ""))
        self.name = name


def register(cls: type[Policy]) -> type[Policy]:
    if not cls.name:
        raise ValueError(f"{cls.__qualname__} has no name")
    _REGISTRY[cls.name] = cls
    return cls


def available() -> list[str]:
    _load_builtins()
    return sorted(_REGISTRY)


def get_policy(name: str, **params: Any) -> Policy:
    _load_builtins()
    try:
        cls = _REGISTRY[name]
    except KeyError:
        raise UnknownPolicy(name, _REGISTRY) from None
    options = inspect.signature(cls).parameters.values()
    if not any(o.kind is o.VAR_KEYWORD for o in options):
        unknown = sorted(set(params) - {o.name for o in options})
        if unknown:  # say which options the policy has, not Python's __init__ TypeError
            known = ", ".join(o.name for o in options) or "none"
            raise TypeError(f"policy {name!r} has no option {', '.join(unknown)} "
                            f"(its options: {known})")
    return cls(**params)


def _load_builtins() -> None:
    # Imported lazily so `policies.base` stays importable on its own.
    from policies import decay, hybrid, lfu, lru, mask, none, rwoe, truncate  # noqa: F401


__all__ = [
    "Chunk",
    "ChunkClass",
    "Policy",
    "PolicyContext",
    "Ranked",
    "UnknownPolicy",
    "available",
    "get_policy",
    "register",
]
