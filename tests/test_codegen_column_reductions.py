"""Column reductions (``x.sum(0)``-shaped: inputs contiguous along the kept dim, strided along the reduced one) take
the row-walking path of the LLVM emitter; they must equal the IR interpreter and float64 references, split across
threads at any boundary, and stay stable over many rows."""
from __future__ import annotations

import numpy as np
import pytest

from jitorch.codegen import interp
from jitorch.codegen.ir import Buffer, Kernel, Store, collapse, const, load, op
from jitorch.codegen.llvm_compile import compile_kernel
from jitorch.codegen.llvm_columns import column_layout
from jitorch.codegen.llvm_emit import emit_kernel
from codegen_helpers import NAMES


def _kernel(rows, cols, dtype, reduce, value=None):
    """out[c] = reduce_r value(x[r, c]) with x C-contiguous (rows, cols): iteration space (cols, rows)."""
    dt = NAMES[np.dtype(dtype)]
    v = load(0, dt) if value is None else value(load(0, dt))
    return Kernel((cols, rows), (Buffer(dt, (1, cols)), Buffer(dt, (1, 0))), (Store(1, v, reduce),), 1)


def _run(kernel, x, out, splits=(0,)):
    ck = compile_kernel(kernel)
    bounds = list(splits) + [ck.outer]
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        ck(lo, hi, x.ctypes.data, out.ctypes.data)
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("reduce", ["sum", "max", "min", "prod"])
@pytest.mark.parametrize("rows, cols", [(3, 2), (1500, 130), (513, 64), (7, 200)])
def test_column_reductions_equal_the_interpreter(rows, cols, dtype, reduce):
    rng = np.random.default_rng(rows * cols)
    if reduce == "prod":
        x = rng.uniform(0.9, 1.1, (rows, cols)) if np.dtype(dtype).kind == "f" else rng.integers(1, 2, (rows, cols))
    else:
        x = rng.standard_normal((rows, cols)) * 3 if np.dtype(dtype).kind == "f" else rng.integers(-9, 9, (rows, cols))
    x = x.astype(dtype)
    kernel = _kernel(rows, cols, dtype, reduce)
    assert column_layout(collapse(kernel))
    got = _run(kernel, x, np.full(cols, 7, dtype))
    want = {"sum": x.sum(0, dtype=np.float64), "max": x.max(0), "min": x.min(0), "prod": x.prod(0, dtype=np.float64)}
    ref = np.zeros(cols, dtype)
    interp.run(kernel, [x.reshape(-1), ref])
    # A float32 sum's error bound grows with the column's magnitude sum (cancellation leaves small totals).
    scale = float(np.abs(x.astype(np.float64)).sum(0).max()) if reduce == "sum" else 1.0
    # A float32 product rounds once per row: its relative error grows with the row count.
    if dtype == np.float32:
        tol = dict(rtol=5e-8 * rows if reduce == "prod" else 2e-6, atol=1e-6 * scale)
    else:
        tol = dict(rtol=1e-12, atol=1e-12 * scale)
    np.testing.assert_allclose(got, want[reduce].astype(dtype), **tol)
    np.testing.assert_allclose(got, ref, **tol)


def test_any_thread_split_gives_the_same_columns():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((700, 203)).astype(np.float32)
    kernel = _kernel(700, 203, np.float32, "sum", lambda v: op("mul", v, v))
    whole = _run(kernel, x, np.zeros(203, np.float32))
    for splits in [(0, 1), (0, 64, 65), (0, 100, 150, 202)]:
        np.testing.assert_array_equal(_run(kernel, x, np.zeros(203, np.float32), splits), whole)
    np.testing.assert_allclose(whole, (x.astype(np.float64) ** 2).sum(0), rtol=2e-6)


def test_float32_column_sum_of_a_million_rows_is_stable():
    """Equal terms make every block's rounding go the same way: the worst case for blocked sums (torch's column sum
    is off by 5.5e-7 here, NumPy's row-after-row float32 sum by 1e-2)."""
    x = np.full((1_000_000, 3), 0.1, np.float32)
    got = _run(_kernel(1_000_000, 3, np.float32, "sum"), x, np.zeros(3, np.float32))
    np.testing.assert_allclose(got, np.float64(np.float32(0.1)) * 1_000_000, rtol=5e-7)


def test_row_contiguous_reductions_keep_the_row_path():
    row = Kernel((64, 100), (Buffer("f32", (100, 1)), Buffer("f32", (1, 0))), (Store(1, load(0, "f32"), "sum"),), 1)
    reads_output = Kernel((64, 100), (Buffer("f32", (1, 64)), Buffer("f32", (1, 0))),
                          (Store(1, op("add", load(0, "f32"), load(1, "f32")), "sum"),), 1)
    two_passes = Kernel((64, 100), (Buffer("f32", (1, 64)), Buffer("f32", (1, 0))),
                        (Store(None, load(0, "f32"), "sum"),
                         Store(1, op("sub", load(0, "f32"), const(1, "f32")), "sum", 1)), 1)
    assert not any(column_layout(collapse(k)) for k in (row, reads_output, two_passes))
    assert "alloca [64 x" not in emit_kernel(row)


def test_per_row_values_ride_along_a_column_reduction():
    """Layer norm's weight gradient: sum over rows of g * (x - mean[r]) * rstd[r], the row statistics constant along
    the kept dim."""
    rng = np.random.default_rng(3)
    rows, cols = 300, 70
    g, x = (rng.standard_normal((rows, cols)).astype(np.float32) for _ in range(2))
    mean, rstd = rng.standard_normal(rows).astype(np.float32), rng.uniform(0.5, 2, rows).astype(np.float32)
    ld = [load(i, "f32") for i in range(4)]
    value = op("mul", ld[0], op("mul", op("sub", ld[1], ld[2]), ld[3]))
    kernel = Kernel((cols, rows), (Buffer("f32", (1, cols)), Buffer("f32", (1, cols)), Buffer("f32", (0, 1)),
                                   Buffer("f32", (0, 1)), Buffer("f32", (1, 0))), (Store(4, value, "sum"),), 1)
    assert column_layout(collapse(kernel))
    out = np.zeros(cols, np.float32)
    ck = compile_kernel(kernel)
    ck(0, ck.outer, g.ctypes.data, x.ctypes.data, mean.ctypes.data, rstd.ctypes.data, out.ctypes.data)
    want = (g.astype(np.float64) * (x - mean[:, None]) * rstd[:, None]).sum(0)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)
