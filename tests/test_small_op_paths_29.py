"""The small-call paths of the twenty-ninth session: short native kernels called without ctypes' argument conversion
(`ops.native_call`: the held launch of `native_eager.launch_arrays`, nll_loss's picked cascade sum, the top-k head,
the last-dim scan), nll_loss's backward of one gradient value on Python floats, and float32 ``amax``/``amin`` over
the last dim as one generated row reduction (`ops.native_row_extreme`).

Each runs against torch on its fast path and on the general one it stands in for (the declared ctypes calls, NumPy's
reduction), with 0-d, empty, non-contiguous, broadcast and integer inputs where the op takes them, gradients with
random upstream gradients, and the tracer and compiled calls that must still see the ops."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from jitorch.ops import native_eager, native_scan, native_topk, nn_nll, reduction
from jitorch.ops.native_call import held_function, int64, pointer
from jitorch.ops.native_row_extreme import row_extreme

F, TF = jitorch.nn.functional, torch.nn.functional


@pytest.fixture(params=["fast", "general"])
def path(request, monkeypatch):
    """Each test twice: on the new fast paths, and with them turned off (the declared calls, NumPy's reductions)."""
    if request.param == "general":
        for module in (nn_nll, native_topk, native_scan):
            monkeypatch.setattr(module, "HELD", False)
        monkeypatch.setattr(native_eager, "ARRAY_DATA_OFFSET", None)
        monkeypatch.setattr(reduction, "row_extreme", lambda a, reduce: None)
    return request.param


def _pair(a, requires_grad=False):
    return jitorch.tensor(a, requires_grad=requires_grad), torch.tensor(a, requires_grad=requires_grad)


def _check(got, want, exact=True, rtol=1e-6, atol=1e-6):
    """Values (bits when ``exact``), dtype, shape and strides as torch's (an empty tensor's strides are whatever
    torch's kernel left, (0, 0) for some: not compared)."""
    g, w = got.detach().numpy(), want.detach().numpy()
    assert g.dtype == w.dtype and g.shape == w.shape
    assert tuple(got.stride()) == tuple(want.stride()) or not g.size
    if exact:
        assert g.tobytes() == w.tobytes()
    else:
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def _backward_both(got, want, rng):
    g = rng.standard_normal(tuple(want.shape)).astype(want.detach().numpy().dtype)
    got.backward(jitorch.tensor(g))
    want.backward(torch.tensor(g))


# -- cross_entropy / nll_loss: the held picked sum and the backward's one value -------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(32, 32), (1, 5), (7, 1), (0, 4), (300, 10)])
@pytest.mark.parametrize("reduction_", ["mean", "sum", "none"])
def test_cross_entropy_values_and_gradients(path, dtype, shape, reduction_):
    rng = np.random.default_rng(sum(shape) + len(reduction_))
    x, tx = _pair((rng.standard_normal(shape) * 3).astype(dtype), requires_grad=True)
    t, tt = _pair(rng.integers(0, shape[1], shape[0]))
    got, want = F.cross_entropy(x, t, reduction=reduction_), TF.cross_entropy(tx, tt, reduction=reduction_)
    # (float32 mean/sum: torch's bits, the cascade sum of the picked values; an empty batch's mean: torch's NaN)
    _check(got, want, exact=dtype == np.float32 and reduction_ != "none" or not shape[0], rtol=1e-12)
    _backward_both(got, want, rng)
    _check(x.grad, tx.grad, exact=False, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("case", ["transposed", "ignored target", "uint8 targets", "column slice"])
def test_nll_loss_other_layouts_and_targets(path, case):
    rng = np.random.default_rng(7)
    base = rng.standard_normal((24, 40)).astype(np.float32)
    logits = base.T[:, :12] if case == "transposed" else base[:, 5:17] if case == "column slice" else base[:, :12]
    x, tx = _pair(np.ascontiguousarray(logits), requires_grad=True)
    if case in ("transposed", "column slice"):  # the views themselves, as the user's
        x, tx = (jitorch.tensor(base, requires_grad=True), torch.tensor(base, requires_grad=True))
        pick = (lambda v: v.t()[:, :12]) if case == "transposed" else (lambda v: v[:, 5:17])
        xs, txs = pick(x), pick(tx)
    else:
        xs, txs = x, tx
    targets = rng.integers(0, 12, xs.shape[0])
    ignore = -100
    if case == "ignored target":
        ignore = int(targets[3])
    if case == "uint8 targets":
        targets = targets.astype(np.uint8)
    t, tt = _pair(targets)
    for red in ("mean", "sum"):
        got = F.nll_loss(F.log_softmax(xs, 1), t, reduction=red, ignore_index=ignore)
        want = TF.nll_loss(TF.log_softmax(txs, 1), tt, reduction=red, ignore_index=ignore)
        _check(got, want, exact=False, rtol=1e-6)
        _backward_both(got, want, rng)
        _check(x.grad, tx.grad, exact=False, rtol=1e-5, atol=1e-7)


def test_nll_loss_of_a_zero_d_target_and_out_of_range_targets(path):
    x, tx = _pair(np.float32([-1.0, -2.0, -0.5]), requires_grad=True)
    t, tt = _pair(np.array(2))
    got, want = F.nll_loss(x, t), TF.nll_loss(tx, tt)
    _check(got, want)
    _backward_both(got, want, np.random.default_rng(1))
    _check(x.grad, tx.grad)
    with pytest.raises(IndexError, match="Target 9 is out of bounds"):
        F.cross_entropy(jitorch.randn(4, 3), jitorch.tensor([0, 1, 9, 2]))


def test_nll_backward_of_one_value_matches_the_array_formula():
    """The Python-float quotient stored into float32 is NumPy's float32 quotient, for awkward counts and values."""
    rng = np.random.default_rng(11)
    for n in (1, 3, 7, 10, 31, 1000):
        for g in (np.float32(1.0), np.float32(rng.standard_normal()), np.float32(3e-39), np.float32(np.inf)):
            target = rng.integers(0, 5, n)
            got = nn_nll._nll_backward_kernel(np, np.asarray(g), target, (n, 5), -100, "mean")
            want = np.zeros((n, 5), np.float32)
            want[np.arange(n), target] = -np.asarray(g) / n
            assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


# -- softmax family, pointwise rows through the held launch --------------------------------------------------------
@pytest.mark.parametrize("shape", [(32, 32), (3, 4, 5), (1, 7), (0, 6), (5,)])
def test_softmax_and_log_softmax_with_gradients(path, shape):
    rng = np.random.default_rng(len(shape) + sum(shape))
    for fn in ("softmax", "log_softmax"):
        x, tx = _pair(rng.standard_normal(shape).astype(np.float32), requires_grad=True)
        got, want = getattr(F, fn)(x, -1), getattr(TF, fn)(tx, -1)
        _check(got, want, exact=False)
        _backward_both(got, want, rng)
        _check(x.grad, tx.grad, exact=False, rtol=1e-5)


def test_held_launch_of_pointwise_rows_and_broadcasts(path):
    rng = np.random.default_rng(3)
    a, ta = _pair(rng.standard_normal((32, 32)).astype(np.float32), requires_grad=True)
    b, tb = _pair(rng.standard_normal((32, 32)).astype(np.float32))
    row, trow = _pair(rng.standard_normal(32).astype(np.float32))
    cases = [(lambda m, x, y, r: x.sigmoid()), (lambda m, x, y, r: m.nn.functional.gelu(x)),
             (lambda m, x, y, r: x.lerp(y, 0.3)), (lambda m, x, y, r: x.lerp(y, 0.7)),
             (lambda m, x, y, r: x.addcmul(y, y, value=0.5)), (lambda m, x, y, r: x.add(y, alpha=0.1)),
             (lambda m, x, y, r: x.t().sigmoid()), (lambda m, x, y, r: x.add(r, alpha=2.0)),
             (lambda m, x, y, r: x[:, ::2].lerp(y[:, ::2], 0.25))]
    for case in cases:
        a.grad = ta.grad = None
        got, want = case(jitorch, a, b, row), case(torch, ta, tb, trow)
        _check(got, want, exact=False, rtol=1e-6)
        _backward_both(got, want, rng)
        _check(a.grad, ta.grad, exact=False, rtol=1e-5)


# -- top-k and cumsum through held calls ----------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(32, 32), (4, 3, 17), (9,), (2, 0)])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_values_indices_and_gradient(path, shape, largest):
    rng = np.random.default_rng(sum(shape) + largest)
    data = rng.standard_normal(shape).astype(np.float32)
    x, tx = _pair(data, requires_grad=True)
    k = min(3, shape[-1])
    (v, i), (tv, ti) = x.topk(k, largest=largest), tx.topk(k, largest=largest)
    _check(v, tv)
    _check(i, ti)
    _backward_both(v, tv, rng)
    _check(x.grad, tx.grad)


def test_topk_ties_nan_and_non_contiguous_rows(path):
    data = np.float32([[1, 3, 3, np.nan, 2, 2, 0, 3], [5, 5, 5, 5, 1, 1, 1, 1]] * 3)
    x, tx = _pair(data)
    for xs, txs in ((x, tx), (x.t(), tx.t()), (x[:, 1::2], tx[:, 1::2])):
        (v, i), (tv, ti) = xs.topk(3), txs.topk(3)
        assert np.array_equal(v.numpy(), tv.numpy(), equal_nan=True)
        _check(i, ti)


@pytest.mark.parametrize("case", ["rows", "3-d last", "3-d middle", "transposed", "empty", "0-d", "int64", "prod"])
def test_cumsum_as_torch(path, case):
    rng = np.random.default_rng(len(case))
    data = {"rows": rng.standard_normal((32, 32)), "3-d last": rng.standard_normal((4, 8, 16)),
            "3-d middle": rng.standard_normal((4, 8, 16)), "transposed": rng.standard_normal((16, 24)),
            "empty": np.zeros((0, 5)), "0-d": np.array(1.5), "int64": rng.integers(-5, 5, (8, 40)),
            "prod": rng.uniform(0.5, 1.5, (16, 20))}[case]
    data = data.astype(np.int64 if case == "int64" else np.float32)
    grad = case != "int64"
    x, tx = _pair(data, requires_grad=grad)
    if case == "transposed":
        x, tx = x.t(), tx.t()
    dim = 1 if case == "3-d middle" else -1
    got, want = (x.cumprod(dim), tx.cumprod(dim)) if case == "prod" else (x.cumsum(dim), tx.cumsum(dim))
    _check(got, want)
    if grad:
        _backward_both(got, want, rng)
        leaf, tleaf = (x, tx) if case != "transposed" else (x._base, tx._base)
        _check(leaf.grad, tleaf.grad, exact=False, rtol=1e-5, atol=1e-6)


# -- amax / amin over the last dim ----------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(32, 32), (4, 8, 5), (2, 2), (3, 1), (1, 7), (0, 5), (200, 100), (7,)])
@pytest.mark.parametrize("keepdim", [False, True])
def test_amax_amin_last_dim_with_gradients(path, shape, keepdim):
    rng = np.random.default_rng(sum(shape) + keepdim)
    data = rng.standard_normal(shape).astype(np.float32)
    for name in ("amax", "amin"):
        x, tx = _pair(data, requires_grad=True)
        got, want = getattr(x, name)(-1, keepdim=keepdim), getattr(tx, name)(-1, keepdim=keepdim)
        _check(got, want)
        if got.numel():
            _backward_both(got, want, rng)
            _check(x.grad, tx.grad)


def test_amax_nan_rows_infinities_other_dtypes_and_layouts(path):
    rng = np.random.default_rng(5)
    data = rng.standard_normal((16, 33)).astype(np.float32)
    data[3, 7] = data[9, 0] = np.nan
    data[5, :] = -np.inf
    data[6, 32] = np.inf
    x, tx = _pair(data)
    for view in (lambda v: v, lambda v: v.t(), lambda v: v[:, ::3], lambda v: v[2:4].expand(3, 2, 33)):
        for name in ("amax", "amin"):
            got, want = getattr(view(x), name)(-1), getattr(view(tx), name)(-1)
            assert got.dtype == jitorch.float32 and tuple(got.shape) == tuple(want.shape)
            assert np.array_equal(got.numpy(), want.numpy(), equal_nan=True)
    if path == "fast":  # torch's NaN is the default quiet one whatever the row held (NumPy kept a -NaN's sign)
        data[7, 4] = -np.float32(np.nan)
        x, tx = _pair(data)
        for name in ("amax", "amin"):
            _check(getattr(x, name)(-1), getattr(tx, name)(-1))
    for dtype in (np.float64, np.int32, np.int64):
        x, tx = _pair((data if dtype == np.float64 else np.nan_to_num(data, nan=0, neginf=-7, posinf=7)).astype(dtype))
        _check(x.amax(-1), tx.amax(-1), exact=dtype != np.float64)
        np.testing.assert_array_equal(x.amin(-1).numpy(), tx.amin(-1).numpy())
    _check(_pair(np.float32(2.5))[0].amax(-1), torch.tensor(np.float32(2.5)).amax(-1))


def test_row_extreme_refuses_what_it_does_not_take():
    assert row_extreme(np.zeros((4, 4)), "max") is None  # float64
    assert row_extreme(np.zeros((4, 8), np.float32)[:, ::2], "max") is None  # strided
    assert row_extreme(np.zeros((1, 8), np.float32), "max") is None  # one row
    assert row_extreme(np.zeros(8, np.float32), "max") is None  # 1-d
    assert row_extreme(np.zeros((200, 100), np.float32), "max") is None  # past a held call's size
    out = row_extreme(np.float32([[1, -2], [-3, 4]]), "min")
    assert out.tolist() == [-2.0, -3.0] and out.dtype == np.float32


def test_held_function_passes_pointers_and_int64_exactly():
    """Addresses above 32 bits and int64 sizes reach the kernel whole (a bare Python int would be a C int)."""
    from jitorch.codegen.llvm_cascade import level_power, picked_cascade_function

    rng = np.random.default_rng(2)
    logp = rng.standard_normal((5000, 3)).astype(np.float32)
    target = rng.integers(0, 3, 5000)
    fn = picked_cascade_function("f32")
    held, want = np.empty(1, np.float32), np.empty(1, np.float32)
    held_function(fn)(pointer(logp), pointer(target), int64(5000), int64(3), int64(level_power(5000)),
                      pointer(held))
    fn(logp.ctypes.data, target.ctypes.data, 5000, 3, level_power(5000), want.ctypes.data)
    assert held.tobytes() == want.tobytes()
    assert held_function(fn) is held_function(fn)
    assert int64(2 ** 40).value == 2 ** 40 and int64(7).value == 7


# -- the tracer and the compiled calls still see the ops -----------------------------------------------------------
def _step(x, t):
    v, _ = x.topk(2)
    return F.cross_entropy(x, t) + x.amax(-1).sum() + x.amin(-1).mean() + x.cumsum(-1).sum() * 0.01 + v.sum() + \
        F.log_softmax(x, -1).mean() + x.sigmoid().sum() + x.lerp(x.exp(), 0.3).sum()


def test_traced_and_compiled_calls_see_the_ops():
    x, t = jitorch.randn(6, 8), jitorch.tensor([0, 2, 1, 7, 3, 3])
    want = _step(x, t)
    gm = jitorch.fx.symbolic_trace(_step)
    names = " ".join(str(n.target) for n in gm.graph.nodes)
    for op in ("topk", "cross_entropy", "amax", "amin", "cumsum", "log_softmax", "sigmoid", "lerp"):
        assert op in names, op
    np.testing.assert_allclose(gm(x, t).numpy(), want.numpy(), rtol=1e-5)
    for mode in (None, "reduce-overhead"):
        compiled = jitorch.compile(_step) if mode is None else jitorch.compile(_step, mode=mode)
        for _ in range(3):
            x = jitorch.randn(6, 8)
            np.testing.assert_allclose(compiled(x, t).numpy(), _step(x, t).numpy(), rtol=1e-5, atol=1e-6)


def test_compiled_training_step_gradients_match_eager():
    t = jitorch.tensor([0, 2, 1, 7, 3, 3])
    w = jitorch.randn(8, 8, requires_grad=True)

    def loss_of(x):
        return _step(x @ w, t)

    compiled = jitorch.compile(loss_of)
    for _ in range(2):
        x = jitorch.randn(6, 8)
        w.grad = None
        loss_of(x).backward()
        want = w.grad.clone()
        w.grad = None
        compiled(x).backward()
        np.testing.assert_allclose(w.grad.numpy(), want.numpy(), rtol=1e-4, atol=1e-5)
