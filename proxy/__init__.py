"""ctxwarden's proxy: the aiohttp edge, the context pipeline, the upstream boundary."""

from proxy._env import configure_offline_defaults

configure_offline_defaults()
