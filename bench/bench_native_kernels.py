"""The hand-built native functions of captured steps against their peers: the float32 products as register tiles
over a right operand packed as they go (`codegen/llvm_gemm_tiled.py`) and the 2x2 stride-2 max pool with its
gradient (`codegen/llvm_maxpool2.py`).

Products, each as one native program call (no Python between samples of a program): the tiles, the same product
through NumPy's OpenBLAS ``sgemm`` from the program, NumPy's ``matmul`` and ``torch.matmul``. Layouts as a training
step has them: ``x @ W.T`` (a linear layer's forward), ``g @ W`` (its input gradient), ``g.T @ x`` (its weight
gradient), a block's up projection, and a batch of attention heads (64 products per program).

Pools on a CNN's activations: the generated functions, the general IR kernels the capture used before (window loads
the vectorizer gathers), ``torch.nn.functional.max_pool2d`` (values and indices, as autograd keeps them) and its
gradient, and NumPy's reshape-max (values only: a floor for a pass over the input).

Run: ``python bench/bench_native_kernels.py [--threads 2]``. Prints a table, writes
``bench/results/native-kernels[-2threads]-<date>.*``.
"""
from __future__ import annotations

import argparse
import os

import common

# The thread count goes into the environment before NumPy, torch and jitorch start their pools.
_ARGS = argparse.ArgumentParser(description=__doc__.splitlines()[0])
_ARGS.add_argument("--threads", type=int, default=1, help="BLAS, torch and jitorch threads")
THREADS = _ARGS.parse_args().threads if __name__ == "__main__" else 1
for _var in common._THREAD_VARS:
    os.environ[_var] = str(THREADS)

import jitorch  # noqa: E402,F401 - before NumPy: jitorch sets OpenBLAS's thread policy
from jitorch.codegen.ir import Buffer, Kernel, Store, load, op  # noqa: E402
from jitorch.codegen.llvm_compile import compile_kernel  # noqa: E402
from jitorch.codegen.llvm_gemm_tiled import tiled_pays  # noqa: E402
from jitorch.codegen.llvm_maxpool2 import maxpool2_backward, maxpool2_forward  # noqa: E402
from jitorch.codegen.llvm_objcache import default_cache  # noqa: E402
from jitorch.codegen.llvm_program import Gemm, Ref, compile_program  # noqa: E402
from jitorch.cpu._lower import blas_address, blas_int_bits  # noqa: E402
from jitorch.ops import native_lowered  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(THREADS)
jitorch.set_num_threads(THREADS)

# (case, m, k, n, a transposed, b transposed, count)
PRODUCTS = [("linear forward x @ W.T, 128x784 by 512", 128, 784, 512, False, True, 1),
            ("linear forward x @ W.T, 128x512 by 512", 128, 512, 512, False, True, 1),
            ("input gradient g @ W, 128x512 by 512x784", 128, 512, 784, False, False, 1),
            ("weight gradient g.T @ x, 512 by 128 by 784", 512, 128, 784, True, False, 1),
            ("block up projection, 1024x128 by 512", 1024, 128, 512, False, True, 1),
            ("attention q @ k.T, 64 heads of 64x32 by 64", 64, 32, 64, False, True, 64),
            ("attention p @ v, 64 heads of 64x64 by 32", 64, 64, 32, False, False, 64)]


def _operand(rng, rows, cols, transposed, count):
    """``count`` matrices ``(rows, cols)``, stored transposed when asked (the other matrix's rows contiguous)."""
    base = rng.standard_normal((count, cols, rows) if transposed else (count, rows, cols)).astype(np.float32)
    return base.transpose(0, 2, 1) if transposed else base


def _program(a, b, c, with_tiles):
    m, k, n = a.shape[1], a.shape[2], b.shape[2]
    calls = []
    for i in range(a.shape[0]):
        def ref(x, slot):
            return Ref(slot, x[i].__array_interface__["data"][0] - x.__array_interface__["data"][0])
        strides = [tuple(s // 4 for s in x.strides[1:]) for x in (a, b, c)]
        g = Gemm("f32", m, n, k, ref(a, 0), strides[0], ref(b, 1), strides[1], ref(c, 2), strides[2],
                 Ref(3), blas_int_bits("f32"), tiled=max(THREADS, 1) if with_tiles else 0)
        calls.append(g)
    table = np.array([x.__array_interface__["data"][0] for x in (a, b, c)] + [blas_address("f32")], np.uint64)
    program = compile_program(calls, default_cache())
    return (lambda: program(table.ctypes.data)), all(tiled_pays(g) for g in calls)


def product_rows(rng):
    rows = []
    for case, m, k, n, at, bt, count in PRODUCTS:
        a, b = _operand(rng, m, k, at, count), _operand(rng, k, n, bt, count)
        c_tiles, c_blas = np.zeros((count, m, n), np.float32), np.zeros((count, m, n), np.float32)
        tiles, pays = _program(a, b, c_tiles, True)
        blas, _ = _program(a, b, c_blas, False)
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        fns = {"tiles": tiles, "OpenBLAS from the program": blas, "NumPy matmul": lambda: np.matmul(a, b),
               "torch.matmul": lambda: torch.matmul(ta, tb)}
        tiles(), blas()
        want = np.matmul(a.astype(np.float64), b.astype(np.float64))
        np.testing.assert_allclose(c_tiles, want, rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(c_blas, want, rtol=1e-4, atol=1e-3)
        timings = common.measure(fns, repeats=15, target_s=0.05)
        row = {"case": case, "tiles taken": "yes" if pays else "no (BLAS)"}
        for name, t in timings.items():
            row[name] = t["median_s"] * 1e3
            row[f"{name} GFLOP/s"] = 2 * m * n * k * count / t["median_s"] / 1e9
        row["OpenBLAS / tiles"] = row["OpenBLAS from the program"] / row["tiles"]
        row["torch / tiles"] = row["torch.matmul"] / row["tiles"]
        rows.append(row)
        print(f"  {case}: done", flush=True)
    return rows


def _ir_pool_forward(x):
    """The general lowering's kernel (`jitorch.cpu._lower_pool.max_pool` before the 2x2 function): four window loads
    at stride 2, PyTorch's scan, values only (the index select chain costs about as much again)."""
    n, c, h, w = x.shape
    views = [x[:, :, i::2, j::2] for i in (0, 1) for j in (0, 1)]
    out = np.empty(views[0].shape, np.float32)
    best = load(0, "f32")
    for j in range(1, 4):
        v = load(j, "f32")
        best = op("where", op("or", op("gt", v, best), op("ne", v, v)), v, best)
    strides = [tuple(s // 4 for s in v.strides) for v in views] + [tuple(s // 4 for s in out.strides)]
    kernel = compile_kernel(Kernel(out.shape, tuple(Buffer("f32", s) for s in strides), (Store(4, best),)),
                            cache=default_cache())
    addresses = [v.__array_interface__["data"][0] for v in views] + [out.ctypes.data]
    return lambda keep=(views, out): kernel(0, kernel.outer, *addresses)  # the arrays outlive the calls


def pool_rows(rng):
    rows = []
    for shape in ((128, 16, 28, 28), (128, 32, 14, 14)):
        x = rng.standard_normal(shape).astype(np.float32)
        values, indices = maxpool2_forward(x)
        g = rng.standard_normal(values.shape).astype(np.float32)
        tx = torch.from_numpy(x).requires_grad_(True)
        tv, ti = torch.nn.functional.max_pool2d(tx, 2, return_indices=True)
        tg = torch.from_numpy(g)
        n, c, h, w = shape
        got = native_lowered.max_pool(x, (2, 2), (2, 2), (0, 0), (1, 1), (h // 2, w // 2))
        np.testing.assert_array_equal(got[1], indices)
        np.testing.assert_array_equal(native_lowered.max_pool_scatter(g, indices, shape, (2, 2), (0, 0)),
                                      maxpool2_backward(g, indices, shape))
        np.testing.assert_array_equal(values, tv.detach().numpy())
        np.testing.assert_array_equal(indices, ti.numpy())
        # The functions as eager calls run them (`jitorch.ops.native_lowered`: split over the threads).
        fwd = {"function": lambda: native_lowered.max_pool(x, (2, 2), (2, 2), (0, 0), (1, 1), (h // 2, w // 2)),
               "IR kernel (values only)": _ir_pool_forward(x),
               "torch": lambda: torch.nn.functional.max_pool2d(tx.detach(), 2, return_indices=True),
               "NumPy reshape-max (values only)": lambda: x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))}
        bwd = {"function": lambda: native_lowered.max_pool_scatter(g, indices, shape, (2, 2), (0, 0)),
               "torch": lambda: torch.ops.aten.max_pool2d_with_indices_backward(tg, tx, [2, 2], [2, 2], [0, 0],
                                                                                 [1, 1], False, ti)}
        for direction, fns in (("forward", fwd), ("backward", bwd)):
            timings = common.measure(fns, repeats=15, target_s=0.05)
            row = {"case": f"max_pool2d 2x2 {direction}, {shape}"}
            for name, t in timings.items():
                row[name] = t["median_s"] * 1e3
            row["torch / function"] = row["torch"] / row["function"]
            rows.append(row)
            print(f"  pool {direction} {shape}: done", flush=True)
    return rows


def main():
    rng = np.random.default_rng(0)
    product = product_rows(rng)
    pool = pool_rows(rng)
    names = ["tiles", "OpenBLAS from the program", "NumPy matmul", "torch.matmul"]
    columns = [("case", "case", ""), ("tiles taken", "tiles taken", "")] + \
        [(f"{k} (ms)", k, ".3f") for k in names] + [(f"{k} GFLOP/s", f"{k} GFLOP/s", ".0f") for k in names] + \
        [("OpenBLAS / tiles", "OpenBLAS / tiles", ".2f"), ("torch / tiles", "torch / tiles", ".2f")]
    pool_names = ["function", "IR kernel (values only)", "torch", "NumPy reshape-max (values only)"]
    pool_columns = [("case", "case", "")] + [(f"{k} (ms)", k, ".3f") for k in pool_names] + \
        [("torch / function", "torch / function", ".2f")]
    notes = (f"Median milliseconds over 15 interleaved samples of ~50 ms, {THREADS} thread(s) (BLAS, torch and "
             "jitorch's pool). Products: 'tiles' and 'OpenBLAS from the program' are one native program each "
             "(64 products for the attention rows), 'tiles taken' says whether the program's choice "
             "(`tiled_pays`) runs the tiles at this size (else both columns are BLAS). Ratios above 1: the tiles "
             "or the pool function are faster. Pools: the functions write values and int64 indices (forward) as "
             "torch does; the IR kernel and NumPy columns write values only.")
    table = common.format_table(product, columns) + "\n\n" + common.format_table(pool, pool_columns)
    print(table)
    print(notes)
    name = "native-kernels" if THREADS == 1 else f"native-kernels-{THREADS}threads"
    print("wrote", *common.write_results(name, product + pool, dict(common.machine_facts(), threads=THREADS), table,
                                         notes))


if __name__ == "__main__":
    main()
