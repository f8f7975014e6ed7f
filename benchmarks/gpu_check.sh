#!/usr/bin/env bash
# The prepared GPU check: run from the repository root on a machine with an NVIDIA GPU and a CUDA
# build of torch. It needs transformers >= 5.19 and nothing else of the project's dependencies, and
# downloads nothing. On an offline machine with an older transformers, set GPU_CHECK_WHEELS to a
# folder of wheels (transformers' own, no dependencies): they are put first on the path for this run.
# Usage: gpu_check.sh [OUT.json] [gpu_check.py options, e.g. --budget-s 500]
# Writes OUT.json (default gpu_check.json) after every measurement, and the output to OUT.log.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu_check.json}"
shift || true
mkdir -p "$(dirname "$out")"
python="${PYTHON:-python3}"
if [ -n "${GPU_CHECK_WHEELS:-}" ]; then
    site="$(mktemp -d)"
    "$python" -m pip install -q --no-index --no-deps --no-compile --target "$site" "$GPU_CHECK_WHEELS"/*.whl
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
PYTHONUNBUFFERED=1 "$python" benchmarks/gpu_check.py --out "$out" "$@" 2>&1 | tee "${out%.json}.log"
