"""Transcendental functions one element at a time: jitorch.compile's inline polynomials against NumPy/SciPy and torch.

Each case is one function over 2^22 float32 returned as a new tensor, at 1 thread: jitorch.compile (one fused LLVM
kernel, `codegen/llvm_math.py`), jitorch eager (its NumPy/SciPy row), NumPy or SciPy directly, torch eager and
torch.compile (compiled before timing). Exact GELU (``F.gelu``, erf form) is included: it is where erf's speed shows
in training (a GPT's MLP). Medians of interleaved samples; ns/element and the ratio to torch.compile.

Run: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_transcendentals.py
"""
from __future__ import annotations

import common

common.single_thread()

import numpy as np  # noqa: E402
import scipy.special  # noqa: E402
import torch  # noqa: E402

import jitorch  # noqa: E402

torch.set_num_threads(1)
jitorch.set_num_threads(1)
N = 1 << 22

CASES = {  # name: (jitorch/torch function of the library, NumPy/SciPy function)
    "exp": (lambda lib, t: lib.exp(t), np.exp),
    "log": (lambda lib, t: lib.log(lib.abs(t) + 1e-3), lambda a: np.log(np.abs(a) + a.dtype.type(1e-3))),
    "tanh": (lambda lib, t: lib.tanh(t), np.tanh),
    "sigmoid": (lambda lib, t: lib.sigmoid(t), scipy.special.expit),
    "erf": (lambda lib, t: lib.erf(t), scipy.special.erf),
    "sin": (lambda lib, t: lib.sin(t), np.sin),
    "gelu (erf)": (lambda lib, t: lib.nn.functional.gelu(t),
                   lambda a: 0.5 * a * (1 + scipy.special.erf(a * a.dtype.type(0.7071067811865476)))),
}


def main():
    data = np.random.default_rng(0).standard_normal(N).astype(np.float32) * 3
    jx, tx = jitorch.tensor(data), torch.tensor(data)
    rows = []
    for name, (fn, ref) in CASES.items():
        compiled = jitorch.compile(lambda t, fn=fn: fn(jitorch, t))
        tcompiled = torch.compile(lambda t, fn=fn: fn(torch, t))
        with jitorch.no_grad(), torch.no_grad():
            exact = ref(data.astype(np.float64))  # the float64 function: both compilers' error
            errors = {"jitorch.compile": float(np.max(np.abs(compiled(jx).numpy() - exact))),
                      "torch.compile": float(np.max(np.abs(tcompiled(tx).numpy() - exact)))}
            times = common.measure({
                "jitorch.compile": lambda: compiled(jx), "jitorch eager": lambda: fn(jitorch, jx),
                "numpy/scipy": lambda: ref(data), "torch eager": lambda: fn(torch, tx),
                "torch.compile": lambda: tcompiled(tx)}, repeats=11, target_s=0.05)
        base = times["torch.compile"]["median_s"]
        for impl, t in times.items():
            rows.append({"case": name, "impl": impl, "ns_per_elem": t["median_s"] / N * 1e9,
                         "x_torch_compile": base / t["median_s"], "max_abs_error": errors.get(impl)})
    notes = (f"One function over 2^{N.bit_length() - 1} float32 (standard normal * 3), a new output per call, 1 "
             "thread; medians of 11 interleaved samples. x torch.compile > 1: faster than torch.compile. "
             "max abs error: against the function in float64 (NumPy/SciPy), for the two compilers.")
    common.report("transcendentals", rows, [("case", "case", "s"), ("impl", "impl", "s"),
                                            ("ns/element", "ns_per_elem", ".2f"),
                                            ("x torch.compile", "x_torch_compile", ".2f"),
                                            ("max abs error", "max_abs_error", ".1e")], notes)


if __name__ == "__main__":
    main()
