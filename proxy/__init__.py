"""ctxwarden's proxy: the aiohttp edge, the context pipeline, the upstream boundary."""

# The offline defaults (litellm's bundled cost map and tokenizers, HF offline) are set by
# the store package, which the proxy depends on anyway: one copy, before litellm loads.
import store  # noqa: F401
