"""``F.interpolate`` microbenchmark (nearest, nearest-exact, (bi/tri)linear, bicubic): forward + backward, jitorch vs
PyTorch eager, 1 thread.

Each case times ``y = F.interpolate(x, ...); y.backward(g)`` with ``x`` requiring grad (``--fwd``: forward only).

    python bench/bench_interpolate.py [--repeats 15] [--target-s 0.02] [--fwd]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.single_thread()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import jitorch  # noqa: E402

common.single_thread()
_THREAD_LIMITS = threadpool_limits(limits=1)
LIBS = {"torch": torch, "jitorch": jitorch}

CASES = [  # (name, input shape, interpolate kwargs)
    ("2d x2 (4,8,16,16)", (4, 8, 16, 16), dict(scale_factor=2)),
    ("2d x2 (8,64,32,32)", (8, 64, 32, 32), dict(scale_factor=2)),
    ("2d x2 (1,3,224,224)", (1, 3, 224, 224), dict(scale_factor=2)),
    ("2d 17->40 (4,8,17,17)", (4, 8, 17, 17), dict(size=(40, 40))),
    ("2d exact x2 (4,8,16,16)", (4, 8, 16, 16), dict(scale_factor=2, mode="nearest-exact")),
    ("2d x3 (4,8,16,16)", (4, 8, 16, 16), dict(scale_factor=3)),
    ("1d x2 (8,16,64)", (8, 16, 64), dict(scale_factor=2)),
    ("1d 17->40 (8,16,17)", (8, 16, 17), dict(size=40)),
    ("3d x2 (2,8,8,8,8)", (2, 8, 8, 8, 8), dict(scale_factor=2)),
    ("3d 7->12 (2,8,7,7,7)", (2, 8, 7, 7, 7), dict(size=(12, 12, 12))),
    ("bilinear x2 (4,8,16,16)", (4, 8, 16, 16), dict(scale_factor=2, mode="bilinear")),
    ("bilinear x2 (8,64,32,32)", (8, 64, 32, 32), dict(scale_factor=2, mode="bilinear")),
    ("bilinear ac 17->40 (4,8,17,17)", (4, 8, 17, 17), dict(size=(40, 40), mode="bilinear", align_corners=True)),
    ("bilinear 64->32 (4,16,64,64)", (4, 16, 64, 64), dict(size=(32, 32), mode="bilinear")),
    ("bicubic x2 (4,8,16,16)", (4, 8, 16, 16), dict(scale_factor=2, mode="bicubic")),
    ("linear x2 (8,16,64)", (8, 16, 64), dict(scale_factor=2, mode="linear")),
    ("trilinear x2 (2,8,8,8,8)", (2, 8, 8, 8, 8), dict(scale_factor=2, mode="trilinear")),
]


def _fn(lib, shape, kw, fwd):
    rng = np.random.default_rng(0)
    x = lib.tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=not fwd)
    y0 = lib.nn.functional.interpolate(x, **kw)
    g = lib.tensor(rng.standard_normal(tuple(y0.shape)).astype(np.float32))
    if fwd:
        return lambda: lib.nn.functional.interpolate(x, **kw)

    def step():
        x.grad = None
        lib.nn.functional.interpolate(x, **kw).backward(g)
    return step


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--target-s", type=float, default=0.02)
    p.add_argument("--fwd", action="store_true")
    p.add_argument("--only", default="")
    a = p.parse_args()
    rows = []
    for name, shape, kw in CASES:
        if a.only not in name:
            continue
        fns = {lib: _fn(mod, shape, kw, a.fwd) for lib, mod in LIBS.items()}
        r = common.measure(fns, repeats=a.repeats, target_s=a.target_s)
        t, j = r["torch"]["median_s"] * 1e3, r["jitorch"]["median_s"] * 1e3
        rows.append({"case": name, "torch_ms": round(t, 3), "jitorch_ms": round(j, 3),
                     "jitorch/torch": round(j / t, 2)})
    common.report("interpolate" + ("-fwd" if a.fwd else ""), rows,
                  [("case", "case", "s"), ("torch (ms)", "torch_ms", ".3f"), ("jitorch (ms)", "jitorch_ms", ".3f"),
                   ("jitorch/torch", "jitorch/torch", ".2f")],
                  f"F.interpolate, {'forward' if a.fwd else 'forward + backward'}: median ms of "
                  f"{a.repeats} interleaved samples, one thread; jitorch/torch < 1 means jitorch is faster.")

if __name__ == "__main__":
    main()
