"""Hand-written stand-ins for the parts a test cannot make behave on cue.

`FakeEmbedder`: deterministic vectors from a text's hash, computed at once (the store's
and the request path's embedding plumbing without MiniLM). `TopicEmbedder`: vectors from
topic word lists, so a paraphrase with no shared word lands on the same topic (what a
sentence model does, decidably). `read_only`: make a directory tree unwritable.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from store.embed import CachedEmbedder


class FakeEmbedder(CachedEmbedder):
    """Deterministic unit vectors from a text's hash, computed at once: the store's and
    the request path's plumbing (cache, embed_within, …) without MiniLM."""

    name = "fake"

    def answers_now(self) -> bool:
        return True  # it computes at once

    def _start(self, texts: list[str], urgent: bool) -> Future[Any]:
        rows = [np.random.default_rng(int.from_bytes(hashlib.sha256(t.encode()).digest()[:4],
                                                     "little")).normal(size=8) for t in texts]
        done: Future[Any] = Future()
        done.set_result(np.asarray(rows, dtype=np.float32).reshape(len(texts), 8))
        return done


class TopicEmbedder(CachedEmbedder):
    """A text's vector counts its words from each topic's list (one axis per topic, plus
    one for everything else), normalised."""

    name = "topics"

    def answers_now(self) -> bool:
        return True  # it computes at once

    def __init__(self, topics: Mapping[str, Sequence[str]], cache_size: int = 20_000) -> None:
        super().__init__(cache_size)
        self.topics = [set(words) for words in topics.values()]
        self.calls: list[list[str]] = []
        self.waits: list[float] = []  # each `embed_within`'s timeout: a request that waited

    async def embed_within(self, texts: Sequence[str], timeout_s: float) -> Any:
        self.waits.append(timeout_s)
        return await super().embed_within(texts, timeout_s)

    def _start(self, texts: list[str], urgent: bool) -> Future[Any]:
        self.calls.append(list(texts))
        rows = []
        for t in texts:
            words = [w.strip(".,?!:;()").lower() for w in t.split()]
            v = [sum(w in topic for w in words) for topic in self.topics]
            rows.append([*v, 0.2])
        arr = np.asarray(rows, dtype=np.float32)
        arr /= np.linalg.norm(arr, axis=1, keepdims=True)
        done: Future[Any] = Future()
        done.set_result(arr)
        return done


@contextmanager
def read_only(path: Path) -> Iterator[None]:
    """Make a tree unwritable: chmod for a normal user, the immutable flag for root."""
    dirs = [str(p) for p in (path, *path.rglob("*")) if p.is_dir()]
    if os.geteuid() != 0:
        for d in dirs:
            os.chmod(d, 0o555)
        try:
            yield
        finally:
            for d in dirs:
                os.chmod(d, 0o755)
        return
    if subprocess.run(["chattr", "+i", *dirs], capture_output=True).returncode != 0:
        pytest.skip("running as root without chattr +i: cannot make a directory read-only")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", *dirs], check=True)
