"""float16 on the CPU: conversions and everyday ops on 1000x1000 tensors, jitorch against torch and NumPy, one thread.

Loading float16 weights into a float32 model (``.float()``, ``copy_``), ``model.half()``, and float16 inference
spend their time in conversions. NumPy converts float16 in software, one element at a time; jitorch converts dense
arrays with the host's F16C instructions (``jitorch/ops/half_cast.py``) and computes add/sub/mul/div, comparisons,
relu, clamp and sums on widened copies. A row is the median microseconds per call over interleaved samples;
jitorch/torch < 1: jitorch is faster. NumPy's row is the same conversion or ufunc on the arrays (no tensor).

Run: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_half.py [--name NAME] [name filters...]
"""
from __future__ import annotations

import sys

import common

common.single_thread()

import jitorch  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

common.single_thread()

N = 1000
# (case, library statement, NumPy statement or None)
CASES = [
    ("float32 -> float16 (.half())", "f.half()", "nf.astype(np.float16)"),
    ("float16 -> float32 (.float())", "h.float()", "nh.astype(np.float32)"),
    ("float16 -> float64 (.double())", "h.double()", "nh.astype(np.float64)"),
    ("copy_ float16 into float32", "z.copy_(h)", "np.copyto(nz, nh)"),
    ("h + h", "h + h", "nh + nh"),
    ("h * 2.0", "h * 2.0", "nh * np.float16(2.0)"),
    ("h + 1", "h + 1", "nh + np.float16(1)"),
    ("h > u", "h > u", "nh > nu"),
    ("relu", "h.relu()", "np.maximum(np.float16(0), nh)"),
    ("clamp(-1, 1)", "h.clamp(-1, 1)", "np.clip(nh, np.float16(-1), np.float16(1))"),
    ("sigmoid", "h.sigmoid()", None),
    ("sum", "h.sum()", "nh.sum(dtype=np.float32).astype(np.float16)"),
    ("mean(-1)", "h.mean(-1)", "nh.mean(-1, dtype=np.float32).astype(np.float16)"),
    ("h @ h (256x256)", "hs @ hs", None),
]


def _setup(lib):
    gen = np.random.default_rng(0)
    nf = gen.standard_normal((N, N)).astype(np.float32)
    nh, nu = nf.astype(np.float16), gen.standard_normal((N, N)).astype(np.float16)
    f, h, u = lib.tensor(nf), lib.tensor(nh), lib.tensor(nu)
    return dict(lib=lib, np=np, f=f, h=h, u=u, hs=h[:256, :256].contiguous(), z=lib.empty(N, N),
                nf=nf, nh=nh, nu=nu, nz=np.empty((N, N), np.float32))


def _timer(stmt, env):
    code = compile(stmt, "<case>", "exec")
    return lambda: exec(code, env)


def main():
    args = sys.argv[1:]
    name = "half"
    if args[:1] == ["--name"]:
        name, args = args[1], args[2:]
    envs = {"jitorch": _setup(jitorch), "torch": _setup(torch)}
    rows = []
    for case, stmt, numpy_stmt in CASES:
        if args and not any(f in case for f in args):
            continue
        fns = {lib: _timer(stmt, env) for lib, env in envs.items()}
        if numpy_stmt is not None:
            fns["numpy"] = _timer(numpy_stmt, envs["jitorch"])
        timings = common.measure(fns, repeats=7, target_s=0.02)
        j, t = timings["jitorch"]["median_s"] * 1e6, timings["torch"]["median_s"] * 1e6
        n = timings["numpy"]["median_s"] * 1e6 if "numpy" in timings else None
        rows.append({"case": case, "jitorch_us": j, "torch_us": t, "numpy_us": n, "ratio": j / t})
        print(f"  {case:34s} {j:9.1f} {t:9.1f} {n if n is not None else float('nan'):9.1f} {j / t:6.2f}", flush=True)
    columns = [("case", "case", ""), ("jitorch (us)", "jitorch_us", ".1f"), ("torch (us)", "torch_us", ".1f"),
               ("NumPy (us)", "numpy_us", ".1f"), ("jitorch/torch", "ratio", ".2f")]
    notes = ("Median microseconds per call over 7 interleaved samples of ~20 ms, one thread for every library, "
             f"{N}x{N} float16 operands unless named. jitorch/torch < 1: jitorch is faster. The machine is shared: "
             "ratios, not absolute times.")
    common.report(name, rows, columns, notes, jitorch=jitorch.__version__, torch=torch.__version__,
                  numpy=np.__version__)


if __name__ == "__main__":
    main()
