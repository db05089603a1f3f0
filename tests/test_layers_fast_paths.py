"""The shared layers' shortcuts: ``max(dim)``/``min(dim)`` through `fast_keep` (complex refusals raised there), the
`_numpy_names` renaming merged into the public wrapper, `fast_unary`'s direct native call (relu, sigmoid, silu, gelu)
and those rows native at every float32 size, lerp/addcmul/addcdiv past the dispatcher, a mean with nothing to record
as one kernel call, and `take_checked`. Each must give what the general path gives: torch's values, errors, autograd
nodes and modes.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
import jitorch.nn.functional as JF
import torch.nn.functional as TF
from jitorch.ops import native_eager
from jitorch.ops.table import OPS

from helpers import check_error, check_op, make_array


# -- max(dim)/min(dim) ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
@pytest.mark.parametrize("fn", ["max", "min"])
def test_max_min_dim_match_torch(fn, layout):
    x = make_array((6, 5), "float32", np.random.default_rng(0))
    for dim, keepdim in ((1, False), (0, True), (-1, False)):
        check_op(lambda a: getattr(a, fn)(dim, keepdim), lambda a: getattr(a, fn)(dim, keepdim), [x], layout=layout)
    t = jitorch.tensor(x, requires_grad=True)
    assert type(getattr(t, fn)(1).values.grad_fn).__name__ == ("MaxBackward0" if fn == "max" else "MinBackward0")
    with jitorch.no_grad():
        assert getattr(t, fn)(1).values.grad_fn is None
    with jitorch.inference_mode():
        out = getattr(t, fn)(1)
        assert out.values.is_inference() and out.indices.is_inference()


def test_max_dim_sees_in_place_writes_to_a_view():
    base = jitorch.zeros(4, 3)
    view = base[1:]
    base.add_(jitorch.arange(12.0).view(4, 3))  # the view's array is stale until synced
    assert view.max(1).values.tolist() == [5.0, 8.0, 11.0]


@pytest.mark.parametrize("fn", ["max", "min"])
def test_max_min_dim_refuse_complex_as_torch(fn):
    x = (np.ones((3, 3)) + 1j).astype(np.complex64)
    check_error(lambda a: getattr(a, fn)(1), lambda a: getattr(a, fn)(1), [x],
                match=f"{fn}(): does not support complex input")


# -- the NumPy keyword names in the public wrapper ------------------------------------------------------------------
def test_numpy_names_in_the_public_wrapper():
    x, y = make_array((2, 3), "float32"), make_array((2, 3), "float32", np.random.default_rng(1))
    check_op(lambda a, b: jitorch.cat([a, b], axis=1), lambda a, b: torch.cat([a, b], axis=1), [x, y])
    check_op(lambda a: jitorch.sum(a, axis=0, keepdims=True), lambda a: torch.sum(a, axis=0, keepdims=True), [x])
    with pytest.raises(TypeError, match="multiple values for argument 'dim'"):
        jitorch.sum(jitorch.tensor(x), dim=0, axis=1)
    # what an overriding type calls to compute renames too, and the wrapper is the module's function
    assert jitorch.cat.__jitorch_original__([jitorch.tensor(x)], axis=0).shape == (2, 3)
    assert jitorch.cat.__name__ == "cat" and jitorch.cat.__numpy_names__


# -- native unary rows at every float32 size ------------------------------------------------------------------------
UNARY = [("relu", lambda m: m.relu), ("sigmoid", lambda m: m.sigmoid), ("silu", lambda m: m.nn.functional.silu),
         ("gelu", lambda m: m.nn.functional.gelu), ("erf", lambda m: m.erf),
         ("softplus", lambda m: m.nn.functional.softplus), ("mish", lambda m: m.nn.functional.mish)]


@pytest.mark.parametrize("name,fn", UNARY, ids=[u[0] for u in UNARY])
def test_small_unary_rows_give_the_large_kernels_bits(name, fn):
    rng = np.random.default_rng(3)
    big = (rng.standard_normal(5000) * 4).astype(np.float32)
    big[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 60.0]
    whole = fn(jitorch)(jitorch.tensor(big)).numpy()
    for n in (1, 7, 64, 300):
        small = fn(jitorch)(jitorch.tensor(big[:n])).numpy()
        np.testing.assert_array_equal(small.view(np.int32), whole[:n].view(np.int32), err_msg=f"{name} at {n}")
    # (finite inputs: torch's vectorized gelu gives nan at inf, its own scalar formula and every jitorch path inf)
    check_op(fn(jitorch), fn(torch), [big[6:46].reshape(5, 8)], atol=1e-6, rtol=2e-6)


@pytest.mark.parametrize("name,fn", UNARY[:4], ids=[u[0] for u in UNARY[:4]])
def test_direct_unary_call_keeps_modes_layouts_and_dtypes(name, fn):
    x = make_array((6, 5), "float32", np.random.default_rng(4))
    for layout in ("contiguous", "transposed"):
        check_op(fn(jitorch), fn(torch), [x], layout=layout, atol=1e-6, rtol=2e-6)
    check_op(fn(jitorch), fn(torch), [x.astype(np.float64)], atol=1e-12, rtol=1e-12)
    t = jitorch.tensor(x, requires_grad=True)
    assert fn(jitorch)(t).grad_fn is not None
    with jitorch.no_grad():
        assert fn(jitorch)(t).grad_fn is None
    with jitorch.inference_mode():
        assert fn(jitorch)(t).is_inference()
    base = jitorch.zeros(4, 3)
    view = base[1:]
    base.add_(jitorch.tensor(x[:4, :3]))
    np.testing.assert_array_equal(fn(jitorch)(view).numpy(), fn(jitorch)(jitorch.tensor(x[1:4, :3])).numpy())


def test_unary_launcher_only_for_registered_rows():
    assert native_eager.unary_launcher(OPS["relu"]) is not None
    assert native_eager.unary_launcher(OPS["exp"]) is None  # one cheap ufunc: NumPy's
    run = native_eager.unary_launcher(OPS["sigmoid"])
    assert run(np.ones((3, 4), np.float32).T) is None  # not C-contiguous: the row's kernel decides
    assert run(np.ones(native_eager.HELD_MAX, np.float32)) is None  # large: the kernel, split over threads


# -- lerp / addcmul / addcdiv past the dispatcher ------------------------------------------------------------------
MULADD = [
    ("lerp scalar", lambda a, b, c: a.lerp(b, 0.3)),
    ("lerp scalar far", lambda a, b, c: a.lerp(b, 0.75)),
    ("lerp tensor", lambda a, b, c: a.lerp(b, c)),
    ("addcmul", lambda a, b, c: a.addcmul(b, c, value=0.5)),
    ("addcdiv", lambda a, b, c: a.addcdiv(b, c.abs() + 1, value=-2)),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,fn", MULADD, ids=[m[0] for m in MULADD])
def test_muladd_direct_path_matches_torch_bits(name, fn, dtype):
    rng = np.random.default_rng(5)
    xs = [make_array((8, 9), dtype, rng) for _ in range(3)]
    check_op(fn, fn, xs, atol=0, rtol=0, grad_atol=1e-6, grad_rtol=1e-6)
    check_op(fn, fn, xs, layout=["transposed", "contiguous", "contiguous"], atol=0, rtol=0, grad_atol=1e-6,
             grad_rtol=1e-6)
    a, b, c = (jitorch.tensor(x, requires_grad=True) for x in xs)
    names = {"lerp": "LerpBackward", "addcmul": "AddcmulBackward0", "addcdiv": "AddcdivBackward0"}
    assert type(fn(a, b, c).grad_fn).__name__.startswith(names[name.split()[0]])
    with jitorch.no_grad():
        assert fn(a, b, c).grad_fn is None
    with jitorch.inference_mode():
        assert fn(a, b, c).is_inference()


def test_muladd_fallbacks_broadcast_mixed_dtypes_and_stale_views():
    rng = np.random.default_rng(6)
    x, y, z = make_array((4, 5), "float32", rng), make_array((5,), "float32", rng), make_array((4, 1), "float32", rng)
    check_op(lambda a, b, c: a.addcmul(b, c, value=0.25), lambda a, b, c: a.addcmul(b, c, value=0.25), [x, y, z],
             atol=0, rtol=0, grad_atol=1e-6, grad_rtol=1e-6)
    check_op(lambda a, b: a.lerp(b, 0.3), lambda a, b: a.lerp(b, 0.3), [x, y], atol=0, rtol=0)
    check_error(lambda a, b: a.lerp(b, 0.5), lambda a, b: a.lerp(b, 0.5), [x, make_array((3, 5), "float32", rng)])
    check_error(lambda a, b: a.lerp(b, 0.5), lambda a, b: a.lerp(b, 0.5), [x, x.astype(np.float64)])
    check_op(lambda a, b: a.lerp(b, float("inf")), lambda a, b: a.lerp(b, float("inf")), [x, x * 2], atol=0,
             rtol=0, grad=False)
    base = jitorch.zeros(5, 5)
    view = base[1:]
    base.add_(jitorch.tensor(make_array((5, 5), "float32", rng)))
    other = jitorch.tensor(x)
    expected = jitorch.tensor(view.numpy().copy()).addcmul(other, other, value=0.5)
    np.testing.assert_array_equal(view.addcmul(other, other, value=0.5).numpy(), expected.numpy())


# -- mean as one kernel call ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_mean_without_history_is_the_sum_over_n(dtype):
    x = make_array((7, 33), dtype, np.random.default_rng(8))
    t = jitorch.tensor(x)
    for dim, keepdim in ((None, False), (1, True), (0, False), ((0, 1), False)):
        n = x.size if dim in (None, (0, 1)) else x.shape[dim]
        total = t.sum() if dim is None else t.sum(dim, keepdim)
        got = t.mean() if dim is None else t.mean(dim, keepdim)
        assert got.dtype == t.dtype
        np.testing.assert_array_equal(got.numpy(), (total / n).numpy())
        check_op(lambda a: a.mean() if dim is None else a.mean(dim, keepdim),
                 lambda a: a.mean() if dim is None else a.mean(dim, keepdim), [x], atol=1e-6, rtol=1e-6)
    g = jitorch.tensor(x, requires_grad=True)
    assert type(g.mean().grad_fn).__name__ == "MeanBackward0"
    with jitorch.no_grad():
        assert g.mean().grad_fn is None and g.mean().item() == t.mean().item()
    with jitorch.inference_mode():
        assert g.mean(1).is_inference()
    base = jitorch.zeros(3, 4)
    view = base[1:]
    base.add_(1.0)
    assert view.mean().item() == 1.0
    assert np.isnan(jitorch.zeros(0, 3).mean().item())
    check_op(lambda a: JF.mse_loss(a, a * 0.5), lambda a: TF.mse_loss(a, a * 0.5), [x], atol=1e-6, rtol=1e-6)
