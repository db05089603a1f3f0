"""Fused kernels against their peers, 1 and 2 threads, with a copy-bandwidth roofline measured in the same run.

Cases: GELU (tanh form) on 2^24 float32 returned as a new tensor; row softmax and layer norm on 4096x1024 float32.
Implementations: jitorch.compile, jitorch eager, NumPy, torch eager (its native fused kernels: ``F.gelu``,
``torch.softmax``, ``F.layer_norm``), torch.compile (inductor, compiled before timing) and numexpr when installed.
The roofline is ``np.copyto`` of the same bytes (read + write) into a preallocated array. Medians of repeated
calls. Run: ``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_fusion.py``; it writes
bench/results/fusion-<date>.md and .json.
"""
import datetime
import json
import os
import platform
import time

import numpy as np

import jitorch
import jitorch.nn.functional as JF
from jitorch.runtime.threads import set_num_threads

C = 0.7978845608028654
ROWS, COLS = 4096, 1024
NE_GELU = "0.5*x*(1+tanh(0.7978845608028654*(x+0.044715*x*x*x)))"


def gelu(x, tanh=jitorch.tanh):
    return 0.5 * x * (1 + tanh(C * (x + 0.044715 * x * x * x)))


def np_gelu(x):
    return 0.5 * x * (1 + np.tanh(C * (x + 0.044715 * x * x * x)))


def np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_layer_norm(x, w, b):
    mean = x.mean(-1, keepdims=True)
    c = x - mean
    return c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5) * w + b


MINIMA = {}  # (case, threads, impl) -> fastest call in ms: on a shared machine, the least disturbed run


def median_ms(fn, reps, key=None):
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    if key is not None:
        MINIMA[key] = min(times) * 1e3
    return float(np.median(times)) * 1e3


def cases(torch):
    rng = np.random.default_rng(0)
    g = rng.standard_normal(1 << 24, dtype=np.float32)
    m = rng.standard_normal((ROWS, COLS), dtype=np.float32)
    w, b = rng.standard_normal(COLS, dtype=np.float32), rng.standard_normal(COLS, dtype=np.float32)
    jw, jb, tw, tb = jitorch.from_numpy(w), jitorch.from_numpy(b), torch.from_numpy(w), torch.from_numpy(b)
    tgelu = lambda x: 0.5 * x * (1 + torch.tanh(C * (x + 0.044715 * x * x * x)))  # noqa: E731
    try:
        import numexpr
    except ImportError:
        numexpr = None
    out = {
        "gelu 2^24": (g, gelu, np_gelu, lambda x: torch.nn.functional.gelu(x, approximate="tanh"), tgelu,
                      numexpr and (lambda x: numexpr.evaluate(NE_GELU))),
        "softmax 4096x1024": (m, lambda x: x.softmax(-1), np_softmax, lambda x: torch.softmax(x, -1),
                              lambda x: torch.softmax(x, -1), None),
        "layer_norm 4096x1024": (m, lambda x: JF.layer_norm(x, (COLS,), jw, jb), lambda x: np_layer_norm(x, w, b),
                                 lambda x: torch.nn.functional.layer_norm(x, (COLS,), tw, tb),
                                 lambda x: torch.nn.functional.layer_norm(x, (COLS,), tw, tb), None),
    }
    return out


def main():
    import torch
    rows, facts, checks = {}, {"load average at start": os.getloadavg()}, {}
    for name, (data, jfn, nfn, teager, tcomp_fn, nexpr) in cases(torch).items():
        x, xt, dst = jitorch.from_numpy(data), torch.from_numpy(data.copy()), np.empty_like(data)
        compiled = jitorch.compile(jfn)
        t0 = time.perf_counter()
        tcomp = torch.compile(tcomp_fn)
        with torch.no_grad():
            tcomp(xt)
        facts[f"torch.compile cold compile, {name} (s)"] = round(time.perf_counter() - t0, 2)
        reps = 15 if "gelu" in name else 41
        for threads in (1, 2):
            set_num_threads(threads)
            torch.set_num_threads(threads)
            with jitorch.no_grad(), torch.no_grad():
                k = (name, threads)
                r = {"copy roofline": median_ms(lambda: np.copyto(dst, data), reps, k + ("copy roofline",)),
                     "jitorch.compile": median_ms(lambda: compiled(x), reps, k + ("jitorch.compile",)),
                     "jitorch eager": median_ms(lambda: jfn(x), max(3, reps // 3), k + ("jitorch eager",)),
                     "numpy": median_ms(lambda: nfn(data), max(3, reps // 3), k + ("numpy",)),
                     "torch eager (native)": median_ms(lambda: teager(xt), reps, k + ("torch eager (native)",)),
                     "torch.compile": median_ms(lambda: tcomp(xt), reps, k + ("torch.compile",))}
                if nexpr is not None:
                    r["numexpr"] = median_ms(lambda: nexpr(data), reps, k + ("numexpr",))
            nbytes = 2 * data.nbytes
            best = {impl: MINIMA[(name, threads, impl)] for impl in r}
            rows.setdefault(name, {})[threads] = {k: {"ms": v, "GB/s": nbytes / v / 1e6,
                                                      "x torch.compile": r["torch.compile"] / v,
                                                      "roofline fraction": r["copy roofline"] / v,
                                                      "min ms": best[k],
                                                      "min roofline fraction": best["copy roofline"] / best[k]}
                                                  for k, v in r.items()}
        with jitorch.no_grad(), torch.no_grad():
            checks[name] = float(np.abs(compiled(x).numpy() - teager(xt).numpy()).max())
    kernels = {}
    for name, (data, jfn, *_rest) in cases(torch).items():
        report = jitorch.compiler.explain(jfn)(jitorch.from_numpy(data[:4]))
        kernels[name] = report.kernels
    facts["load average at end"] = os.getloadavg()
    facts.update({"date": datetime.date.today().isoformat(), "machine": platform.processor() or platform.machine(),
                  "cpus": os.cpu_count(), "numpy": np.__version__, "torch": torch.__version__,
                  "numexpr": "not installed (not in pyproject's extras)" if cases(torch)["gelu 2^24"][5] is None
                  else "installed", "max |jitorch.compile - torch eager|": checks,
                  "jitorch.compile kernels": kernels})
    out = os.path.join(os.path.dirname(__file__), "results", f"fusion-{facts['date']}")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out + ".json", "w") as f:
        json.dump({"facts": facts, "results": rows}, f, indent=2)
    lines = [f"# Fusion benchmark ({facts['date']})", "", "Medians; GB/s counts one read and one write of the "
             "tensor; `x torch.compile` > 1 means faster than torch.compile; `roofline` is copy time / time; "
             "`min ms` is the fastest call (the least disturbed on a shared machine) and `roofline (minima)` the "
             "same ratio of fastest calls.",
             "", *(f"- {k}: {v}" for k, v in facts.items()), ""]
    for name, by_threads in rows.items():
        lines += [f"## {name}", "", "| threads | impl | ms | GB/s | x torch.compile | roofline | min ms | "
                  "roofline (minima) |", "|---|---|---|---|---|---|---|---|"]
        for t, r in by_threads.items():
            lines += [f"| {t} | {k} | {v['ms']:.2f} | {v['GB/s']:.1f} | {v['x torch.compile']:.2f} | "
                      f"{v['roofline fraction']:.2f} | {v['min ms']:.2f} | {v['min roofline fraction']:.2f} |"
                      for k, v in r.items()]
        lines.append("")
    with open(out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
