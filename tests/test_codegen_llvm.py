"""LLVM backend: every kernel is JIT-compiled and compared with the IR interpreter and with plain NumPy."""
import threading

import numpy as np
import pytest
from codegen_helpers import random_view, strided

from jitorch.codegen import interp
from jitorch.codegen.ir import DTYPES, Buffer, Kernel, Store, const, load, op
from jitorch.codegen.llvm_compile import compile_kernel, optimize
from jitorch.runtime.threads import parallel_for


def _out_buffer(dtype, shape, reduce_axes=0):
    """A contiguous output over the kept dimensions (stride 0 on the reduced ones)."""
    kept = shape[:len(shape) - reduce_axes]
    strides = [int(np.prod(kept[d + 1:])) for d in range(len(kept))] + [0] * reduce_axes
    return Buffer(dtype, tuple(strides)), np.zeros(max(1, int(np.prod(kept))), DTYPES[dtype])


# Each case: (IR expression over loads 0..2, the same in NumPy over arrays a, b, c).
F = lambda dt: [load(i, dt) for i in range(3)]
EXPRS = {
    "axpy": (lambda a, b, c: op("add", op("mul", a, b), c), lambda a, b, c: a * b + c),
    "relu_div": (lambda a, b, c: op("div", op("max", a, const(0, a.dtype)), op("add", op("abs", b), const(1, a.dtype))),
                 lambda a, b, c: np.maximum(a, 0) / (np.abs(b) + 1)),
    "where": (lambda a, b, c: op("where", op("lt", a, b), op("neg", c), op("sub", a, b)),
              lambda a, b, c: np.where(a < b, -c, a - b)),
    "sqrt_min": (lambda a, b, c: op("min", op("sqrt", op("abs", a)), op("rsqrt", op("add", op("mul", b, b),
                                                                                    const(1, a.dtype)))),
                 lambda a, b, c: np.minimum(np.sqrt(np.abs(a)), 1 / np.sqrt(b * b + 1))),
}
CASES = [((7,), "contiguous"), ((3, 5), "transposed"), ((4, 3, 2), "sliced"), ((5, 6), "broadcast"), ((0, 3), "sliced"),
         ((1,), "broadcast"), ((33, 17), "sliced"), ((2, 3, 1, 5), "transposed")]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_elementwise_matches_interpreter_and_numpy(dtype, case):
    rng = np.random.default_rng(case)
    shape, kind = CASES[case]
    name = list(EXPRS)[case % len(EXPRS)]
    ir_fn, np_fn = EXPRS[name]
    dt = "f32" if dtype == np.float32 else "f64"
    views = [random_view(rng, shape, dtype, kind if i == case % 3 else "contiguous") for i in range(3)]
    out_buf, out = _out_buffer(dt, shape)
    k = Kernel(shape, tuple(strided(base, v, shape) for base, v in views) + (out_buf,),
               (Store(3, ir_fn(*F(dt))),))
    ref = out.copy()
    compile_kernel(k).run([base for base, _ in views] + [out])
    interp.run(k, [base for base, _ in views] + [ref])
    np.testing.assert_array_equal(out, ref)
    with np.errstate(all="ignore"):
        expect = np_fn(*(np.broadcast_to(v, shape) for _, v in views))
    np.testing.assert_array_equal(out[:int(np.prod(shape))].reshape(shape), expect)


def test_integer_and_bool_ops_and_casts():
    rng = np.random.default_rng(3)
    a, b = rng.integers(-50, 50, 37).astype(np.int32), rng.integers(-50, 50, 37).astype(np.int64)
    a64 = op("cast", load(0, "i32"), dtype="i64")
    e = op("where", op("ge", a64, load(1, "i64")), op("mul", op("abs", a64), const(3, "i64")),
           op("max", op("neg", load(1, "i64")), op("sub", a64, const(7, "i64"))))
    flag = op("or", op("eq", a64, load(1, "i64")), op("not", op("lt", a64, const(0, "i64"))))
    half = op("mul", op("cast", a64, dtype="f64"), const(0.5, "f64"))
    bufs = (Buffer("i32", (1,)), Buffer("i64", (1,)), Buffer("i64", (1,)), Buffer("bool", (1,)), Buffer("f32", (1,)))
    k = Kernel((37,), bufs, (Store(2, e), Store(3, flag), Store(4, op("cast", half, dtype="f32"))))
    outs = [np.zeros(37, np.int64), np.zeros(37, bool), np.zeros(37, np.float32)]
    compile_kernel(k).run([a, b] + outs)
    aa = a.astype(np.int64)
    np.testing.assert_array_equal(outs[0], np.where(aa >= b, np.abs(aa) * 3, np.maximum(-b, aa - 7)))
    np.testing.assert_array_equal(outs[1], (aa == b) | (aa >= 0))
    np.testing.assert_array_equal(outs[2], (aa * 0.5).astype(np.float32))


@pytest.mark.parametrize("cmp", ["lt", "le", "gt", "ge", "eq", "ne"])
def test_bool_comparisons_order_false_before_true(cmp):
    # i1 compared signed would make True (-1) smaller than False; NumPy orders False < True.
    a, b = np.array([False, True, False, True]), np.array([False, False, True, True])
    k = Kernel((4,), (Buffer("bool", (1,)), Buffer("bool", (1,)), Buffer("bool", (1,))),
               (Store(2, op(cmp, load(0, "bool"), load(1, "bool"))),))
    out, ref = np.zeros(4, bool), np.zeros(4, bool)
    compile_kernel(k).run([a, b, out])
    interp.run(k, [a, b, ref])
    expected = getattr(np, {"lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal", "eq": "equal",
                            "ne": "not_equal"}[cmp])(a, b)
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(ref, expected)


@pytest.mark.parametrize("reduce", ["sum", "prod", "max", "min"])
@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_reduction_over_a_non_contiguous_axis(reduce, dtype):
    rng = np.random.default_rng(4)
    x = (rng.integers(1, 4, (9, 5, 7)) if dtype == np.int64 else rng.standard_normal((9, 5, 7))).astype(dtype)
    dt = "f64" if dtype == np.float64 else "i64"
    # reduce axes 0 and 2 of x: iterate (5, 9, 7) with the reduced axes trailing
    shape = (5, 9, 7)
    out_buf, out = _out_buffer(dt, shape, 2)
    k = Kernel(shape, (Buffer(dt, (7, 35, 1)), out_buf), (Store(1, load(0, dt), reduce),), 2)
    compile_kernel(k).run([x.ravel(), out])
    expect = getattr(np, reduce)(x, axis=(0, 2))
    if dtype == np.int64:
        np.testing.assert_array_equal(out, expect)
    else:
        np.testing.assert_allclose(out, expect, rtol=1e-12)


def test_reductions_of_empty_axes_give_identities_and_max_propagates_nan():
    stores = tuple(Store(i + 1, load(0, "f32"), r) for i, r in enumerate(["sum", "prod", "max", "min"]))
    x = np.zeros(1, np.float32)
    outs = [np.full(1, 9, np.float32) for _ in range(4)]
    k = Kernel((1, 0), (Buffer("f32", (0, 1)),) + tuple(Buffer("f32", (0, 0)) for _ in range(4)), stores, 1)
    compile_kernel(k).run([x] + outs)
    assert [o[0] for o in outs] == [0, 1, -np.inf, np.inf]
    y = np.arange(10, dtype=np.float32)
    y[6] = np.nan
    m = np.zeros(1, np.float32)
    compile_kernel(Kernel((10,), (Buffer("f32", (1,)), Buffer("f32", (0,))), (Store(1, load(0, "f32"), "max"),),
                          1)).run([y, m])
    assert np.isnan(m[0])


def test_long_float32_sum_is_stable_and_integer_sum_exact():
    rng = np.random.default_rng(5)
    x = rng.random(10 ** 6).astype(np.float32)
    out = np.zeros(1, np.float32)
    compile_kernel(Kernel((10 ** 6,), (Buffer("f32", (1,)), Buffer("f32", (0,))), (Store(1, load(0, "f32"), "sum"),),
                          1)).run([x, out])
    exact = x.astype(np.float64).sum()
    assert abs(out[0] - exact) / exact < 1e-6
    ones = np.ones(10 ** 6, np.float32)
    compile_kernel(Kernel((10 ** 6,), (Buffer("f32", (1,)), Buffer("f32", (0,))), (Store(1, load(0, "f32"), "sum"),),
                          1)).run([ones, out])
    assert out[0] == 10 ** 6
    xi = rng.integers(-10 ** 6, 10 ** 6, 10 ** 5)
    oi = np.zeros(1, np.int64)
    compile_kernel(Kernel((10 ** 5,), (Buffer("i64", (1,)), Buffer("i64", (0,))), (Store(1, load(0, "i64"), "sum"),),
                          1)).run([xi, oi])
    assert oi[0] == xi.sum()


@pytest.mark.parametrize("rows", [1, 7, 1001])
def test_threads_give_the_single_thread_answer(rows):
    rng = np.random.default_rng(rows)
    x = rng.standard_normal(rows * 13).astype(np.float32)
    k = Kernel((rows, 13), (Buffer("f32", (13, 1)), Buffer("f32", (1, 0))),
               (Store(1, op("tanh", load(0, "f32")), "sum"),), 1)
    ck = compile_kernel(k)
    one, many = np.zeros(rows, np.float32), np.zeros(rows, np.float32)
    ck.run([x, one])
    ptrs = ck.addresses([x, many])
    parallel_for(lambda a, b: ck(a, b, *ptrs), ck.outer, num_threads=3)
    np.testing.assert_array_equal(one, many)


def test_emitted_ir_uses_noalias_and_vectorizes():
    k = Kernel((4096,), (Buffer("f32", (1,)), Buffer("f32", (1,))), (Store(1, op("tanh", load(0, "f32"))),))
    ck = compile_kernel(k)
    assert ck.llvm_ir.count("ptr noalias") == 2 and "tanh" not in ck.llvm_ir.split("define")[1].split("call")[0]
    assert "x float>" in str(optimize(ck.llvm_ir))
    r = Kernel((4096,), (Buffer("f32", (1,)), Buffer("f32", (0,))), (Store(1, load(0, "f32"), "sum"),), 1)
    assert "x float>" in str(optimize(compile_kernel(r).llvm_ir))


def test_kernel_call_releases_the_gil():
    x = np.ones(2 ** 22, np.float32)
    k = Kernel((2 ** 22,), (Buffer("f32", (1,)), Buffer("f32", (1,))), (Store(1, op("erf", load(0, "f32"))),))
    ck = compile_kernel(k)
    ticks, done = [0], threading.Event()

    def count():
        while not done.is_set():
            ticks[0] += 1
    t = threading.Thread(target=count)
    t.start()
    before = ticks[0]
    ck.run([x, x.copy()])
    during = ticks[0] - before
    done.set()
    t.join()
    assert during > 0
