#!/usr/bin/env bash
# The prepared GPU check: run from the repository root on a machine with an NVIDIA GPU and
# the project installed (`pip install -e .`, a CUDA build of torch). Nothing is downloaded.
# Writes gpu_check.json (or $1) and prints one line per part; see benchmarks/gpu_check.py.
set -euo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
PYTHONUNBUFFERED=1 python benchmarks/gpu_check.py --out "${1:-gpu_check.json}"
