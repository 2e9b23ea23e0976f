"""Defaults that let the proxy start with no network but package registries.

Set before litellm or tiktoken is imported; a value the user set always wins.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path


def configure_offline_defaults() -> None:
    # litellm fetches its model cost map on import unless told to use the bundled one.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if "TIKTOKEN_CACHE_DIR" not in os.environ:
        # litellm ships cl100k_base, o200k_base and p50k_base in the layout tiktoken caches.
        spec = importlib.util.find_spec("litellm")
        if spec is not None and spec.origin is not None:
            cache = Path(spec.origin).parent / "litellm_core_utils" / "tokenizers"
            if cache.is_dir():
                os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
