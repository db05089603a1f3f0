"""complex64 division and reciprocal as ATen's (Smith's algorithm with fused multiply-adds): bit for bit against
PyTorch on random values over a wide range of magnitudes and on the special values (zeros of either sign, infinities,
NaN, subnormals, near-overflow), for tensor / tensor, tensor / number, number / tensor, broadcasting, non-contiguous
operands, and their gradients."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import jitorch
from helpers import check_op

SPECIALS = [0, -0.0, complex(0, -0.0), complex(-0.0, -0.0), np.inf, -np.inf, complex(np.inf, 1), complex(1, -np.inf),
            complex(np.inf, np.inf), complex(np.nan, 0), complex(0, np.nan), 1e-40, 1e-40j, 1e-45 + 1e-45j,
            3e38 + 3e38j, -3e38 + 1j, 1e30 + 1e-30j, 1 + 1j, -2.5, 0.5j]


def _values(n, seed):
    """``n`` complex64 values whose parts span 10^-17 to 10^17, the specials first."""
    rng = np.random.default_rng(seed)
    scale = np.exp(rng.uniform(-40, 40, (2, n)))
    z = (rng.standard_normal(n) * scale[0] + 1j * rng.standard_normal(n) * scale[1]).astype(np.complex64)
    z[:len(SPECIALS)] = np.array(SPECIALS, np.complex64)
    return z


def _same_bits(got, want):
    """Equal float32 parts bit for bit (signed zeros included), NaN matching NaN whatever its payload and sign."""
    g = np.ascontiguousarray(got.detach().numpy()).view(np.float32)
    w = np.ascontiguousarray(want.detach().numpy()).view(np.float32)
    both_nan = np.isnan(g) & np.isnan(w)
    same = (g.view(np.uint32) == w.view(np.uint32)) | both_nan
    bad = np.nonzero(~same.reshape(-1, 2).all(1))[0]
    assert not len(bad), f"{len(bad)} values differ, first at {bad[:5]}: {got.reshape(-1)[bad[:5]]} vs " \
                         f"{want.reshape(-1)[bad[:5]]}"


@pytest.mark.parametrize("n", [1, 7, len(SPECIALS), 4099])
def test_reciprocal_bitwise_as_torch(n):
    z = _values(max(n, len(SPECIALS)), 0)[:n]
    _same_bits(jitorch.from_numpy(z).reciprocal(), torch.from_numpy(z).reciprocal())
    _same_bits(1 / jitorch.from_numpy(z), 1 / torch.from_numpy(z))


@pytest.mark.parametrize("n", [3, 4099])
def test_division_bitwise_as_torch(n):
    num, den = _values(max(n, 64), 1)[:n], _values(max(n, 64), 2)[:n]
    den[::-1][:min(n, len(SPECIALS))] = np.array(SPECIALS, np.complex64)[:n]  # specials against every numerator
    _same_bits(jitorch.from_numpy(num) / jitorch.from_numpy(den), torch.from_numpy(num) / torch.from_numpy(den))
    num, den = np.meshgrid(np.array(SPECIALS, np.complex64), np.array(SPECIALS, np.complex64))
    _same_bits(jitorch.from_numpy(num) / jitorch.from_numpy(den), torch.from_numpy(num) / torch.from_numpy(den))


@pytest.mark.parametrize("n", [300, 5000])  # pairs read in place; planes
@pytest.mark.parametrize("other", [2.5, -3, 1e-39, 0, 0.5 - 2j, complex(np.inf, 0)])
def test_division_by_and_of_numbers_bitwise_as_torch(other, n):
    z = _values(n, 3)
    jz, tz = jitorch.from_numpy(z), torch.from_numpy(z)
    _same_bits(jz / other, tz / other)
    _same_bits(jz.div(other), tz.div(other))
    if other != 1e-39:  # ``number / z`` is ``reciprocal(z) * number``: NumPy's complex product fuses a multiply-add
        _same_bits(other / jz, other / tz)  # (an underflowed real part's zero sign differs from ATen's)


def test_broadcast_noncontiguous_promoted_and_inplace_forms():
    z = _values(60, 4).reshape(6, 10)
    jz, tz = jitorch.from_numpy(z), torch.from_numpy(z)
    _same_bits(jz.t() / jz[:1].t(), tz.t() / tz[:1].t())
    _same_bits(jz[:, ::3] / jz[0, ::3], tz[:, ::3] / tz[0, ::3])
    _same_bits(jz[2, 3] / jz, tz[2, 3] / tz)  # a 0-d numerator
    r = np.arange(10, dtype=np.float32)
    _same_bits(jitorch.from_numpy(r) / jz, torch.from_numpy(r) / tz)  # float promoted to complex64
    a, b = jz.clone(), tz.clone()
    a /= jz.flip(0)
    b /= tz.flip(0)
    _same_bits(a, b)
    _same_bits(jitorch.reciprocal(jz[:, 1]), torch.reciprocal(tz[:, 1]))
    big = _values(5000, 7).reshape(100, 50)
    jb, tb = jitorch.from_numpy(big), torch.from_numpy(big)
    _same_bits(jb / jb[3], tb / tb[3])  # a broadcast row, as planes
    _same_bits(jb[:, :1] / jb.t().reshape(100, 50), tb[:, :1] / tb.t().reshape(100, 50))
    e = np.zeros((0, 3), np.complex64)
    assert (jitorch.from_numpy(e) / jitorch.from_numpy(e)).shape == (0, 3)


def test_gradients_as_torch():
    rng = np.random.default_rng(5)
    a = (rng.standard_normal((4, 5)) + 1j * rng.standard_normal((4, 5))).astype(np.complex64)
    b = (rng.standard_normal((4, 5)) + 1j * rng.standard_normal((4, 5))).astype(np.complex64)
    check_op(lambda x, y: x / y, lambda x, y: x / y, [a, b], atol=1e-5, rtol=1e-5)
    check_op(lambda x: x.reciprocal(), lambda x: x.reciprocal(), [a], atol=1e-5, rtol=1e-5)
    check_op(lambda x: 2.5 / x, lambda x: 2.5 / x, [a], atol=1e-5, rtol=1e-5, layout="transposed")


def test_complex128_keeps_numpy_and_values_match_torch():
    z = _values(200, 6)[len(SPECIALS):].astype(np.complex128)
    got, want = jitorch.from_numpy(z).reciprocal(), torch.from_numpy(z).reciprocal()
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-15, atol=0)


def test_results_keep_the_operands_layout_as_torch():
    # The kernel computes in the first full operand's memory order: a transposed or channels_last input gives a
    # result of the same layout, as torch's (a later .view relies on it).
    z = (np.random.default_rng(5).standard_normal((4, 5, 2, 8, 2)) @ [1, 1j]).astype(np.complex64)
    for lib in (jitorch, torch):
        t = lib.tensor(z[:, :, 0, 0]).t()
        cl = lib.tensor(z).to(memory_format=lib.channels_last)
        got = [r.stride() for r in (t.reciprocal(), t / 3, 3 / t, t / t, cl / 2, cl / cl, 1 / cl)]
        if lib is jitorch:
            mine = got
        else:
            assert mine == got
    assert jitorch.tensor(z[:, :, 0, 0]).t().reciprocal().t().view(-1).shape == (20,)
