"""fmod/remainder against torch: the native float32 kernel (exact, bit for bit; the IR's fmod primitive), NumPy's
path for other dtypes and layouts (ATen's remainder formula: a zero keeps the dividend's sign), gradients, and
compiled graphs (the rows' fusion expressions) equal to eager."""
import numpy as np
import pytest
import torch

import jitorch
from helpers import check_op, to_jitorch, to_torch

_SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.5, -7.0, 3.4e38, -3.4e38, 1e-45, -1e-45,
                     1.17549435e-38, 6.0, -2.0, 1e30, 1e-30], np.float32)


def _pairs(dtype):
    a, b = np.meshgrid(_SPECIAL, _SPECIAL)
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2 ** 32, (2, 4096), dtype=np.uint64).astype(np.uint32).view(np.float32)
    a = np.concatenate([a.ravel(), rng.uniform(-10, 10, 4096).astype(np.float32), bits[0]])
    b = np.concatenate([b.ravel(), rng.uniform(-3, 3, 4096).astype(np.float32), bits[1]])
    with np.errstate(all="ignore"):
        return a.astype(dtype), b.astype(dtype)


def _same_bits(got, want):
    got, want = got.numpy(), want.numpy()
    assert got.dtype == want.dtype
    same = (got == want) & (np.signbit(got) == np.signbit(want))
    bad = ~(same | (np.isnan(got) & np.isnan(want)))
    assert not bad.any(), (np.flatnonzero(bad)[:5], got[bad][:5], want[bad][:5])


@pytest.mark.parametrize("name", ["fmod", "remainder"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_values_bit_for_bit(name, dtype):
    a, b = _pairs(dtype)
    # torch's vectorized float32 fmod (Sleef) gives nan where x / y overflows float32; C's fmod (torch's scalar
    # loop, NumPy, this kernel) the exact remainder: compare those with C's.
    big = np.abs(a.astype(np.float64)) / np.abs(b.astype(np.float64)) >= 2.0 ** 128
    with np.errstate(all="ignore"):
        got = getattr(jitorch, name)(jitorch.tensor(a), jitorch.tensor(b))
        want = getattr(torch, name)(torch.from_numpy(a), torch.from_numpy(b))
        exact = np.fmod(a, b)
    if name == "remainder":
        exact = np.where((exact != 0) & ((b < 0) != (exact < 0)), exact + b, exact)
    want = torch.from_numpy(np.where(big, exact, want.numpy()))
    _same_bits(got, want)


@pytest.mark.parametrize("name", ["fmod", "remainder"])
@pytest.mark.parametrize("divisor", [1.5, -2.0, 3, 0.0, -0.0, float("inf"), 1e-30])
def test_scalar_operands(name, divisor):
    x = np.random.default_rng(1).uniform(-100, 100, (40, 50)).astype(np.float32)
    x[0, :4] = [0.0, -0.0, 6.0, -6.0]
    with np.errstate(all="ignore"):
        _same_bits(getattr(jitorch, name)(jitorch.tensor(x), divisor),
                   getattr(torch, name)(torch.from_numpy(x), divisor))
        if name == "remainder":  # a number over a tensor: __rmod__
            y = np.where(x == 0, 1.0, x).astype(np.float32)
            _same_bits(divisor % jitorch.tensor(y), divisor % torch.from_numpy(y))
    zero_d = np.float32(divisor)
    with np.errstate(all="ignore"):
        _same_bits(getattr(jitorch, name)(jitorch.tensor(x), jitorch.tensor(zero_d)),
                   getattr(torch, name)(torch.from_numpy(x), torch.tensor(zero_d)))


@pytest.mark.parametrize("name", ["fmod", "remainder"])
@pytest.mark.parametrize("layout", ["transposed", "sliced", "expanded"])
def test_layouts_and_broadcasting(name, layout):
    rng = np.random.default_rng(2)
    a = rng.uniform(-50, 50, (64, 48)).astype(np.float32)
    b = rng.uniform(-4, 4, (64, 48)).astype(np.float32)
    got = getattr(jitorch, name)(to_jitorch(a, layout), to_jitorch(b, layout))
    want = getattr(torch, name)(to_torch(a, layout), to_torch(b, layout))
    _same_bits(got, want)
    assert got.stride() == want.stride()
    for sa, sb in (((64, 48), (48,)), ((64, 1), (1, 48)), ((1,), (64, 48))):
        x, y = rng.uniform(-50, 50, sa).astype(np.float32), rng.uniform(-4, 4, sb).astype(np.float32)
        _same_bits(getattr(jitorch, name)(jitorch.tensor(x), jitorch.tensor(y)),
                   getattr(torch, name)(torch.from_numpy(x), torch.from_numpy(y)))


@pytest.mark.parametrize("name", ["fmod", "remainder"])
def test_small_zero_d_and_empty(name):
    for shape in ((), (0,), (3, 0), (5,)):
        a = np.full(shape, -4.0, np.float32)
        _same_bits(getattr(jitorch, name)(jitorch.tensor(a), 2.0), getattr(torch, name)(torch.from_numpy(a), 2.0))


@pytest.mark.parametrize("name", ["fmod", "remainder"])
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integers_unchanged(name, dtype):
    a = np.arange(-7, 8).astype(dtype)
    b = np.array([3, -3, 2, -2, 5] * 3).astype(dtype)
    check_op(getattr(jitorch, name), getattr(torch, name), [a, b], atol=0, rtol=0, grad=False)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        getattr(jitorch, name)(jitorch.tensor(a), jitorch.tensor(np.zeros_like(a)))


@pytest.mark.parametrize("name", ["fmod", "remainder"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gradients(name, dtype):
    rng = np.random.default_rng(3)
    a = rng.uniform(-20, 20, (30, 40)).astype(dtype)
    b = (rng.uniform(0.5, 3, (30, 40)) * rng.choice([-1, 1], (30, 40))).astype(dtype)
    check_op(getattr(jitorch, name), getattr(torch, name), [a, b], atol=1e-6, rtol=1e-6)
    check_op(getattr(jitorch, name), getattr(torch, name), [a, b[0]], atol=1e-5, rtol=1e-6)


@pytest.mark.parametrize("name", ["fmod", "remainder"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_compiled_equals_eager(name, dtype):
    a, b = _pairs(dtype)
    fn = getattr(jitorch, name)

    def f(x, y):
        return fn(x * 1.0, y) * 1.0

    compiled = jitorch.compile(f)
    x, y = jitorch.tensor(a), jitorch.tensor(b)
    with np.errstate(all="ignore"):
        _same_bits(compiled(x, y), f(x, y))
        _same_bits(compiled(x, y), fn(x, y))
