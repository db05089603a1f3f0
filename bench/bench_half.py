"""float16 and bfloat16 on the CPU: conversions and everyday ops on 1000x1000 tensors, jitorch against torch and
NumPy, one thread.

Loading float16 weights into a float32 model (``.float()``, ``copy_``), ``model.half()``, and float16 inference
spend their time in conversions. NumPy converts float16 in software, one element at a time; jitorch converts dense
arrays with the host's F16C instructions (``jitorch/ops/half_cast.py``) and computes add/sub/mul/div, comparisons,
relu, clamp and sums on widened copies. bfloat16 (CPU autocast's dtype; ml_dtypes computes it in software) converts,
adds, compares, sums and runs unary rows in generated passes that widen as they load (``jitorch/ops/bf16_*.py``).
A row is the median microseconds per call over interleaved samples;
jitorch/torch < 1: jitorch is faster. NumPy's row is the same conversion or ufunc on the arrays (no tensor).

Run: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_half.py [--name NAME] [name filters...]
"""
from __future__ import annotations

import sys

import common

common.single_thread()

import jitorch  # noqa: E402
import ml_dtypes  # noqa: E402
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
    # bfloat16 (CPU autocast's dtype): ml_dtypes converts and computes in software, an element at a time
    ("float32 -> bfloat16 (.bfloat16())", "f.bfloat16()", "nf.astype(bf16)"),
    ("bfloat16 -> float32 (.float())", "b.float()", "nb.astype(np.float32)"),
    ("copy_ bfloat16 into float32", "z.copy_(b)", "np.copyto(nz, nb)"),
    ("bf16 b + b", "b + b", "nb + nb"),
    ("bf16 b * 2.0", "b * 2.0", None),
    ("bf16 b + 1", "b + 1", None),
    ("bf16 b / c", "b / c", "nb / nc"),
    ("bf16 b > c", "b > c", "nb > nc"),
    ("bf16 sum", "b.sum()", None),
    ("bf16 sum(0)", "b.sum(0)", None),
    ("bf16 mean(-1)", "b.mean(-1)", None),
    ("bf16 b @ b", "b @ b", None),
    ("bf16 linear(b, bs)", "lib.nn.functional.linear(b, bs)", None),
    ("bf16 relu", "b.relu()", None),
    ("bf16 gelu", "lib.nn.functional.gelu(b)", None),
    ("bf16 gelu (tanh)", "lib.nn.functional.gelu(b, approximate='tanh')", None),
    ("bf16 tanh", "b.tanh()", None),
    ("bf16 clamp(-1, 1)", "b.clamp(-1, 1)", None),
    ("bf16 softmax(-1)", "b.softmax(-1)", None),
    ("bf16 layer_norm", "lib.nn.functional.layer_norm(b, (N,), b[0], b[1])", None),
]


def _setup(lib):
    gen = np.random.default_rng(0)
    nf = gen.standard_normal((N, N)).astype(np.float32)
    nh, nu = nf.astype(np.float16), gen.standard_normal((N, N)).astype(np.float16)
    f, h, u = lib.tensor(nf), lib.tensor(nh), lib.tensor(nu)
    nb, nc = nf.astype(ml_dtypes.bfloat16), nu.astype(np.float32).astype(ml_dtypes.bfloat16)
    # (bfloat16 tensors from float32 ones: torch.tensor does not take ml_dtypes arrays)
    b, c = lib.tensor(nf).bfloat16(), lib.tensor(nu.astype(np.float32)).bfloat16()
    return dict(lib=lib, np=np, N=N, bf16=ml_dtypes.bfloat16, f=f, h=h, u=u, hs=h[:256, :256].contiguous(),
                b=b, c=c, bs=b[:256].contiguous(), z=lib.empty(N, N),
                nf=nf, nh=nh, nu=nu, nb=nb, nc=nc, nz=np.empty((N, N), np.float32))


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
             f"{N}x{N} float16 (bf16 rows: bfloat16) operands unless named. jitorch/torch < 1: jitorch is faster. "
             "The machine is shared: "
             "ratios, not absolute times.")
    common.report(name, rows, columns, notes, jitorch=jitorch.__version__, torch=torch.__version__,
                  numpy=np.__version__)


if __name__ == "__main__":
    main()
