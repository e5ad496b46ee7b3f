#!/usr/bin/env bash
# Create .venv and install rlft with its dependencies (CPU build of PyTorch pinned first, so no
# CUDA packages are pulled in). Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -m pip install -q "torch==2.13.0" 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -m pip install -q -e ".[dev]" 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -c "import torch, trl, peft, rlft; print(f'rlft {rlft.__version__} ready (torch {torch.__version__}, trl {trl.__version__}, peft {peft.__version__})')"
