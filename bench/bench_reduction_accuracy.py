"""Float32 sums, means and batch statistics in eager CPU mode: the cascade (tree) over outer axes against NumPy's order.

NumPy adds a reduced axis outside a kept one row after row (`jitorch/ops/cascade_sum.py`); jitorch now sums those as
a tree, as ATen's cascade sum. Each case times jitorch eager ("tree"), the same call with the tree switched off
("numpy order", jitorch before the change), and torch eager, all at 1 thread, samples interleaved; the relative
errors are against the float64 result. Inputs are rand() + 1000 (float32), where adding in order loses digits.
Contiguous sums over trailing axes take NumPy's pairwise loop either way: their two timings should match.

Run: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/bench_reduction_accuracy.py
"""
from __future__ import annotations

import common

common.single_thread()

import numpy as np  # noqa: E402
import torch  # noqa: E402

import jitorch  # noqa: E402
from jitorch.ops import nn_batch_norm, reduction  # noqa: E402

torch.set_num_threads(1)
jitorch.set_num_threads(1)

CASES = {  # name: (shape, function of the library and a tensor); a channels-last input where named so
    "sum() (4096, 1024)": ((4096, 1024), lambda lib, t: t.sum()),
    "sum(-1) (4096, 1024)": ((4096, 1024), lambda lib, t: t.sum(-1)),
    "mean() (64, 64, 32, 32)": ((64, 64, 32, 32), lambda lib, t: t.mean()),
    "sum(0) (10**6, 4)": ((10**6, 4), lambda lib, t: t.sum(0)),
    "sum(0) (4096, 1024)": ((4096, 1024), lambda lib, t: t.sum(0)),
    "mean(0) (512, 8192)": ((512, 8192), lambda lib, t: t.mean(0)),
    "var(0) (10**6, 4)": ((10**6, 4), lambda lib, t: t.var(0)),
    "mean(0, 2, 3) (64, 64, 32, 32)": ((64, 64, 32, 32), lambda lib, t: t.mean((0, 2, 3))),
    "sum(0, 2, 3) channels-last (64, 64, 32, 32)": ((64, 64, 32, 32), lambda lib, t: t.sum((0, 2, 3))),
    "batch_norm (10**5, 64)": ((10**5, 64), lambda lib, t: lib.nn.functional.batch_norm(t, None, None,
                                                                                       training=True)),
}


_TREES = (reduction._cascaded, nn_batch_norm.sum_rows)


def _numpy_order(enabled):
    """Switch the trees off (the eager kernels before them) or back on."""
    reduction._cascaded = (lambda *a: None) if enabled else _TREES[0]
    nn_batch_norm.sum_rows = (lambda xp, a: a.sum(axis=0)) if enabled else _TREES[1]


def _rel(got, want):
    got = got.detach().float().numpy().astype(np.float64)
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def main():
    gen = np.random.default_rng(0)
    rows = []
    for name, (shape, fn) in CASES.items():
        data = (gen.random(shape, dtype=np.float32) + 1000).astype(np.float32)
        tx = torch.from_numpy(data)
        jx = jitorch.tensor(data)
        if "channels-last" in name:
            tx = tx.contiguous(memory_format=torch.channels_last)
            jx = jx.contiguous(memory_format=jitorch.channels_last)
        want = fn(torch, tx.double()).numpy()

        def numpy_order():
            _numpy_order(True)
            try:
                return fn(jitorch, jx)
            finally:
                _numpy_order(False)
        errors = {"tree": _rel(fn(jitorch, jx), want), "numpy order": _rel(numpy_order(), want),
                  "torch": _rel(fn(torch, tx), want)}
        times = common.measure({"tree": lambda: fn(jitorch, jx), "numpy order": numpy_order,
                                "torch": lambda: fn(torch, tx)}, repeats=15, target_s=0.05)
        base = times["numpy order"]["median_s"]
        for impl, t in times.items():
            rows.append({"case": name, "impl": impl, "ms": t["median_s"] * 1e3, "x_before": t["median_s"] / base,
                         "rel_error": errors[impl]})
    notes = ("float32 rand() + 1000, 1 thread; medians of 15 interleaved samples. time / numpy order < 1: faster "
             "than jitorch before the tree. rel error: max |error| / max |float64 result|.")
    common.report("reduction-accuracy", rows, [("case", "case", "s"), ("impl", "impl", "s"), ("ms", "ms", ".3f"),
                                               ("time / numpy order", "x_before", ".2f"),
                                               ("rel error", "rel_error", ".1e")], notes)


if __name__ == "__main__":
    main()
