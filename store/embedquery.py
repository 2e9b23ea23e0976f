"""In the embedding child (store/embedchild.py): one question's vector through a traced model.

A request may wait for its question's vector (proxy/relate.py). For one short text most
of MiniLM's time is not arithmetic but eager PyTorch calling op after op (and
sentence-transformers around it): measured here on two threads, `encode` of a 15-word
question took 10.9 ms and the model's own forward 9.1. The same transformer traced once
and frozen (`torch.jit.trace`, `torch.jit.freeze`: its graph fixed, its weights constants)
takes 6.7 ms and gives the same vector (cosine 1.0 to `encode`'s at every length tried,
truncated ones included).

Only a single text goes this way: a trace fixes the branches a padded batch would take
(no padding here), and background batches keep `encode`. It is built only for the shape
it computes exactly (a Transformer, mean Pooling, Normalize: all-MiniLM-L6-v2's), and
used only if its vectors for the sample texts agree with `encode`'s (`AGREEMENT`);
anything else (another model, a tracing error, a torch without `jit`) leaves `encode`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

AGREEMENT = 0.9999  # the traced vector's least cosine to `encode`'s, on the samples


def traced_query(st: Any, torch: Any, samples: Sequence[str]
                 ) -> Callable[[str], np.ndarray] | None:
    """A function from one text to its normalized vector (shape (1, dim)), as
    `st.encode([text], normalize_embeddings=True)` computes it, or None (see the
    module)."""
    try:
        return _build(st, torch, samples)
    except Exception:  # any failure to trace: the eager path stays, as it was
        return None


def mean_pooled(st: Any) -> bool:
    """Whether `st` is a Transformer, mean Pooling, Normalize (all-MiniLM-L6-v2's shape):
    the one these paths compute exactly."""
    names = [type(m).__name__ for m in st]
    if names != ["Transformer", "Pooling", "Normalize"]:
        return False
    pooling = st[1]  # sentence-transformers 5: `pooling_mode`; earlier: a flag per mode
    return getattr(pooling, "pooling_mode", None) == "mean" or getattr(
        pooling, "pooling_mode_mean_tokens", False) is True


def _build(st: Any, torch: Any, samples: Sequence[str]) -> Callable[[str], np.ndarray] | None:
    if not mean_pooled(st):
        return None
    model = st[0].auto_model.eval()
    prepare = getattr(st, "preprocess", None) or st.tokenize
    first = prepare([samples[0]])
    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore")  # the tracer's notes on the branches it fixes
        traced = torch.jit.freeze(torch.jit.trace(
            model, (first["input_ids"], first["attention_mask"]), strict=False))

    def one(text: str) -> np.ndarray:
        f = prepare([text])
        mask = f["attention_mask"]
        with torch.inference_mode():
            out = traced(f["input_ids"], mask)
            tokens = out["last_hidden_state"] if isinstance(out, dict) else out[0]
            m = mask.unsqueeze(-1).to(tokens.dtype)
            v = (tokens * m).sum(1) / m.sum(1).clamp(min=1e-9)
            return np.asarray(torch.nn.functional.normalize(v, dim=1), dtype=np.float32)

    exact = np.asarray(st.encode(list(samples), normalize_embeddings=True,
                                 show_progress_bar=False), dtype=np.float32)
    near = np.concatenate([one(s) for s in samples])  # a failure: `traced_query`'s None
    return one if float(np.min(np.sum(exact * near, axis=1))) >= AGREEMENT else None
