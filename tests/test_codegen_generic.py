"""Size-generic kernels and programs (codegen/ir_params.py): one compiled function per kernel structure, any size.

Every kernel is checked against the IR interpreter at each size, and the number of functions in the JIT engine
proves that other sizes reused the first size's machine code.
"""
from __future__ import annotations

import numpy as np
import pytest

from jitorch.codegen import interp, llvm_compile
from jitorch.codegen.ir import Buffer, Kernel, Store, const, load, op, reduced
from jitorch.codegen.ir_params import Sym, parametrize
from jitorch.codegen.llvm_compile import compile_kernel
from jitorch.codegen.llvm_program import Copy, Gemm, KernelCall, Ref, compile_program
from jitorch.runtime.host_blas import gemm_function


def _loaded():
    """Functions compiled into this process's engine so far."""
    return len(llvm_compile._state.get("loaded", {}))


def _scaled_bias(rows, cols):
    """out = x * (1 / numel) + b[col]: the constant changes with the size, as a mean's does."""
    x, b = load(0, "f32"), load(1, "f32")
    value = op("add", op("mul", x, const(1 / (rows * cols), "f32")), b)
    return Kernel((rows, cols), (Buffer("f32", (cols, 1)), Buffer("f32", (0, 1)), Buffer("f32", (cols, 1))),
                  (Store(2, value),)), [(rows, cols), (cols,), (rows, cols)]


def _softmax(rows, cols):
    """Three phases over each row: max, sum of exp(x - max), the scaled write."""
    x = load(0, "f64")
    e = op("exp", op("sub", x, reduced(0, "f64")))
    stores = (Store(None, x, "max"), Store(None, e, "sum", phase=1), Store(1, op("div", e, reduced(1, "f64")), phase=2))
    return Kernel((rows, cols), (Buffer("f64", (cols, 1)), Buffer("f64", (cols, 1))), stores, 1), \
        [(rows, cols), (rows, cols)]


def _column_sum(rows, cols):
    """out[c] = sum_r x[r, c] (the emitter's column path), x read from an offset into its buffer."""
    return Kernel((cols, rows), (Buffer("f32", (1, cols), 3), Buffer("f32", (1, 0))),
                  (Store(1, load(0, "f32"), "sum"),), 1), [(rows * cols + 3,), (cols,)]


def _argmax_strided(rows, cols):
    """Row argmax of every other column of a (rows, 2 * cols) array."""
    return Kernel((rows, cols), (Buffer("i64", (2 * cols, 2)), Buffer("i64", (1, 0))),
                  (Store(1, load(0, "i64"), "argmax"),), 1), [(rows, 2 * cols), (rows,)]


def _arrays(rng, kernel, shapes):
    out = []
    for b, shape in zip(kernel.buffers, shapes):
        dt = {"f32": np.float32, "f64": np.float64, "i64": np.int64}[b.dtype]
        a = rng.standard_normal(shape) * 3 if b.dtype != "i64" else rng.integers(-50, 50, shape)
        out.append(np.ascontiguousarray(a, dtype=dt).reshape(-1))
    return out


@pytest.mark.parametrize("family", [_scaled_bias, _softmax, _column_sum, _argmax_strided])
def test_a_kernel_at_other_sizes_reuses_one_function_and_equals_the_interpreter(family):
    rng = np.random.default_rng(0)
    compiled = []
    for i, (rows, cols) in enumerate([(5, 7), (33, 64), (2, 1027), (130, 3)]):
        kernel, shapes = family(rows, cols)
        arrays = _arrays(rng, kernel, shapes)
        want = [a.copy() for a in arrays]
        interp.run(kernel, want)
        before = _loaded()
        ck = compile_kernel(kernel)
        if i:  # the first size compiled the function; every other size only binds its integers
            assert _loaded() == before and ck.address == compiled[0].address
        compiled.append(ck)
        ck(0, ck.outer, *[a.ctypes.data for a in arrays])
        for got, ref in zip(arrays, want):
            np.testing.assert_allclose(got, ref, rtol=2e-6, atol=1e-6)
    assert len({ck.name for ck in compiled}) == 1


def test_structural_integers_and_folded_constants_stay_in_the_code():
    x = load(0, "f32")
    value = op("mul", op("add", op("mul", x, const(0.5, "f32")), const(1, "f32")), const(0.044715, "f32"))

    def kernel(stride, n):
        return Kernel((n,), (Buffer("f32", (stride,)), Buffer("f32", (1,))), (Store(1, value),))

    (t1, v1), (t2, v2) = parametrize(kernel(1, 10)), parametrize(kernel(1, 20))
    assert str(t1) == str(t2) and v1 == (10, np.float32(0.044715).item()) and v2[0] == 20
    assert "const f32 0.5" in str(t1) and "const f32 1.0" in str(t1) and "$q1" in str(t1)
    # A unit stride is what the vectorizer relies on: stride 3 is another template, stride 5 then shares it. An
    # innermost stride 2 stays literal too (LLVM's wide loads and shuffles); in an outer dim it is an argument.
    assert str(parametrize(kernel(3, 10))[0]) != str(t1) == str(parametrize(kernel(1, 999))[0])
    assert str(parametrize(kernel(3, 10))[0]) == str(parametrize(kernel(5, 10))[0])
    assert "strides=(2,)" in str(parametrize(kernel(2, 10))[0])
    outer = Kernel((4, 3), (Buffer("f32", (2, 0)), Buffer("f32", (3, 1))), (Store(1, x),))
    assert "strides=($q" in str(parametrize(outer)[0]).splitlines()[1]
    # Sizes 0 and 1 branch the code: they stay literal.
    assert parametrize(kernel(1, 1))[0].shape == (1,)
    assert isinstance(parametrize(kernel(1, 2))[0].shape[0], Sym)


def _product_program(rng, m, n, k, dtype):
    """Gemms of every kind plus a kernel and a copy at byte offsets, over one table: (program, table, arrays, check)."""
    np_dt = {"f32": np.float32, "f64": np.float64}[dtype]
    a = rng.standard_normal((m, k)).astype(np_dt)
    bt = rng.standard_normal((n, 2 * k)).astype(np_dt)  # b = bt[:, ::2].T: strided, column stride 2 * k
    b = rng.standard_normal((k, n + 3)).astype(np_dt)   # rows padded: a row stride larger than n
    outs = [np.zeros((m, n), np_dt) for _ in range(3)] + [np.zeros(m * n + 5, np_dt)]
    arrays = [a, bt, b, *outs]
    fn = gemm_function(dtype)
    table = np.array([x.ctypes.data for x in arrays] + [fn.address if fn else 0], np.uint64)
    item = a.itemsize
    calls = [Gemm(dtype, m, n, k, Ref(0), (k, 1), Ref(2), (n + 3, 1), Ref(3), (n, 1)),  # register chunks
             Gemm(dtype, m, n, k, Ref(0), (k, 1), Ref(1), (2, 2 * k), Ref(4), (n, 1))]  # the reduction loop
    if fn is not None:
        calls.append(Gemm(dtype, m, n, k, Ref(0), (k, 1), Ref(2), (n + 3, 1), Ref(5), (n, 1), Ref(7),
                          fn.int_bits))
    calls.append(KernelCall(Kernel((m * n,), (Buffer(dtype, (1,)), Buffer(dtype, (1,))),
                                   (Store(1, op("mul", load(0, dtype), const(3.25, dtype))),)),
                            (Ref(3), Ref(6, 2 * item))))
    calls.append(Copy(Ref(6, 2 * item), Ref(6, 2 * item), 0))
    want = a.astype(np.float64) @ b[:, :n].astype(np.float64)

    def check():
        assert len(arrays) == 7  # keeps every operand alive while the table points at them
        tol = dict(rtol=1e-4, atol=1e-4 * k) if dtype == "f32" else dict(rtol=1e-10, atol=1e-10 * k)
        np.testing.assert_allclose(outs[0], want, **tol)
        np.testing.assert_allclose(outs[1], a.astype(np.float64) @ bt[:, ::2].T.astype(np.float64), **tol)
        if fn is not None:
            np.testing.assert_allclose(outs[2], want, **tol)
        np.testing.assert_allclose(outs[3][2:2 + m * n], (outs[0] * np_dt(3.25)).reshape(-1), rtol=1e-6)
        assert not outs[3][:2].any() and not outs[3][2 + m * n:].any()
    return compile_program(calls), table, check


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_a_program_at_other_sizes_is_the_same_machine_code(dtype):
    rng = np.random.default_rng(1)
    programs = []
    # n crosses the register chunks (32 and 64 float32 lanes, 16 and 32 float64) in every way: below, at, above,
    # several; up to VECTOR_BYTES a row (a wider product is another kind of code), past half a chunk (a narrower
    # one gets narrower chunks).
    wide = (100, 128, 96) if dtype == "f32" else (47, 64, 40)
    for m, n, k in [(3, 33, 5), (7, 17, 64), (20, 32, 9), (4, wide[0], 3), (2, wide[1], 17), (9, 31, 2),
                    (2, wide[2], 3)]:
        before = _loaded()
        prog, table, check = _product_program(rng, m, n, k, dtype)
        if programs:
            assert _loaded() == before and prog.address == programs[0].address
        programs.append(prog)
        prog(table.ctypes.data)
        check()
    # Sizes of 1 and narrow products are other code, not other integers, and still right.
    for m, n, k in [(1, 1, 1), (1, 40, 3), (5, 1, 7), (6, 2, 1), (5, 10, 7), (3, 16, 4), (4, 8, 9)]:
        prog, table, check = _product_program(rng, m, n, k, dtype)
        prog(table.ctypes.data)
        check()


def test_numpy_integers_and_power_exponents_keep_one_canonical_text():
    x = load(0, "f32")
    cube = Kernel((6,), (Buffer("f32", (1,)), Buffer("f32", (1,))), (Store(1, op("pow", x, const(4, "f32"))),))
    same = Kernel((np.int64(6),), (Buffer("f32", (np.int64(1),), np.int64(0)), Buffer("f32", (1,))),
                  (Store(1, op("pow", x, const(4, "f32"))),))
    assert str(same) == str(cube)
    template, values = parametrize(cube)
    assert values == (6,) and "const f32 4.0" in str(template)  # the exponent is code: pow folds its checks
    out = np.zeros(6, np.float32)
    compile_kernel(same).run([np.arange(6, dtype=np.float32), out])
    np.testing.assert_allclose(out, np.arange(6.0) ** 4, rtol=1e-6)


def test_powers_torch_computes_by_formula_become_those_formulas():
    x = load(0, "f32")
    assert op("pow", x, const(3, "f32")) == op("mul", op("mul", x, x), x)
    assert op("pow", x, const(-0.5, "f32")) == op("rsqrt", x)
    assert op("pow", x, const(1.5, "f32")).op == "pow"


_FIRST_COMPILES = r"""
from concurrent.futures import ThreadPoolExecutor
import numpy as np
from jitorch.codegen import llvm_compile
from jitorch.codegen.ir import Buffer, Kernel, Store, const, load, op
def job(i):
    value = op("add", load(0, "f64"), const(3.0 + i, "f64"))
    k = Kernel((8,), (Buffer("f64", (1,)), Buffer("f64", (1,))), (Store(1, value),))
    x, o = np.arange(8.0), np.zeros(8)
    llvm_compile.compile_kernel(k).run([x, o])
    assert (o == x + 3.0 + i).all()
with ThreadPoolExecutor(16) as ex:
    list(ex.map(job, range(32)))
print("ok")
"""


@pytest.mark.parametrize("attempt", range(2))
def test_threads_compiling_the_first_kernels_of_a_process_share_one_engine(attempt):
    """The engine is made once under a lock: threads racing to make it crashed the process (1 run in 6)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _FIRST_COMPILES], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
