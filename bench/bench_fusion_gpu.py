"""Fused CUDA kernels against their peers on the GPU: GELU (tanh form) on 2^24 float32, row softmax and layer norm
(affine) on 4096x1024 float32, each returning a new tensor.

Implementations: ``jitorch.compile`` (one NVRTC kernel per pattern, launched through CuPy), jitorch eager (one CuPy
kernel per op), torch eager on CUDA (its native fused kernels: ``F.gelu(approximate="tanh")``, ``torch.softmax``,
``F.layer_norm``) when torch has CUDA, else that column says why not. The roofline is a device-to-device copy of
the same bytes (read + write). Each sample times a loop of calls between two CUDA events on the current stream;
medians of 15 samples. Results are checked against jitorch eager before timing. Without a GPU it says "no GPU" and
exits 0. Run: ``python bench/bench_fusion_gpu.py`` (bench/gpu_check.sh does); writes
bench/results/fusion_gpu-<date>.{md,json}.
"""
from __future__ import annotations

import common

import statistics
import sys
import time

import numpy as np

import jitorch
import jitorch.nn.functional as JF

C = 0.7978845608028654
N_GELU, ROWS, COLS = 1 << 24, 4096, 1024


def gelu(x, tanh=jitorch.tanh):
    return 0.5 * x * (1 + tanh(C * (x + 0.044715 * x * x * x)))


def softmax(x):
    return jitorch.softmax(x, dim=-1)


def layer_norm(x, w, b):
    return JF.layer_norm(x, (COLS,), w, b)


def data():
    rng = np.random.default_rng(0)
    return {"gelu": [rng.standard_normal(N_GELU, np.float32)],
            "softmax": [rng.standard_normal((ROWS, COLS), np.float32)],
            "layer_norm": [rng.standard_normal((ROWS, COLS), np.float32), rng.standard_normal(COLS, np.float32),
                           rng.standard_normal(COLS, np.float32)]}


FNS = {"gelu": gelu, "softmax": softmax, "layer_norm": layer_norm}


def event_time(cupy, fn, samples=15, target_s=0.02):
    """Median seconds per call: each sample runs ``number`` calls between two events on the current stream."""
    fn()
    cupy.cuda.Device().synchronize()
    number, start, end = 1, cupy.cuda.Event(), cupy.cuda.Event()

    def sample(n):
        start.record()
        for _ in range(n):
            fn()
        end.record()
        end.synchronize()
        return cupy.cuda.get_elapsed_time(start, end) / 1e3

    while (elapsed := sample(number)) < target_s:
        number = max(number * 2, int(number * target_s / max(elapsed, 1e-7) * 1.2))
    return statistics.median(sample(number) / number for _ in range(samples))


def torch_cases(arrays):
    torch, note = common.torch_cuda()
    if torch is None:
        return {}, note
    F = torch.nn.functional
    t = {k: [torch.from_numpy(a).cuda() for a in v] for k, v in arrays.items()}
    return {"gelu": lambda: F.gelu(t["gelu"][0], approximate="tanh"),
            "softmax": lambda: torch.softmax(t["softmax"][0], dim=-1),
            "layer_norm": lambda: F.layer_norm(t["layer_norm"][0], (COLS,), t["layer_norm"][1],
                                               t["layer_norm"][2])}, note


def main():
    if not jitorch.cuda.is_available():
        print("no GPU: jitorch.cuda.is_available() is False; nothing to measure")
        return 0
    import cupy

    from jitorch._compile import lower_cuda

    arrays = data()
    torch_fns, torch_note = torch_cases(arrays)
    rows = []
    for case, fn in FNS.items():
        args = [jitorch.from_numpy(a).cuda() for a in arrays[case]]
        compiled = jitorch.compile(fn)
        start = time.perf_counter()
        got = compiled(*args)
        cupy.cuda.Device().synchronize()
        first_s = time.perf_counter() - start
        before = lower_cuda.cuda_kernel_stats()["launches"]
        compiled(*args)
        launches = lower_cuda.cuda_kernel_stats()["launches"] - before
        want = fn(*args)
        np.testing.assert_allclose(got.cpu().numpy(), want.cpu().numpy(), rtol=2e-5, atol=2e-5)
        nbytes = sum(a.nbytes for a in arrays[case]) + want.numel() * 4
        src = cupy.asarray(np.zeros(nbytes // 4, np.float32))
        dst = cupy.empty_like(src)
        impls = {"copy roofline": lambda: cupy.copyto(dst, src), "jitorch.compile": lambda: compiled(*args),
                 "jitorch eager": lambda: fn(*args)}
        if case in torch_fns:
            impls["torch eager"] = torch_fns[case]
        times = {name: event_time(cupy, f) for name, f in impls.items()}
        for name, s in times.items():
            rows.append({"case": case, "impl": name, "ms": s * 1e3, "gb_s": nbytes / s / 1e9,
                         "x_vs_jitorch_eager": times["jitorch eager"] / s,
                         "x_vs_torch": times["torch eager"] / s if "torch eager" in times else None,
                         "kernels": launches if name == "jitorch.compile" else None,
                         "first_call_s": first_s if name == "jitorch.compile" else None})
    columns = [("case", "case", ""), ("impl", "impl", ""), ("ms (median)", "ms", ".3f"), ("GB/s", "gb_s", ".0f"),
               ("x vs jitorch eager", "x_vs_jitorch_eager", ".2f"), ("x vs torch", "x_vs_torch", ".2f"),
               ("kernels/call", "kernels", "d"), ("first call s", "first_call_s", ".2f")]
    notes = (f"GELU on {N_GELU} float32; softmax and layer norm on {ROWS}x{COLS} float32. Medians of 15 event-timed "
             "samples on the current stream. GB/s counts input + output bytes once; the roofline copies as many "
             f"bytes. first call = trace + NVRTC compile (or cache load) + run. Peers: {torch_note}.")
    major, minor = jitorch.cuda.get_device_capability()
    common.report("fusion_gpu", rows, columns, notes, gpu=jitorch.cuda.get_device_name(), arch=f"sm_{major}{minor}",
                  cupy=cupy.__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
