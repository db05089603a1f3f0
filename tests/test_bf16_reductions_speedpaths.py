"""Half-precision sums over outer axes (`ops/native_outer_sum.py`, `codegen/llvm_outer_sum.py`): ATen's float32
cascade order per column, bit for bit against torch on one thread (the float32 result of ``dtype=torch.float32``
too, where no bfloat16 rounding hides the order), for bfloat16 and float16, contiguous, transposed and strided
inputs, middle axes, odd and large row counts; gradients, 0-d and empty inputs."""
import ml_dtypes
import numpy as np
import pytest
import torch

import jitorch
from jitorch.codegen.llvm_outer_sum import level_power, outer_sum_function
from jitorch.ops.native_outer_sum import outer_sum

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = {"bfloat16": (jitorch.bfloat16, torch.bfloat16), "float16": (jitorch.float16, torch.float16)}


@pytest.fixture(autouse=True)
def torch_one_thread():
    """torch on one thread: with more, its threads' partial sums are rounded to the half dtype before they add."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _pair(shape, dtype, seed=0):
    x = (np.random.default_rng(seed).standard_normal(shape) * 3 + 1).astype(np.float32)
    jd, td = DTYPES[dtype]
    return jitorch.tensor(x).to(jd), torch.tensor(x).to(td)


def _bits(t):
    """A tensor's values as integers (bit-exact comparisons; NaN patterns included)."""
    a = t.detach().cpu().float().numpy() if isinstance(t, torch.Tensor) else t.detach().float().numpy()
    return a.view(np.int32)


def _same(got, want):
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    assert tuple(got.shape) == tuple(want.shape)
    np.testing.assert_array_equal(_bits(got), _bits(want))


CASES = [((1000, 1000), 0, None), ((3000, 77), 0, None), ((17, 33), 0, None), ((70000, 40), 0, None),
         ((5000, 129), 0, None), ((300, 20), 0, None), ((301, 63), 0, None), ((40, 5), 0, None), ((2, 7), 0, None),
         ((4, 300, 257), 1, None), ((30, 40, 50), (0, 1), None), ((2, 5000, 3), 1, None), ((3, 100, 100), 0, None),
         ((77, 300), 1, "T"), ((600, 90), 0, "every-other-column"), ((20, 1, 65), 0, None)]


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape,dims,view", CASES)
def test_outer_sums_give_torchs_bits(dtype, shape, dims, view):
    j, t = _pair(shape, dtype, seed=len(shape) + shape[0])
    if view == "T":
        j, t = j.T, t.T
    elif view == "every-other-column":
        j, t = j[:, ::2], t[:, ::2]
    _same(j.sum(dims), t.sum(dims))
    _same(j.sum(dims, keepdim=True), t.sum(dims, keepdim=True))
    _same(j.sum(dims, dtype=jitorch.float32), t.sum(dims, dtype=torch.float32))  # the unrounded order
    _same(j.mean(dims), t.mean(dims))


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_outer_sums_carry_nan_and_inf_as_torch(dtype):
    j, t = _pair((500, 70), dtype)
    for lib, x in (("j", j), ("t", t)):
        x[3, 5] = float("nan")
        x[7, 6] = float("inf")
        x[9, 7], x[11, 7] = float("inf"), float("-inf")
    _same(j.sum(0), t.sum(0))


def test_outer_sum_kernel_is_the_cascade_a_single_column_follows():
    """The generated function against ATen's multi_row_sum written out in NumPy float32 (one column)."""
    f32 = np.float32
    values = (np.random.default_rng(5).standard_normal((4133, 3)) * 100).astype(np.float32)

    def cascade(col):
        n, p = len(col), level_power(len(col))
        acc, i, mask = [f32(0)] * 4, 0, (1 << p) - 1
        while i + (1 << p) <= n:
            for _ in range(1 << p):
                acc[0], i = f32(acc[0] + col[i]), i + 1
            for j in range(1, 4):
                acc[j], acc[j - 1] = f32(acc[j] + acc[j - 1]), f32(0)
                if i & (mask << (j * p)):
                    break
        for r in range(i, n):
            acc[0] = f32(acc[0] + col[r])
        return f32(f32(f32(acc[0] + acc[1]) + acc[2]) + acc[3])

    out = np.empty(3, np.float32)
    outer_sum_function("f32")(values.ctypes.data, out.ctypes.data, 4133, 3, 3, level_power(4133), 1, 0, 3)
    np.testing.assert_array_equal(out, [cascade(values[:, c]) for c in range(3)])


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_gradients_of_outer_sums_match_torch(dtype):
    j, t = _pair((300, 37), dtype)
    j.requires_grad_(True)
    t.requires_grad_(True)
    g = np.random.default_rng(9).standard_normal(37).astype(np.float32)
    jd, td = DTYPES[dtype]
    j.sum(0).backward(jitorch.tensor(g).to(jd))
    t.sum(0).backward(torch.tensor(g).to(td))
    _same(j.grad, t.grad)
    j.grad, t.grad = None, None
    j.mean(0).backward(jitorch.tensor(g).to(jd))
    t.mean(0).backward(torch.tensor(g).to(td))
    _same(j.grad, t.grad)


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_empty_and_zero_dim_inputs(dtype):
    jd, td = DTYPES[dtype]
    for shape, dims in [((0, 5), 0), ((5, 0), 0), ((0, 3, 4), 1)]:
        _same(jitorch.zeros(shape, dtype=jd).sum(dims), torch.zeros(shape, dtype=td).sum(dims))
    _same(jitorch.tensor(2.5, dtype=jd).sum(0), torch.tensor(2.5, dtype=td).sum(0))
    _same(jitorch.tensor(2.5, dtype=jd).sum(), torch.tensor(2.5, dtype=td).sum())


def test_outer_sum_declines_layouts_it_does_not_take():
    x = np.ones((64, 32), BF16)
    assert outer_sum(x, (1,), False) is None  # the contiguous axis: native_sum's row reduction
    assert outer_sum(np.ones((8, 9, 10), BF16), (0, 2), False) is None  # reduced axes on both sides of a kept one
    assert outer_sum(x.astype(np.float64), (0,), False) is None
    assert outer_sum(x[::-1], (0,), False) is None  # negative strides
    assert outer_sum(np.ones((0, 4), BF16), (0,), False) is None


# -- layer norm of half inputs: the float32 row on widened copies, rounded once ------------------------------------
def _ulps(got, want):
    """Distances in units in the last place of the half dtype (on the sign-magnitude integer line)."""
    def line(t):
        bits = t.detach().view(torch.int16).numpy().astype(np.int32)
        return np.where(bits < 0, -(bits & 0x7FFF), bits)
    return np.abs(line(torch.from_numpy(got.detach().float().numpy()).to(want.dtype)) - line(want))


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("shape,normalized,view,params", [
    ((64, 1000), (1000,), None, "same"), ((3, 7, 129), (129,), None, "same"), ((5, 6, 33), (6, 33), None, None),
    ((40, 77), (40,), "T", "same"), ((9, 65), (65,), None, "float32"), ((1, 17), (17,), None, "bias-only")])
def test_half_layer_norm_matches_torch_values_and_gradients(dtype, shape, normalized, view, params):
    jd, td = DTYPES[dtype]
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(np.float32)
    w, b = (rng.standard_normal(normalized).astype(np.float32) for _ in range(2))
    jx, tx = jitorch.tensor(x).to(jd), torch.tensor(x).to(td)
    if view == "T":
        jx, tx = jx.T, tx.T
    pd_j, pd_t = (jitorch.float32, torch.float32) if params == "float32" else (jd, td)
    jw, tw = (None, None) if params in (None, "bias-only") else (jitorch.tensor(w).to(pd_j), torch.tensor(w).to(pd_t))
    jb, tb = (None, None) if params is None else (jitorch.tensor(b).to(pd_j), torch.tensor(b).to(pd_t))
    leaves = [t for t in (jx, jw, jb) if t is not None], [t for t in (tx, tw, tb) if t is not None]
    for t in leaves[0] + leaves[1]:
        t.requires_grad_(True)
    got = jitorch.nn.functional.layer_norm(jx, normalized, jw, jb)
    want = torch.nn.functional.layer_norm(tx, normalized, tw, tb)
    assert got.dtype == jd and want.dtype == td and tuple(got.shape) == tuple(want.shape)
    assert got.stride() == want.stride()
    # torch's own rounding of its row moments and of ``x * rstd - mean * rstd`` (this path: ``(x - mean) * rstd``)
    ulps = _ulps(got, want)
    assert ulps.max() <= 2 and (ulps > 0).mean() < 5e-3, (ulps.max(), (ulps > 0).mean())
    g = rng.standard_normal(shape if view is None else shape[::-1]).astype(np.float32)
    got.backward(jitorch.tensor(g).to(jd))
    want.backward(torch.tensor(g).to(td))
    for j, t in zip(*leaves):
        assert j.grad.dtype == {jd: td, jitorch.float32: torch.float32}[j.dtype] or str(j.grad.dtype)[-4:] == \
            str(t.grad.dtype)[-4:]
        scale = np.abs(t.grad.float().numpy()).max() + 1e-3
        np.testing.assert_allclose(j.grad.float().numpy(), t.grad.float().numpy(), atol=2e-2 * scale, rtol=2e-2)


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_half_layer_norm_of_empty_and_constant_rows(dtype):
    jd, td = DTYPES[dtype]
    _same(jitorch.nn.functional.layer_norm(jitorch.zeros((0, 8), dtype=jd), (8,)),
          torch.nn.functional.layer_norm(torch.zeros((0, 8), dtype=td), (8,)))
    # A constant row normalizes to zeros here; torch's ``x * rstd - mean * rstd`` leaves its rounding (-1.2e-4)
    got = jitorch.nn.functional.layer_norm(jitorch.full((3, 40), 7.5, dtype=jd), (40,))
    want = torch.nn.functional.layer_norm(torch.full((3, 40), 7.5, dtype=td), (40,))
    assert got.dtype == jd and not got.float().numpy().any()
    np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), atol=1e-3)


def test_half_layer_norm_refuses_mixed_parameters_as_torch():
    x = jitorch.ones((2, 4), dtype=jitorch.bfloat16)
    with pytest.raises(RuntimeError, match="mixed dtype"):
        jitorch.nn.functional.layer_norm(x, (4,), jitorch.ones(4, dtype=jitorch.float64))


@pytest.mark.parametrize("shape", [(3000, 8, 3), (5000, 5, 2), (64, 9, 70)])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_middle_axis_sums_of_many_batches_are_torchs_bits(shape, dtype):
    # Narrow kept axes send every column through ATen's row_sum streams: one native call per stream over all
    # batches (a call per batch took 20-60x torch's time at 10^5 batches).
    a = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    j = jitorch.tensor(a).to(getattr(jitorch, dtype))
    t = torch.tensor(a).to(getattr(torch, dtype))
    assert np.array_equal(j.sum(1).float().numpy(), t.sum(1).float().numpy())
    assert np.array_equal(j.sum(1, dtype=jitorch.float32).numpy(), t.sum(1, dtype=torch.float32).numpy())
