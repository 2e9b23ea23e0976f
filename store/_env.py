"""Defaults that let the store run with no network but package registries.

Set before tiktoken, sentence-transformers or litellm is imported (store/__init__.py runs
this first, so every `store.*` import has it); a value the user set always wins. The
proxy sets the same for itself: the store must not import the proxy to get them.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path


def configure_offline_defaults() -> None:
    # litellm (the LiteLLM embedder) fetches its model cost map on import unless told not to.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # A progress bar on stderr would break the one-JSON-line-per-event log.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "TIKTOKEN_CACHE_DIR" not in os.environ:
        # litellm ships cl100k_base, o200k_base and p50k_base in the layout tiktoken caches
        # (store/split.py counts passage tokens with cl100k_base).
        spec = importlib.util.find_spec("litellm")
        if spec is not None and spec.origin is not None:
            cache = Path(spec.origin).parent / "litellm_core_utils" / "tokenizers"
            if cache.is_dir():
                os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
