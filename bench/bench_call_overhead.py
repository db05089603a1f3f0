"""What one call of a compiled function or module costs beyond its kernels: jitorch.compile against torch.compile
and both eager modes, on inputs so small that the call's own Python (guards, argument checks, output wrapping) is
most of the time. Training loops of small models on the CPU pay this on every step.

Cases (no grad, one thread): ``exp`` of 16 float32; a Linear(16)-GELU-Linear(16) module on a 4x16 batch; twelve
Linear(16)-LayerNorm-GELU blocks on the same batch (a deeper module tree: more modules and parameters to guard).

Run: ``python bench/bench_call_overhead.py``. Prints a table and writes ``bench/results/call-overhead-<date>.*``.
"""
from __future__ import annotations

import common

common.single_thread()  # before NumPy and torch load their thread pools

import numpy as np  # noqa: E402
import torch  # noqa: E402

import jitorch  # noqa: E402

common.single_thread()


def _models(lib, seed):
    lib.manual_seed(seed)
    nn = lib.nn
    mlp = nn.Sequential(nn.Linear(16, 16), nn.GELU(), nn.Linear(16, 16))
    deep = nn.Sequential(*[nn.Sequential(nn.Linear(16, 16), nn.LayerNorm(16), nn.GELU()) for _ in range(12)])
    return mlp, deep


def build_cases():
    """``[(case, {impl: fn})]`` and the results each implementation gave (checked to agree)."""
    x16 = np.random.default_rng(0).standard_normal(16).astype(np.float32)
    batch = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    cases = {"exp, 16 elem": {}, "Linear-GELU-Linear, 4x16": {}, "12 x (Linear-LayerNorm-GELU), 4x16": {}}
    values = {}
    t_mlp, t_deep = _models(torch, 0)
    j_mlp, j_deep = _models(jitorch, 0)
    for (t_p, j_p) in zip([*t_mlp.parameters(), *t_deep.parameters()], [*j_mlp.parameters(), *j_deep.parameters()]):
        j_p.data.copy_(jitorch.from_numpy(t_p.detach().numpy().copy()))
    for lib, mlp, deep in ((torch, t_mlp, t_deep), (jitorch, j_mlp, j_deep)):
        name = lib.__name__
        x, b = lib.from_numpy(x16), lib.from_numpy(batch)
        exp = lib.compile(lambda a: a.exp())
        c_mlp, c_deep = lib.compile(mlp), lib.compile(deep)
        for case, eager, compiled, arg in (("exp, 16 elem", lambda a: a.exp(), exp, x),
                                           ("Linear-GELU-Linear, 4x16", mlp, c_mlp, b),
                                           ("12 x (Linear-LayerNorm-GELU), 4x16", deep, c_deep, b)):
            for _ in range(3):  # compile, then plan the native program (jitorch's second call)
                compiled(arg)
            cases[case][f"{name} eager"] = lambda f=eager, a=arg: f(a)
            cases[case][f"{name}.compile"] = lambda f=compiled, a=arg: f(a)
            values[(case, name)] = compiled(arg).detach().numpy()
    for case in cases:
        np.testing.assert_allclose(values[(case, "jitorch")], values[(case, "torch")], rtol=1e-4, atol=1e-5)
    return list(cases.items())


def main():
    rows = []
    with torch.no_grad(), jitorch.no_grad():
        for case, fns in build_cases():
            timings = common.measure(fns, repeats=21)
            row = {"case": case}
            for impl, timing in timings.items():
                row[impl] = timing["median_s"] * 1e6
            row["jitorch.compile / torch.compile"] = row["jitorch.compile"] / row["torch.compile"]
            row["jitorch.compile / jitorch eager"] = row["jitorch.compile"] / row["jitorch eager"]
            rows.append(row)
            print(f"  {case}: done", flush=True)
    keys = ["torch eager", "torch.compile", "jitorch eager", "jitorch.compile"]
    columns = [("case", "case", "")] + [(f"{k} (us)", k, ".2f") for k in keys] + [
        ("jitorch.compile / torch.compile", "jitorch.compile / torch.compile", ".2f"),
        ("jitorch.compile / jitorch eager", "jitorch.compile / jitorch eager", ".2f")]
    notes = ("Median microseconds per call over 21 interleaved samples (each loops ~10 ms), no grad, one thread; "
             "ratios below 1 mean jitorch.compile's call is cheaper. Inputs are tiny on purpose: the numbers are "
             "each library's per-call cost, not its kernels' speed.")
    common.report("call-overhead", rows, columns, notes)


if __name__ == "__main__":
    main()
