"""In the embedding child (store/embedchild.py): one question's vector through ONNX Runtime.

A request may wait for its question's vector (proxy/relate.py, at most
`recall.question_vector_wait_ms`). On two cores the traced model (store/embedquery.py)
took 11 ms for a 15-word question; the same transformer exported to ONNX and run by ONNX
Runtime (its graph optimized, two threads) takes 3.9, and gives the same vector (cosine
1.000000 to `encode`'s at every length tried, truncated ones included). For background
batches of passages ONNX Runtime was no faster here (64 passages: 5.5 s either way), so
they keep `encode`.

The export (`torch.onnx.export`, ~1.6 s) is kept in a cache directory, one file per model
and library versions (`$CTXWARDEN_CACHE_DIR`, else `$XDG_CACHE_HOME/ctxwarden`, else
`~/.cache/ctxwarden`), written whole then renamed, so a second child starting at the same
time reads a complete file or writes its own. A cache that cannot be written costs the
export at every start, nothing else. Beside the export go the vectors `encode` gave for
the sample texts it was checked on: with both, the next start runs without torch (store/
embedlean.py). Like the traced model, it is built only for
all-MiniLM-L6-v2's shape (Transformer, mean Pooling, Normalize) and used only if its
vectors for the sample texts agree with `encode`'s (`AGREEMENT`); anything else (no
onnxruntime, an export error) leaves the traced model.
"""

from __future__ import annotations

import hashlib
import io
import os
import warnings
from collections.abc import Callable, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

from store.embedlean import ort_session, pooled, remember
from store.embedquery import AGREEMENT, mean_pooled

OPSET = 17


def cache_dir() -> Path:
    """Where exported models are kept (see the module)."""
    own = os.environ.get("CTXWARDEN_CACHE_DIR")
    if own:
        return Path(own)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "ctxwarden"


def onnx_query(st: Any, torch: Any, model: str, samples: Sequence[str], threads: int
               ) -> Callable[[str], np.ndarray] | None:
    """A function from one text to its normalized vector (shape (1, dim)), as
    `st.encode([text], normalize_embeddings=True)` computes it, or None (see the module)."""
    try:
        return _build(st, torch, model, samples, threads)
    except Exception:  # any failure: the traced model stays, as it was
        return None


def _build(st: Any, torch: Any, model: str, samples: Sequence[str], threads: int
           ) -> Callable[[str], np.ndarray] | None:
    if not mean_pooled(st):
        return None
    prepare = getattr(st, "preprocess", None) or st.tokenize
    source = _exported(st, torch, model, prepare)
    try:
        session = ort_session(source, threads)
    except Exception:
        if not isinstance(source, str):
            raise
        Path(source).unlink(missing_ok=True)  # a cached file that does not load: again
        session = ort_session(_exported(st, torch, model, prepare), threads)

    def one(text: str) -> np.ndarray:
        f = prepare([text])
        ids = f["input_ids"].numpy().astype(np.int64)
        mask = f["attention_mask"].numpy().astype(np.int64)
        return pooled(np.asarray(session.run(None, {"input_ids": ids,
                                                    "attention_mask": mask})[0]), mask)

    exact = np.asarray(st.encode(list(samples), normalize_embeddings=True,
                                 show_progress_bar=False), dtype=np.float32)
    near = np.concatenate([one(s) for s in samples])
    if float(np.min(np.sum(exact * near, axis=1))) < AGREEMENT:
        return None
    if isinstance(source, str):  # the next start can check the export without torch
        remember(source, samples, exact)
    return one


def _exported(st: Any, torch: Any, model: str, prepare: Callable[[list[str]], Any]
              ) -> str | bytes:
    """The transformer in ONNX: the cached file's path, else exported (and cached; its
    bytes where the cache cannot be written)."""
    path = cached_file(model)
    if path.is_file():
        return str(path)
    bert = st[0].auto_model.eval()

    class LastHidden(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, ids: Any, mask: Any) -> Any:
            return self.bert(input_ids=ids, attention_mask=mask).last_hidden_state

    first = prepare(["an example question to export the model with"])
    buf = io.BytesIO()
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
            "tokens": {0: "batch", 1: "seq"}}
    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore")  # the tracer's notes on the branches it fixes
        torch.onnx.export(LastHidden(), (first["input_ids"], first["attention_mask"]), buf,
                          input_names=["input_ids", "attention_mask"],
                          output_names=["tokens"], dynamic_axes=axes, opset_version=OPSET,
                          dynamo=False)
    data = buf.getvalue()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_suffix(f".{os.getpid()}.part")
        part.write_bytes(data)
        os.replace(part, path)
    except OSError:
        return data
    return str(path)


def cached_file(model: str) -> Path:
    """Where `model`'s export is cached (torch is not imported to say so)."""
    key = _key(model, *(version(p) for p in ("torch", "onnx", "onnxruntime")))
    return cache_dir() / f"query-{key}.onnx"


def _key(model: str, *versions: str) -> str:
    """The model (its files' names, sizes and times, where it is a directory) and the
    versions that shape its export."""
    parts = [model, str(OPSET), *versions]
    root = Path(model)
    if root.is_dir():
        for f in sorted(root.rglob("*")):
            if f.is_file():
                s = f.stat()
                parts.append(f"{f.relative_to(root)}:{s.st_size}:{s.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
