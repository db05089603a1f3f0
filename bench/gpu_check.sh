#!/usr/bin/env bash
# The prepared GPU check: run on the lent device (see DEVELOPERS' guide). It runs the CUDA-marked tests and the
# GPU-relevant benchmarks and keeps the whole output under bench/results/, in well under 8 minutes.
# Usage (from the repository root, on the GPU machine):  bash bench/gpu_check.sh [OUT_DIR]
set -uo pipefail
out_dir="${1:-bench/results}"
mkdir -p "$out_dir"
log="$out_dir/gpu-check-$(date +%Y-%m-%d).txt"
{
  echo "# jitorch GPU check, $(date -u)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || echo "nvidia-smi unavailable"
  python3 -c "import cupy; print('cupy', cupy.__version__, 'devices', cupy.cuda.runtime.getDeviceCount())" 2>&1
  echo "## CUDA-marked tests"
  timeout 300 python3 -m pytest -q -m cuda -p no:cacheprovider tests 2>&1 | tail -40
  echo "## NVRTC compile sweep (cubins for the device's arch are exercised by the codegen tests)"
  timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_codegen_nvrtc.py 2>&1 | tail -5
  echo "## allocator benchmark"
  timeout 120 python3 bench/bench_alloc.py 2>&1 | tail -20
} 2>&1 | tee "$log"
echo "wrote $log"
