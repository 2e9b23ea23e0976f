"""Durable context: evicted chunks, the decision log, semantic recall."""

from store.base import EvictedChunk, Event, MemoryStore, Passage, RecallQuery, Store

__all__ = ["EvictedChunk", "Event", "MemoryStore", "Passage", "RecallQuery", "Store"]
