"""Index reductions in the IR (``argmax``/``argmin``): LLVM kernels equal the interpreter and NumPy, first extreme
wins, nan counts as the extreme, the flat index runs over the logical reduced dims whatever the strides; CUDA
declines them by name."""
import numpy as np
import pytest

from codegen_helpers import strided
from jitorch.codegen import interp
from jitorch.codegen.cuda_emit import UnsupportedPrimitive, emit_cuda
from jitorch.codegen.ir import DTYPES, Buffer, Kernel, Store, const, load, op, reduced
from jitorch.codegen.llvm_compile import compile_kernel


def _data(rng, shape, dt):
    x = (rng.standard_normal(shape) * 3).astype(DTYPES[dt])
    if dt.startswith("f"):
        x.reshape(shape[0], -1)[1, [3, 5]] = np.nan  # two nans: the first one's index
        x.reshape(shape[0], -1)[2] = -np.inf
    x.reshape(shape[0], -1)[3] = 1  # all equal: index 0
    x.reshape(shape[0], -1)[4, [2, 7]] = x.max() + 1  # a tie for the maximum: the first one
    return x


@pytest.mark.parametrize("kind", ["argmax", "argmin"])
@pytest.mark.parametrize("dt", ["f32", "f64", "i32", "i64"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_index_reduction_matches_numpy_and_interpreter(kind, dt, layout):
    rng = np.random.default_rng(0)
    shape = (6, 5, 9)
    base = _data(rng, (6, 9, 5) if layout == "transposed" else shape, dt)
    view = base.transpose(0, 2, 1) if layout == "transposed" else base
    out = Buffer("i64", (1, 0, 0))
    k = Kernel(shape, (strided(base.ravel(), view, shape), out), (Store(1, load(0, dt), kind),), 2)
    want = getattr(np, kind)(np.ascontiguousarray(view).reshape(6, -1), axis=1)
    got, ref = np.full(6, -1, np.int64), np.full(6, -1, np.int64)
    compile_kernel(k).run([base.ravel(), got])
    interp.run(k, [base.ravel(), ref])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(ref, want)


def test_index_reduction_feeds_a_row_store_and_a_later_phase():
    # row store: argmax + 10; phase 1: x - x[argmax] would need a gather, so read the index as a number instead
    x = np.random.default_rng(1).standard_normal((4, 33)).astype(np.float64)
    k = Kernel((4, 33), (Buffer("f64", (33, 1)), Buffer("i64", (1, 0)), Buffer("f64", (33, 1))),
               (Store(None, load(0, "f64"), "argmax"),
                Store(1, op("add", reduced(0, "i64"), const(10, "i64")), row=True),
                Store(2, op("mul", load(0, "f64"), op("cast", reduced(0, "i64"), dtype="f64")), phase=1)), 1)
    idx = x.argmax(1)
    for run in (compile_kernel(k).run, lambda arrays: interp.run(k, arrays)):
        a, b = np.zeros(4, np.int64), np.zeros(4 * 33)
        run([x.ravel(), a, b])
        np.testing.assert_array_equal(a, idx + 10)
        np.testing.assert_array_equal(b.reshape(4, 33), x * idx[:, None])


def test_index_reduction_store_must_be_int64_and_cuda_declines_it():
    with pytest.raises(TypeError, match="value is i64, buffer is f32"):
        Kernel((2, 3), (Buffer("f32", (3, 1)), Buffer("f32", (1, 0))), (Store(1, load(0, "f32"), "argmax"),), 1)
    k = Kernel((2, 300), (Buffer("f32", (300, 1)), Buffer("i64", (1, 0))), (Store(1, load(0, "f32"), "argmin"),), 1)
    with pytest.raises(UnsupportedPrimitive, match="argmin reductions are not supported"):
        emit_cuda(k, "k")
