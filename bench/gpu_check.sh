#!/usr/bin/env bash
# The prepared GPU check: the CUDA-marked tests and the GPU benchmarks, in well under 8 minutes.
#
# Usage, from the repository root on a machine with a GPU (and CuPy):  bash bench/gpu_check.sh [OUT_DIR]
# OUT_DIR defaults to $OUT when set (the device runner's output folder), else bench/results. It needs no package
# registry: jitorch is imported from this checkout (an existing install, else `pip install -e . --no-deps
# --no-build-isolation`, else a symlinked package tree under a temporary directory). Without a GPU it says "no GPU",
# runs the CPU-side CUDA tests (which must then skip the GPU ones cleanly) and exits 0.
set -uo pipefail
cd "$(dirname "$0")/.."
out_dir="${1:-${OUT:-bench/results}}"
mkdir -p "$out_dir"
log="$out_dir/gpu-check-$(date +%Y-%m-%d).txt"
PY="${PYTHON:-python3}"
start=$SECONDS

ensure_jitorch() {
  if "$PY" -c "import jitorch.runtime, jitorch.codegen" 2>/dev/null; then
    echo "jitorch: importable as installed"
    return
  fi
  if "$PY" -m pip install -q -e . --no-deps --no-build-isolation >/dev/null 2>&1 \
      && "$PY" -c "import jitorch.runtime, jitorch.codegen" 2>/dev/null; then
    echo "jitorch: installed editable (--no-deps)"
    return
  fi
  # No setuptools either: mirror the package layout (jitorch/ with runtime/ and codegen/ inside) with symlinks.
  local shim
  shim="$(mktemp -d)/site"
  mkdir -p "$shim/jitorch"
  for entry in jitorch/*; do ln -s "$PWD/$entry" "$shim/jitorch/"; done
  ln -s "$PWD/runtime" "$shim/jitorch/runtime"
  ln -s "$PWD/codegen" "$shim/jitorch/codegen"
  export PYTHONPATH="$shim${PYTHONPATH:+:$PYTHONPATH}"
  echo "jitorch: imported through a symlinked tree at $shim"
}

{
  echo "# jitorch GPU check, $(date -u)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || echo "nvidia-smi unavailable"
  ensure_jitorch
  "$PY" - <<'EOF'
import importlib
for name in ("numpy", "scipy", "llvmlite", "ml_dtypes", "pytest", "cupy", "matplotlib", "torch"):
    try:
        mod = importlib.import_module(name)
        print(f"{name} {getattr(mod, '__version__', '?')}")
    except Exception as err:  # a missing optional module is reported, not fatal
        print(f"{name} MISSING ({type(err).__name__}: {err})")
EOF
  if "$PY" -c "import sys, jitorch.runtime as r; sys.exit(0 if r.cuda_available() else 1)" 2>/dev/null; then
    gpu=1
    "$PY" -c "import jitorch.cuda as c; print('device:', c.get_device_name(), c.get_device_capability())"
  else
    gpu=0
    echo "no GPU: jitorch.runtime.cuda_available() is False; the cuda-marked tests below must skip"
  fi

  echo "## CUDA tests (GPU suite, CPU-side runtime tests)"
  # Files that need torch as an oracle are added only when torch imports (it is not needed on the GPU machine).
  files="tests/test_cuda_gpu.py tests/test_cuda_graphs_gpu.py tests/test_cuda_runtime.py tests/test_allocator.py"
  if "$PY" -c "import torch" 2>/dev/null; then files="$files tests/test_pointwise.py"; fi
  if "$PY" -c "import torch, hypothesis" 2>/dev/null; then files="$files tests/test_cuda_graphs.py"; fi
  timeout 300 "$PY" -m pytest -q -p no:cacheprovider -p no:randomly --maxfail=25 -rs $files 2>&1 | tail -40
  echo "tests exit status: ${PIPESTATUS[0]}"

  if [ "$gpu" = 1 ]; then
    echo "## NVRTC compile checks"
    timeout 90 "$PY" -m pytest -q -p no:cacheprovider tests/test_codegen_nvrtc.py 2>&1 | tail -5
  fi
  echo "## allocator benchmark (policy on FakeDriver, host buffers; CupyDriver, CuPy pool and torch with a GPU)"
  timeout 150 "$PY" bench/bench_alloc.py 2>&1 | tail -40
  cp bench/results/alloc-*.md "$out_dir/" 2>/dev/null || true
  echo "## CUDA graphs benchmark (RNN cell, 100 steps: graph replay vs eager CUDA; target >= 5x)"
  timeout 120 "$PY" bench/bench_cuda_graphs.py 2>&1 | tail -20
  echo "bench_cuda_graphs exit status: ${PIPESTATUS[0]}"
  cp bench/results/cuda_graphs-*.md "$out_dir/" 2>/dev/null || true
  echo "## elapsed: $((SECONDS - start)) s"
} 2>&1 | tee "$log"
echo "wrote $log"

# Issue 7, CUDA fusion backend: compiled-vs-eager GPU tests and the fused-kernel benchmark (about 2 minutes).
{
  echo "## compiled CUDA kernels (NVRTC cubins via CuPy): tests and fusion benchmark"
  ensure_jitorch  # again: the block above ran in a pipeline subshell, so its PYTHONPATH did not reach this one
  timeout 150 "$PY" -m pytest -q -p no:cacheprovider -p no:randomly -rs tests/test_compile_cuda_gpu.py \
    tests/test_fusion_half_gpu.py tests/test_compile_cuda.py 2>&1 | tail -30
  echo "compile_cuda tests exit status: ${PIPESTATUS[0]}"
  timeout 150 "$PY" bench/bench_fusion_gpu.py 2>&1 | tail -25
  echo "bench_fusion_gpu exit status: ${PIPESTATUS[0]}"
  cp bench/results/fusion_gpu-*.md "$out_dir/" 2>/dev/null || true
  echo "## elapsed after CUDA fusion: $((SECONDS - start)) s"
} 2>&1 | tee -a "$log"
