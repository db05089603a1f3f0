"""Per-sample gradients with ``vmap(grad(loss))``: jitorch's batched path and its per-sample loop vs torch.func.

The loss is cross-entropy on one sample (the torch.func tutorial's pattern) of an MLP 32-64-10, or of a small CNN
on 28x28 images (conv 3x3 to 8 channels, ReLU, max-pool 2, conv 3x3 padded, ReLU, linear to 10); parameters passed
through ``functional_call``; one thread. "loop" forces jitorch's sample-by-sample path (every batch below the
batched path's minimum).

    env -u OPENBLAS_CORETYPE python bench/bench_vmap.py [--repeats 11] [--target-s 0.05]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.single_thread()

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import jitorch  # noqa: E402
import jitorch._vmap as jitorch_vmap  # noqa: E402

common.single_thread()


def per_sample_grads(lib, batch, model_name="mlp"):
    lib.manual_seed(0)
    nn = lib.nn
    if model_name == "mlp":
        model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
        x = lib.randn(batch, 32)
    else:
        model = nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1),
                              nn.ReLU(), nn.Flatten(), nn.Linear(8 * 13 * 13, 10))
        x = lib.randn(batch, 1, 28, 28)
    params = {k: v.detach() for k, v in model.named_parameters()}
    y = lib.randint(0, 10, (batch,))

    def loss(p, xb, yb):
        return lib.nn.functional.cross_entropy(lib.func.functional_call(model, p, (xb[None],)), yb[None])
    grads = lib.func.vmap(lib.func.grad(loss), in_dims=(None, 0, 0))
    return lambda: grads(params, x, y)


def _looping(fn):
    def run():
        saved, jitorch_vmap.MIN_BATCH = jitorch_vmap.MIN_BATCH, 1 << 62
        try:
            return fn()
        finally:
            jitorch_vmap.MIN_BATCH = saved
    return run


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=11)
    p.add_argument("--target-s", type=float, default=0.05)
    a = p.parse_args()
    rows = []
    for model_name, batch in (("mlp", 8), ("mlp", 64), ("mlp", 256), ("cnn", 16), ("cnn", 64)):
        fns = {lib_name: fn(per_sample_grads(lib, batch, model_name)) for lib_name, lib, fn in (
            ("torch.func", torch, lambda f: f), ("jitorch", jitorch, lambda f: f),
            ("jitorch loop", jitorch, _looping))}
        r = common.measure(fns, repeats=a.repeats, target_s=a.target_s)
        t, j, lp = (r[k]["median_s"] * 1e3 for k in ("torch.func", "jitorch", "jitorch loop"))
        rows.append({"model": model_name, "batch": batch, "torch_ms": round(t, 3), "jitorch_ms": round(j, 3),
                     "loop_ms": round(lp, 3), "jitorch/torch": round(j / t, 2), "loop/jitorch": round(lp / j, 2)})
    common.report("vmap", rows,
                  [("model", "model", "s"), ("batch", "batch", "d"), ("torch.func (ms)", "torch_ms", ".3f"),
                   ("jitorch (ms)", "jitorch_ms", ".3f"),
                   ("jitorch loop (ms)", "loop_ms", ".3f"), ("jitorch/torch", "jitorch/torch", ".2f"),
                   ("loop/batched", "loop/jitorch", ".2f")],
                  "Per-sample gradients vmap(grad(loss)) of an MLP 32-64-10 and a small CNN: median ms of "
                  "interleaved samples, one thread. jitorch/torch < 1 means jitorch is faster; loop/batched is the "
                  "batched path's speedup.")


if __name__ == "__main__":
    main()
