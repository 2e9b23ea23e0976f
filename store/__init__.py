"""Durable context: evicted chunks, the decision log, semantic recall."""

from store._env import configure_offline_defaults

configure_offline_defaults()  # before any submodule imports tiktoken or an embedder

from store.base import (  # noqa: E402
    Event,
    EvictedChunk,
    MemoryStore,
    Passage,
    RecallQuery,
    Store,
    Turn,
)
from store.errors import StoreError, StoreUnavailable  # noqa: E402

__all__ = ["EvictedChunk", "Event", "MemoryStore", "Passage", "RecallQuery", "Store",
           "StoreError", "StoreUnavailable", "Turn"]
