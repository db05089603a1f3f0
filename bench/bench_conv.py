"""Convolution and pooling microbenchmark: forward + backward of one op, jitorch vs PyTorch eager, single-threaded.

Shapes: the digits CNN of ``bench_train.py`` (batch 64, 1->16->32 channels, 8x8 images, 3x3 kernels, padding 1, 2x2
pools) and a typical larger layer (batch 32, 3->64 channels, 32x32, 3x3). Each case times
``y = op(x, ...); y.backward(grad)`` with the input (and weight) requiring grad, so both the forward and all of the
backward kernels (input gradient, weight gradient, col2im, pooling scatter) are in the number.

    python bench/bench_conv.py [--repeats 15] [--target-s 0.05] [--only conv]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.single_thread()  # before NumPy and torch load their thread pools

import numpy as np  # noqa: E402
import torch  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import jitorch  # noqa: E402

common.single_thread()  # now torch is loaded: also set its intra-op pool
_THREAD_LIMITS = threadpool_limits(limits=1)
LIBS = {"torch": torch, "jitorch": jitorch}


def _cases():
    """(name, input shape, extra parameter shapes, fn(lib, x, *params))."""
    conv = lambda lib, x, w, b, **kw: lib.nn.functional.conv2d(x, w, b, **kw)  # noqa: E731
    return [
        ("conv2d digits 1->16, b64 8x8 3x3 p1", (64, 1, 8, 8), [(16, 1, 3, 3), (16,)],
         lambda lib, x, w, b: conv(lib, x, w, b, padding=1)),
        ("conv2d digits 16->32, b64 4x4 3x3 p1", (64, 16, 4, 4), [(32, 16, 3, 3), (32,)],
         lambda lib, x, w, b: conv(lib, x, w, b, padding=1)),
        ("conv2d 3->64, b32 32x32 3x3 p1", (32, 3, 32, 32), [(64, 3, 3, 3), (64,)],
         lambda lib, x, w, b: conv(lib, x, w, b, padding=1)),
        ("conv2d 64->64, b32 32x32 3x3 p1", (32, 64, 32, 32), [(64, 64, 3, 3), (64,)],
         lambda lib, x, w, b: conv(lib, x, w, b, padding=1)),
        ("conv2d 64->64, b32 32x32 3x3 s2 p1", (32, 64, 32, 32), [(64, 64, 3, 3), (64,)],
         lambda lib, x, w, b: conv(lib, x, w, b, stride=2, padding=1)),
        ("conv2d ResNet stem 3->64, b8 64x64 7x7 s2 p3", (8, 3, 64, 64), [(64, 3, 7, 7), (64,)],
         lambda lib, x, w, b: conv(lib, x, w, b, stride=2, padding=3)),
        ("conv_transpose2d DCGAN 128->64, b16 16x16 4x4 s2 p1", (16, 128, 16, 16), [(128, 64, 4, 4), (64,)],
         lambda lib, x, w, b: lib.nn.functional.conv_transpose2d(x, w, b, stride=2, padding=1)),
        ("conv2d 64->128, b16 32x32 2x2 s2 (patches)", (16, 64, 32, 32), [(128, 64, 2, 2), (128,)],
         lambda lib, x, w, b: conv(lib, x, w, b, stride=2)),
        ("conv_transpose2d 64->32, b16 32x32 2x2 s2 (patches)", (16, 64, 32, 32), [(64, 32, 2, 2), (32,)],
         lambda lib, x, w, b: lib.nn.functional.conv_transpose2d(x, w, b, stride=2)),
        ("conv2d ViT patch embedding 3->384, b8 224x224 16x16 s16", (8, 3, 224, 224), [(384, 3, 16, 16), (384,)],
         lambda lib, x, w, b: conv(lib, x, w, b, stride=16)),
        ("max_pool2d 2x2, b64 16ch 8x8", (64, 16, 8, 8), [], lambda lib, x: lib.nn.functional.max_pool2d(x, 2)),
        ("max_pool2d 2x2, b32 64ch 32x32", (32, 64, 32, 32), [], lambda lib, x: lib.nn.functional.max_pool2d(x, 2)),
        ("max_pool2d 3x3 s2 p1, b32 64ch 32x32", (32, 64, 32, 32), [],
         lambda lib, x: lib.nn.functional.max_pool2d(x, 3, 2, 1)),
        ("avg_pool2d 2x2, b32 64ch 32x32", (32, 64, 32, 32), [], lambda lib, x: lib.nn.functional.avg_pool2d(x, 2)),
        ("fold 3x3 p1 (col2im), b32 64ch 32x32", (32, 64 * 9, 32 * 32), [],
         lambda lib, x: lib.nn.functional.fold(x, (32, 32), 3, padding=1)),
        ("unfold 3x3 p1 (im2col), b32 64ch 32x32", (32, 64, 32, 32), [],
         lambda lib, x: lib.nn.functional.unfold(x, 3, padding=1)),
    ]


def _make_step(lib, fn, arrays, grad):
    tensors = [lib.tensor(a, requires_grad=True) for a in arrays]
    g = lib.tensor(grad)

    def step():
        for t in tensors:
            t.grad = None
        fn(lib, *tensors).backward(g)
    return step, tensors


def run_case(name, shape, params, fn, repeats, target_s):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s, dtype=np.float32) for s in [shape] + params]
    out_shape = tuple(fn(torch, *[torch.from_numpy(a) for a in arrays]).shape)
    grad = rng.standard_normal(out_shape, dtype=np.float32)
    steps, grads = {}, {}
    for lib_name, lib in LIBS.items():
        steps[lib_name], tensors = _make_step(lib, fn, arrays, grad)
        steps[lib_name]()
        grads[lib_name] = [np.asarray(t.grad.detach().numpy()) for t in tensors]
    # Two float32 results of sums over 32k products differ by more than allclose's 1e-4 while both are accurate:
    # each library is measured against float64 instead, as its largest error over the gradient's largest value.
    ref_step, ref_tensors = _make_step(torch, fn, [a.astype(np.float64) for a in arrays], grad.astype(np.float64))
    ref_step()
    ref = [t.grad.numpy() for t in ref_tensors]
    row = {"case": name}
    for lib_name in LIBS:
        row[f"{lib_name}_grad_error"] = max(float(np.abs(g - r).max() / max(np.abs(r).max(), 1e-30))
                                            for g, r in zip(grads[lib_name], ref))
    timings = common.measure(steps, repeats=repeats, target_s=target_s)
    for lib_name in LIBS:
        row[lib_name] = timings[lib_name]
        row[f"{lib_name}_ms"] = timings[lib_name]["median_s"] * 1e3
    row["jitorch_over_torch"] = row["torch_ms"] / row["jitorch_ms"]
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="timed samples per library and case")
    parser.add_argument("--target-s", type=float, default=0.05, help="approximate seconds per sample")
    parser.add_argument("--only", help="run only the cases whose name contains this text")
    args = parser.parse_args()
    rows = []
    for name, shape, params, fn in _cases():
        if args.only and args.only.lower() not in name.lower():
            continue
        rows.append(run_case(name, shape, params, fn, args.repeats, args.target_s))
        print(f"  {name}: torch {rows[-1]['torch_ms']:.3f} ms, jitorch {rows[-1]['jitorch_ms']:.3f} ms "
              f"({rows[-1]['jitorch_over_torch']:.2f}x)", flush=True)
    columns = [("case (forward + backward)", "case", ""), ("torch (ms)", "torch_ms", ".3f"),
               ("jitorch (ms)", "jitorch_ms", ".3f"), ("jitorch/torch speed", "jitorch_over_torch", ".2f"),
               ("torch grad error", "torch_grad_error", ".1e"), ("jitorch grad error", "jitorch_grad_error", ".1e")]
    table = common.format_table(rows, columns)
    facts = common.machine_facts()
    facts["jitorch"] = jitorch.__version__
    notes = (f"Milliseconds per forward + backward call (median of {args.repeats} interleaved samples of "
             f"~{args.target_s} s), lower is better; the speed column is torch_ms / jitorch_ms (< 1: jitorch is "
             "slower). One thread everywhere (torch.set_num_threads(1), threadpoolctl limits = 1). Same inputs and "
             "output gradient in both libraries; the grad error columns are each library's largest float32 "
             "gradient error against torch in float64, over the largest gradient value.")
    json_path, md_path = common.write_results("conv", rows, facts, table, notes)
    print(f"wrote {json_path} and {md_path}")


if __name__ == "__main__":
    main()
