"""tril/triu (cached masks, the native select), flip (the reversed-copy kernel) and float32 cumprod (ATen's float64
running product) against torch: values bit for bit, layouts, gradients with random upstream gradients."""
import numpy as np
import pytest
import torch

import jitorch
from tests.helpers import assert_same, check_op, make_array

SHAPES_2D = [(1000, 1000), (316, 316), (32, 32), (50, 7), (7, 50), (2, 3)]


def _bits(j, t):
    jn, tn = j.detach().numpy(), t.detach().numpy()
    assert jn.dtype == tn.dtype and jn.shape == tn.shape
    assert np.array_equal(np.ascontiguousarray(jn).view(np.uint8), np.ascontiguousarray(tn).view(np.uint8))
    assert j.stride() == t.stride()


@pytest.mark.parametrize("name", ["tril", "triu"])
@pytest.mark.parametrize("shape", SHAPES_2D + [(3, 40, 50), (2, 2, 20, 9)])
@pytest.mark.parametrize("diagonal", [0, 1, -1, 7, -7, 10**12, -10**12])
def test_triangle_values_bitwise(name, shape, diagonal):
    a = make_array(shape, rng=np.random.default_rng(1))
    a.flat[0], a.flat[-1] = np.nan, -0.0
    j = getattr(jitorch, name)(jitorch.from_numpy(a), diagonal)
    t = getattr(torch, name)(torch.from_numpy(a), diagonal)
    _bits(j, t)


@pytest.mark.parametrize("dtype", ["float64", "int64", "int32", "bool", "float16"])
@pytest.mark.parametrize("name", ["tril", "triu"])
def test_triangle_dtypes(dtype, name):
    a = make_array((20, 30), dtype, rng=np.random.default_rng(2))
    for d in (0, 3, -2):
        _bits(getattr(jitorch, name)(jitorch.from_numpy(a), d), getattr(torch, name)(torch.from_numpy(a), d))


@pytest.mark.parametrize("name", ["tril", "triu"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
@pytest.mark.parametrize("shape", [(40, 30), (0, 4), (4, 0), (3, 5, 6)])
def test_triangle_layouts_and_grad(name, layout, shape):
    a = make_array(shape, rng=np.random.default_rng(3))
    check_op(lambda x: getattr(jitorch, name)(x, 2), lambda x: getattr(torch, name)(x, 2), [a], atol=0, rtol=0,
             layout=layout)


def test_triangle_refuses_1d():
    a = np.ones(4, np.float32)
    for name in ("tril", "triu"):
        with pytest.raises(RuntimeError, match=name):
            getattr(jitorch, name)(jitorch.from_numpy(a))
        with pytest.raises(RuntimeError):
            getattr(torch, name)(torch.from_numpy(a))


@pytest.mark.parametrize("shape", SHAPES_2D + [(4, 30, 200), (200, 16), (200, 15), (5,)])
@pytest.mark.parametrize("dims", [(0,), (-1,), (0, -1)])
def test_flip_values_bitwise(shape, dims):
    a = make_array(shape, rng=np.random.default_rng(4))
    a.flat[0] = np.nan
    if len(shape) == 1 and dims == (0, -1):
        dims = (0,)
    _bits(jitorch.flip(jitorch.from_numpy(a), dims), torch.flip(torch.from_numpy(a), dims))


@pytest.mark.parametrize("dtype", ["float64", "int64", "int8", "bool", "float16"])
def test_flip_dtypes(dtype):
    a = make_array((64, 300), dtype, rng=np.random.default_rng(5))
    for dims in ((1,), (0, 1), (0,)):
        _bits(jitorch.flip(jitorch.from_numpy(a), dims), torch.flip(torch.from_numpy(a), dims))


def test_flip_zero_dim():
    a = np.array(2.5, np.float32)
    for dims in ((), (0,), (-1,)):
        j, t = jitorch.flip(jitorch.from_numpy(a), dims), torch.flip(torch.from_numpy(a), dims)
        assert_same(j, t)


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
@pytest.mark.parametrize("dims", [(1,), (0, 1), (0, 2), (-1, 1)])
def test_flip_layouts_and_grad(layout, dims):
    a = make_array((6, 50, 40), rng=np.random.default_rng(6))
    res = check_op(lambda x: jitorch.flip(x, dims), lambda x: torch.flip(x, dims), [a], atol=0, rtol=0, layout=layout)
    assert res[0].stride() == res[1].stride()


def _cumprod_input(shape, kind, seed):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 1.5, shape).astype(np.float32) if kind != "wide" else make_array(shape, rng=rng)
    if kind == "zeros":
        a[rng.random(shape) < 0.02] = 0.0
        a[rng.random(shape) < 0.02] = -0.0
    return a


@pytest.mark.parametrize("shape,dim", [((1000, 1000), 1), ((1000, 1000), 0), ((7, 50, 9), 1), ((300,), 0),
                                       ((4, 3, 100), -1), ((100, 3), 0)])
@pytest.mark.parametrize("kind", ["uniform", "zeros", "wide"])
def test_cumprod_float32_bitwise(shape, dim, kind):
    # ATen's CPU kernel: a float64 running product from 1, each output rounded to float32 once.
    a = _cumprod_input(shape, kind, 7)
    _bits(jitorch.cumprod(jitorch.from_numpy(a), dim), torch.cumprod(torch.from_numpy(a), dim))


@pytest.mark.parametrize("kind", ["uniform", "zeros"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cumprod_grad(kind, layout, dim):
    a = _cumprod_input((20, 30, 8), kind, 8)
    if kind == "zeros":
        a[3, :, 2] = 0.0  # two zeros in one scan line, and one at its start
        a[0, 0, :] = 0.0
    check_op(lambda x: jitorch.cumprod(x, dim), lambda x: torch.cumprod(x, dim), [a], atol=1e-6, rtol=1e-5,
             grad_atol=1e-5, grad_rtol=1e-4, layout=layout)


@pytest.mark.parametrize("dtype", ["int64", "int32", "float64", "bool"])
def test_cumprod_other_dtypes(dtype):
    a = make_array((30, 40), dtype, rng=np.random.default_rng(9), low=-2, high=2)
    for dim in (0, 1):
        assert_same(jitorch.cumprod(jitorch.from_numpy(a), dim), torch.cumprod(torch.from_numpy(a), dim))


def test_cumprod_zero_dim_and_empty():
    for a in (np.array(1.5, np.float32), np.zeros((0, 5), np.float32), np.zeros((5, 0), np.float32)):
        assert_same(jitorch.cumprod(jitorch.from_numpy(a), 0), torch.cumprod(torch.from_numpy(a), 0))
