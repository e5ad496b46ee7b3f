#!/usr/bin/env bash
# Create .venv and install rlft with its dependencies (CPU build of PyTorch pinned first, so no
# CUDA packages are pulled in). Safe to run again: it only installs what is missing. Quiet unless
# something fails; a failed install stops the script with pip's own error.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# pip's notices (newer pip available, running as root, scripts not on PATH) are not problems here
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore PIP_NO_WARN_SCRIPT_LOCATION=1
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[dev]"
.venv/bin/python -W ignore -c "import torch, trl, peft, rlft; print(f'rlft {rlft.__version__} ready (torch {torch.__version__}, trl {trl.__version__}, peft {peft.__version__})')"
