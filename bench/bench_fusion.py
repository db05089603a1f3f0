"""GELU (tanh form) on 2^24 float32: jitorch.compile vs jitorch eager vs NumPy vs torch eager, 1 and 2 threads.

A copy (``np.copyto``) of the same bytes is timed in the same run as the memory roofline. torch.compile is skipped:
it needs a C++ toolchain and minutes of compile time offline. Run: ``python bench/bench_fusion.py``; it writes
bench/results/fusion-<date>.md and .json.
"""
import datetime
import json
import os
import platform
import time

import numpy as np

import jitorch
from jitorch.runtime.threads import set_num_threads

N = 1 << 24
C = 0.7978845608028654


def gelu(x):
    return 0.5 * x * (1 + jitorch.tanh(C * (x + 0.044715 * x * x * x)))


def np_gelu(x):
    return 0.5 * x * (1 + np.tanh(C * (x + 0.044715 * x * x * x)))


def best(fn, reps=5):
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main():
    import torch
    x = jitorch.randn(N)
    xn, xt = x.numpy(), torch.from_numpy(x.numpy().copy())
    compiled = jitorch.compile(gelu)
    dst = np.empty_like(xn)
    rows = {}
    for threads in (1, 2):
        set_num_threads(threads)
        torch.set_num_threads(threads)
        with jitorch.no_grad():
            r = {"copy roofline": best(lambda: np.copyto(dst, xn)), "jitorch.compile": best(lambda: compiled(x)),
                 "jitorch eager": best(lambda: gelu(x), 3), "numpy": best(lambda: np_gelu(xn), 3),
                 "torch eager": best(lambda: torch.nn.functional.gelu(xt, approximate="tanh"))}
        rows[threads] = {k: {"ms": v * 1e3, "GB/s": 2 * 4 * N / v / 1e9} for k, v in r.items()}
    ref = torch.nn.functional.gelu(xt, approximate="tanh").numpy()
    with jitorch.no_grad():
        err = float(np.abs(compiled(x).numpy() - ref).max())
    facts = {"date": datetime.date.today().isoformat(), "machine": platform.processor() or platform.machine(),
             "cpus": os.cpu_count(), "numpy": np.__version__, "torch": torch.__version__, "n": N,
             "max_abs_err_vs_torch": err, "torch.compile": "skipped (offline C++ toolchain compile takes minutes)"}
    out = os.path.join(os.path.dirname(__file__), "results", f"fusion-{facts['date']}")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out + ".json", "w") as f:
        json.dump({"facts": facts, "results": rows}, f, indent=2)
    lines = [f"# GELU fusion, 2^24 float32 ({facts['date']})", "", *(f"- {k}: {v}" for k, v in facts.items()), "",
             "| threads | impl | ms | GB/s (read+write) |", "|---|---|---|---|"]
    for t, r in rows.items():
        lines += [f"| {t} | {k} | {v['ms']:.2f} | {v['GB/s']:.1f} |" for k, v in r.items()]
    with open(out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
