"""In the embedding child (store/embedchild.py): the model without torch, when it can be.

Torch and sentence-transformers are ~360 MB of the child's ~720 MB resident, and after
the first start the child needs neither: the transformer is in ONNX already (store/
embedonnx.py exports it once and caches the file), the tokenizer is the model folder's
`tokenizer.json` (the `tokenizers` library, Rust), and what sentence-transformers adds
for all-MiniLM-L6-v2 is arithmetic: each text stripped, truncated at the model's
`max_seq_length` (256 word pieces), the last hidden states averaged over the attention
mask, the average scaled to length 1.

So a child whose model is a local folder of that shape (Transformer, mean Pooling,
Normalize), run in float32, with the export and the reference vectors its torch start
checked it against (`remember`) in the cache, loads only ONNX Runtime and the tokenizer
(`lean_model`). It checks the reference texts' vectors again before it answers anything
(`AGREEMENT`, as the torch path does); any difference, a missing file or an error leaves
the torch path, as before. Background batches run on one thread, a text alone on
`threads` (two sessions over the same file), as on the torch path. A batch goes one text
a run: here ONNX Runtime took 3.5 s for 64 passages that way, 4.1 s in padded batches
of 8 and 4.9 in one of 64, where torch took 3.0 in batches of 8; the child's resident
memory after a batch is ~310 MB against ~770 (its peak ~310 against ~840), and it is
ready in ~2 s against ~14.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from store.embedquery import AGREEMENT

Encode = Any  # (texts, threads) -> np.ndarray of shape (len(texts), dim)


def reference_path(onnx_file: str) -> Path:
    """Where the reference vectors for an exported model are kept: beside it."""
    return Path(onnx_file).with_suffix(".ref.npz")


def remember(onnx_file: str, texts: Sequence[str], vectors: np.ndarray) -> None:
    """Keep `encode`'s vectors for `texts` beside the export (written whole, then
    renamed); a cache that cannot be written keeps the torch path, nothing else."""
    path = reference_path(onnx_file)
    part = path.with_name(f"{path.name}.{os.getpid()}.part")
    try:
        with open(part, "wb") as f:
            np.savez(f, texts=np.array(list(texts)), vectors=vectors.astype(np.float32))
        os.replace(part, path)
    except OSError:
        part.unlink(missing_ok=True)


def pooled(tokens: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The last hidden states averaged over the attention mask, scaled to length 1: what
    sentence-transformers' Pooling (mean) and Normalize compute (float32)."""
    m = mask[..., None].astype(np.float32)
    v = (tokens * m).sum(1) / np.maximum(m.sum(1), 1e-9)
    return np.asarray(v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12),
                      dtype=np.float32)


def ort_session(source: str | bytes, threads: int) -> Any:
    """An ONNX Runtime session on `threads`, its graph optimized, its threads not spinning
    after a run (they would take the proxy's core between questions), its notes on the
    graph not logged."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def mean_pooled_folder(root: Path) -> int | None:
    """The max_seq_length of a model folder that is Transformer, mean Pooling, Normalize
    and nothing else; None for any other shape."""
    try:
        modules = [m["type"].rsplit(".", 1)[-1] for m in
                   json.loads((root / "modules.json").read_text())]
        pooling = json.loads((root / "1_Pooling" / "config.json").read_text())
        config = json.loads((root / "sentence_bert_config.json").read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return None
    modes = {k: v for k, v in pooling.items() if k.startswith("pooling_mode_")}
    if (modules != ["Transformer", "Pooling", "Normalize"] or config.get("do_lower_case")
            or modes.get("pooling_mode_mean_tokens") is not True
            or any(v for k, v in modes.items() if k != "pooling_mode_mean_tokens")):
        return None
    return int(config.get("max_seq_length") or 0) or None


def lean_model(model: str, onnx_file: str, threads: int) -> tuple[Encode, int] | None:
    """(encode, dim) without torch, or None (see the module)."""
    try:
        return _build(Path(model), onnx_file, threads)
    except Exception:  # any failure: the torch path, as before
        return None


def _build(root: Path, onnx_file: str, threads: int) -> tuple[Encode, int] | None:
    ref = reference_path(onnx_file)
    longest = mean_pooled_folder(root) if root.is_dir() else None
    if longest is None or not Path(onnx_file).is_file() or not ref.is_file():
        return None
    from tokenizers import Tokenizer

    with np.load(ref) as saved:
        texts = [str(t) for t in saved["texts"]]
        exact = np.asarray(saved["vectors"], dtype=np.float32)
    dim = int(exact.shape[1])

    tok = Tokenizer.from_file(str(root / "tokenizer.json"))
    tok.no_padding()  # one text a run: nothing to pad
    tok.enable_truncation(max_length=longest)
    background, urgent = ort_session(onnx_file, 1), ort_session(onnx_file, threads)

    def run(text: str, s: Any) -> np.ndarray:
        e = tok.encode(text.strip())
        ids = np.array([e.ids], dtype=np.int64)
        mask = np.array([e.attention_mask], dtype=np.int64)
        return pooled(np.asarray(s.run(None, {"input_ids": ids, "attention_mask": mask})[0]),
                      mask)

    def encode(texts: list[str], n: int = 1) -> np.ndarray:
        # a text alone on `threads`, as the torch path's session (background ones too: on
        # one thread the backlog lasted longer); a batch one text a run, no padding
        s = urgent if n > 1 or len(texts) == 1 else background
        if not texts:
            return np.zeros((0, dim), dtype=np.float32)
        return np.concatenate([run(t, s) for t in texts])

    near = np.concatenate([encode([t], threads) for t in texts])
    batch = encode(texts)
    if min(float(np.min(np.sum(exact * near, axis=1))),
           float(np.min(np.sum(exact * batch, axis=1)))) < AGREEMENT:
        return None
    return encode, dim
