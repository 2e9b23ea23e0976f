"""Durable context: evicted chunks, the decision log, semantic recall."""

from store.base import Event, EvictedChunk, MemoryStore, Passage, RecallQuery, Store

__all__ = ["EvictedChunk", "Event", "MemoryStore", "Passage", "RecallQuery", "Store"]
