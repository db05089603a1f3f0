"""float16 conversions and float16 arithmetic through the native F16C path give torch's bits."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from jitorch.codegen.llvm_half_cast import half_cast_function
from jitorch.ops import half_cast

needs_f16c = pytest.mark.skipif(half_cast_function("f32", "f16") is None, reason="the host CPU has no F16C")


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)


def _same(got, expected):
    """Bit-equal, NaNs included (their payloads too)."""
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(_bits(got), _bits(expected))


@needs_f16c
def test_every_float16_widens_to_torchs_float32():
    every = np.arange(65536, dtype=np.uint16).view(np.float16)
    _same(jitorch.tensor(every).float().numpy(), torch.tensor(every).float().numpy())
    _same(jitorch.tensor(every).double().numpy(), torch.tensor(every).double().numpy())


@needs_f16c
def test_float32_narrows_to_torchs_float16():
    rng = np.random.default_rng(0)
    edges = np.array([65504, 65519.996, 65520, -65520, 2.0 ** -24, 2.0 ** -25, 2.0 ** -25 * 1.0000001, 2.0 ** -14,
                      np.inf, -np.inf, np.nan, -0.0, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11], np.float32)
    values = np.concatenate([edges, rng.integers(0, 2 ** 32, 200_000, dtype=np.uint64).astype(np.uint32)
                             .view(np.float32), rng.standard_normal(5000).astype(np.float32)])
    _same(jitorch.tensor(values).half().numpy(), torch.tensor(values).half().numpy())


@pytest.mark.parametrize("layout", ["c", "f", "strided", "expanded", "small", "empty", "0-d"])
@pytest.mark.parametrize("to", ["half", "float"])
def test_layouts_and_sizes_match_torch(layout, to):
    rng = np.random.default_rng(1)
    source = rng.standard_normal((64, 96)).astype(np.float32 if to == "half" else np.float16)
    make = {"c": lambda t: t, "f": lambda t: t.t(), "strided": lambda t: t[:, ::3], "expanded":
            lambda t: t[:1].expand(64, 96), "small": lambda t: t[:3, :5], "empty": lambda t: t[:0],
            "0-d": lambda t: t[2, 3]}[layout]
    got = getattr(make(jitorch.tensor(source)), to)()
    expected = getattr(make(torch.tensor(source)), to)()
    _same(got.numpy(), expected.numpy())
    assert got.stride() == expected.stride()


def test_copy_into_another_float_dtype_converts_like_torch():
    source = np.random.default_rng(2).standard_normal((50, 70)).astype(np.float16)
    for dst_dtype in ("float32", "float64"):
        got = getattr(jitorch, "empty")(50, 70, dtype=getattr(jitorch, dst_dtype)).copy_(jitorch.tensor(source))
        expected = torch.empty(50, 70, dtype=getattr(torch, dst_dtype)).copy_(torch.tensor(source))
        _same(got.numpy(), expected.numpy())
    narrowed = jitorch.empty(50, 70, dtype=jitorch.float16).copy_(jitorch.tensor(source.astype(np.float32) / 3))
    _same(narrowed.numpy(), torch.empty(50, 70, dtype=torch.float16).copy_(
        torch.tensor(source.astype(np.float32) / 3)).numpy())


@needs_f16c
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "maximum", "minimum"])
@pytest.mark.parametrize("other_shape", [(40, 100), (100,), (40, 1)])
def test_float16_binary_ops_give_torchs_bits(op, other_shape):
    rng = np.random.default_rng(3)
    a = rng.integers(0, 65536, (40, 100), dtype=np.uint16).view(np.float16)
    b = rng.integers(0, 65536, other_shape, dtype=np.uint16).view(np.float16)
    got = getattr(jitorch, op)(jitorch.tensor(a), jitorch.tensor(b)).numpy()
    expected = getattr(torch, op)(torch.tensor(a), torch.tensor(b)).numpy()
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(got), nan)  # (payloads: NumPy's max/min keep the operand's)
    np.testing.assert_array_equal(_bits(got)[~nan], _bits(expected)[~nan])
    ufunc = getattr(np, {"sub": "subtract", "mul": "multiply", "div": "true_divide"}.get(op, op))
    assert half_cast.binary(ufunc, a, b) is not None


def test_float16_binary_op_gradients_match_torch():
    rng = np.random.default_rng(4)
    a, b = (rng.standard_normal((64, 64)).astype(np.float16) for _ in range(2))
    upstream = rng.standard_normal((64, 64)).astype(np.float16)
    grads = []
    for lib in (jitorch, torch):
        x, y = lib.tensor(a, requires_grad=True), lib.tensor(b, requires_grad=True)
        ((x * y + x) / (y.abs() + 1)).backward(lib.tensor(upstream))
        grads.append((x.grad.numpy(), y.grad.numpy()))
    for got, expected in zip(*grads):
        _same(got, expected)


def test_helpers_decline_what_they_do_not_convert():
    x = np.ones(4096, np.float32)
    assert half_cast.astype(x, np.float64) is None  # not a half conversion
    assert half_cast.astype(x[::2], np.float16) is None  # not dense
    assert half_cast.astype(np.ones(4096, ">f4"), np.float16) is None  # byte-swapped
    assert half_cast.astype(x[:10], np.float16) is None  # NumPy is quicker below MIN_SIZE
    assert half_cast.binary(np.power, x.astype(np.float16), x.astype(np.float16)) is None


@needs_f16c
@pytest.mark.parametrize("op", ["gt", "ge", "lt", "le", "eq", "ne"])
def test_float16_comparisons_match_torch(op):
    rng = np.random.default_rng(5)
    a = rng.integers(0, 65536, (50, 100), dtype=np.uint16).view(np.float16)
    b = rng.integers(0, 65536, (50, 100), dtype=np.uint16).view(np.float16)
    for other in (b, b[0], 0, 0.1, -1.5, 65504, 1e-8, float("inf"), float("nan"), 70000, 2 ** 40):
        got = getattr(jitorch, op)(jitorch.tensor(a), jitorch.tensor(other) if isinstance(other, np.ndarray) else other)
        expected = getattr(torch, op)(torch.tensor(a), torch.tensor(other) if isinstance(other, np.ndarray) else other)
        assert got.dtype == jitorch.bool
        np.testing.assert_array_equal(got.numpy(), expected.numpy())


@needs_f16c
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_float16_ops_with_numbers_match_torch(op):
    # add/sub round the number to float16 first; mul/div take it as float32 (ATen's opmath): both stay torch's.
    a = np.random.default_rng(6).integers(0, 65536, (60, 100), dtype=np.uint16).view(np.float16)
    for number in (0, 0.1, -1.5, 65504, 1e-8, 3, 1.1, 1e-5, float("inf"), float("nan"), 70000, 2 ** 40):
        got = getattr(jitorch, op)(jitorch.tensor(a), number).numpy()
        expected = getattr(torch, op)(torch.tensor(a), number).numpy()
        nan = np.isnan(expected)
        np.testing.assert_array_equal(np.isnan(got), nan)
        np.testing.assert_array_equal(_bits(got)[~nan], _bits(expected)[~nan])


def test_float16_signed_zero_ties_keep_their_semantics():
    zeros = np.array([-0.0] * 3000 + [0.0] * 3000, np.float16)
    flipped = zeros[::-1].copy()
    for op in ("maximum", "minimum"):  # NumPy's float16 loops keep the first operand (unchanged by widening)
        got = getattr(jitorch, op)(jitorch.tensor(zeros), jitorch.tensor(flipped)).numpy()
        np.testing.assert_array_equal(np.signbit(got), np.signbit(getattr(np, op)(zeros, flipped)))
    signed = np.tile(np.array([-0.0, 0.0, -1.0, 1.0], np.float16), 1000)
    for bounds in ((0.0, None), (-0.0, None), (None, 0.0), (None, -0.0), (0.0, 0.0), (-0.0, 0.0)):
        got = jitorch.tensor(signed).clamp(*bounds).numpy()  # torch's clamp by numbers keeps x's zero
        np.testing.assert_array_equal(np.signbit(got), np.signbit(torch.tensor(signed).clamp(*bounds).numpy()))
    np.testing.assert_array_equal(np.signbit(jitorch.relu(jitorch.tensor(signed)).numpy()),
                                  np.signbit(torch.relu(torch.tensor(signed)).numpy()))
    small = signed[:8]  # below the native threshold: the same answers
    np.testing.assert_array_equal(np.signbit(jitorch.relu(jitorch.tensor(small)).numpy()),
                                  np.signbit(torch.relu(torch.tensor(small)).numpy()))


@pytest.mark.parametrize("shape, dim", [((1000,), None), ((64, 1000), -1), ((1000, 64), 0), ((40, 50, 30), 1),
                                        ((3, 5000), None)])
@pytest.mark.parametrize("reduce", ["sum", "sum_f32", "mean"])
def test_float16_sums_widen_natively_and_match_torch(shape, dim, reduce):
    a = (np.random.default_rng(7).standard_normal(shape) * 10).astype(np.float16)

    def run(lib, values):
        x = lib.tensor(values)
        kwargs = {"dtype": lib.float32} if reduce == "sum_f32" else {}
        fn = x.mean if reduce == "mean" else x.sum
        return (fn(**kwargs) if dim is None else fn(dim, **kwargs)).numpy()
    got, expected = run(jitorch, a), run(torch, a)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=2e-3, atol=1e-2)
    whole = np.round(a).astype(np.float16)  # integers up to 2**11: every order sums them exactly
    whole = np.clip(whole, -4, 4)
    np.testing.assert_array_equal(run(jitorch, whole), run(torch, whole))
