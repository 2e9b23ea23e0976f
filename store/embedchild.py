"""The embedding model's own process: what runs there (store/embedproc.py starts it).

It loads the model once (at nice 19: idle CPU only; without torch once the ONNX export
is cached, store/embedlean.py, else on one torch thread), warms the
query lengths a question comes in, then answers `(job id, texts, urgent)` with
`(job id, "ok", vectors)` over its pipe until the pipe closes. An urgent job (a request
waits for it) runs on `URGENT_THREADS`. On Linux the kernel SIGKILLs it when its parent
goes (`PR_SET_PDEATHSIG`), so a child held stopped by a parent then SIGKILLed does not
stay behind.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import multiprocessing
import os
import signal
import sys
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from store.embedlean import lean_model
from store.embedonnx import cached_file, onnx_query
from store.embedquery import traced_query

CAN_PAUSE = sys.platform.startswith("linux")  # PR_SET_PDEATHSIG: the module docstring
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child: the kernel SIGKILLs it when the parent goes (a stopped process takes
    SIGKILL; the pipe's EOF, its other way out, needs it running)."""
    if not CAN_PAUSE:
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    parent = multiprocessing.parent_process()
    if parent is not None and os.getppid() != parent.pid:  # it went before the prctl
        os._exit(0)


PRECISIONS = ("auto", "float32", "bfloat16")
# The default (`store.embed_precision`): bfloat16's process held ~1.3 GB after the bench's
# back-to-back phase where float32's held ~0.75 (docs/design-notes.md)
PRECISION = "float32"
# bfloat16 only where its vectors are float32's: each sample's cosine to its float32
# vector at least this (measured: 0.998 at the 1st percentile of the generated sessions'
# units)
BF16_AGREEMENT = 0.995
QUERY_WORDS = 48  # query lengths warmed up at load (~0.5 s)
# An urgent job (a request waits for it, the proxy idle meanwhile) on two threads: a
# question's vector in 8.6 ms instead of 10.5 in process (bfloat16; float32 10.6 instead
# of 13.2). Background batches keep one: the other core is the proxy's.
URGENT_THREADS = min(2, os.cpu_count() or 1)
_SAMPLE = ["Uvicorn running on http://0.0.0.0:26692 (Press CTRL+C to quit)",
           '{"reservation_id": "OI5L9G", "status": "confirmed", "cabin": "economy"}',
           "How many people took part in that survey?",
           "The survey was fielded online among 6,098 adults in fourteen countries."]
_LONG = " ".join(f"line {i}: status=ok id=a{i:04x}" for i in range(120))  # truncated at 256


def _in_bf16(st: Any, torch: Any, precision: str) -> Any:
    """The model in bfloat16 (weights and all), or None for float32: when asked for, or
    ("auto") where the CPU computes bfloat16 natively (AVX512-BF16, AMX: oneDNN says so)
    and the sample's vectors agree with float32's. Measured here (AVX512-BF16), through
    this process: a unit in a background batch 9.67 -> 5.17 ms; a question's vector
    15.8 -> 11.0 ms back to back, ~15 ms either way after 1.5 s idle (noisy). The vectors
    stay within 0.002 of float32's (a unit's cosine to its own float32 vector: 0.998 at
    the 1st percentile; pairwise cosines within 0.008; the same top 10 for each of four
    questions over 384 units). Elsewhere bfloat16 is emulated, and slower. Not the
    default: the child in bfloat16 held 931 MB after loading where float32's holds 627,
    and 1,324 MB after the bench's back-to-back phase where float32's held 750; neither
    malloc_trim nor a smaller oneDNN primitive cache gave it back (docs/design-notes.md)."""
    if precision == "float32":
        return None
    if precision == "auto":
        try:
            if not torch.ops.mkldnn._is_mkldnn_bf16_supported():
                return None
        except (AttributeError, RuntimeError):  # a torch without the check
            return None
    fast = copy.deepcopy(st).to(torch.bfloat16)
    if precision == "auto":
        exact = st.encode(_SAMPLE, normalize_embeddings=True, show_progress_bar=False)
        near = fast.encode(_SAMPLE, normalize_embeddings=True, show_progress_bar=False)
        agree = np.sum(np.asarray(exact, np.float32) * np.asarray(near, np.float32), axis=1)
        if agree.min() < BF16_AGREEMENT:
            return None
    return fast


def _lean(model: str, precision: str) -> tuple[Any, int] | None:
    """After the first start, where the export and its reference vectors are cached: the
    model without torch (store/embedlean.py; ~360 MB less), warmed up; else None."""
    if precision != "float32":
        return None
    try:
        lean = lean_model(model, str(cached_file(model)), URGENT_THREADS)
        if lean is not None:
            for n in range(1, QUERY_WORDS + 1):  # as below: each length's first run
                lean[0](["word " * n], URGENT_THREADS)
        return lean
    except Exception:
        return None


def child_main(conn: Connection, model: str, batch_size: int,
               precision: str = PRECISION) -> None:
    """Load the model once, then answer (job id, texts, urgent) with (job id, "ok",
    vectors)."""
    _die_with_parent()
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = "1"  # one core at most, before torch loads its thread pools
    # Idle CPU only: with a backlog the model would take a whole core from the proxy (on
    # two cores the agent-loop bench's overhead doubled). At nice 19 the kernel gives a
    # busy proxy ~98 % of a contended core, and the embedder what is left.
    with contextlib.suppress(OSError):
        os.nice(19)
    try:
        # tqdm (every `encode` builds a disabled bar) would make a process-shared lock:
        # a semaphore that this child, killed rather than asked to stop, never unlinks,
        # so the parent's interpreter warned of a "leaked semaphore" at its exit
        from tqdm.std import TqdmDefaultWriteLock

        TqdmDefaultWriteLock.mp_lock = None
    except ImportError:
        pass
    lean = _lean(model, precision)
    if lean is not None:
        conn.send(("ready", (lean[1], "float32", "onnx-only"), os.getpid()))
        _serve(conn, lean[0])
        return
    try:
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(1)
        with contextlib.suppress(RuntimeError):  # already set (a re-used interpreter)
            torch.set_num_interop_threads(1)
        st = SentenceTransformer(model, device="cpu")
        fast = _in_bf16(st, torch, precision)
        if fast is not None:
            st = fast

        # a question alone: through ONNX Runtime, else the traced model, where it computes
        # encode's vectors
        one, queries = None, "eager"
        if fast is None:
            one = onnx_query(st, torch, model, _SAMPLE + [_LONG], URGENT_THREADS)
            queries = "onnx"
            if one is None:
                one, queries = traced_query(st, torch, _SAMPLE + [_LONG]), "traced"
            if one is None:
                queries = "eager"

        def encode(texts: list[str], threads: int = 1) -> Any:
            torch.set_num_threads(threads)
            try:
                if one is not None and len(texts) == 1:
                    return one(texts[0])
                return st.encode(texts, batch_size=batch_size, normalize_embeddings=True,
                                 convert_to_numpy=True, show_progress_bar=False)
            finally:
                torch.set_num_threads(1)

        # A query's first encode at a new length builds that shape's kernels (~3 ms more
        # than the next): build them for the lengths questions come in before the first.
        for n in range(1, QUERY_WORDS + 1):
            encode(["word " * n], URGENT_THREADS)
        conn.send(("ready", (int(st.get_embedding_dimension() or 0),
                             "float32" if fast is None else "bfloat16",
                             queries), os.getpid()))
    except BaseException as exc:
        with contextlib.suppress(Exception):
            conn.send(("fatal", f"{type(exc).__name__}: {exc}"[:500], os.getpid()))
        return
    _serve(conn, encode)


def _serve(conn: Connection, encode: Any) -> None:
    """Answer (job id, texts, urgent) with (job id, "ok", vectors) until the pipe closes."""
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if msg is None:
            return
        job_id, texts, urgent = msg
        answer: tuple[int, str, Any]
        try:
            rows = encode(texts, URGENT_THREADS if urgent else 1)
            answer = (job_id, "ok", np.asarray(rows, dtype=np.float32))
        except Exception as exc:
            answer = (job_id, "error", f"{type(exc).__name__}: {exc}"[:500])
        try:
            conn.send(answer)
        except OSError:  # the parent is gone
            return
